#!/usr/bin/env python3
"""Write an MPNet encoder (config.json + model.safetensors) as an fp32 ONNX graph.

Why this exists: like .ci/bert_to_onnx.py, but for all-mpnet-base-v2, whose PyPI copy
is safetensors only. Exporting through torch would make the set-up script download
several gigabytes; the encoder is written out operator by operator with the `onnx`
package and numpy instead. MPNet differs from BERT in four places, all mirrored from
transformers' modeling_mpnet.py:
  - position ids count non-padding tokens from padding_idx + 1 (padding_idx = 1), as
    create_position_ids_from_input_ids does; padding tokens get position 1;
  - there are no token type embeddings;
  - every layer adds one shared relative position bias (32 buckets x heads) to its
    attention scores before the softmax;
  - the weights are named attention.attn.{q,k,v,o} and attention.LayerNorm.
The graph's output (`last_hidden_state`) matched transformers' MPNetModel to 1.4e-6 and
a torch ONNX export exactly; the Rust parity test (`tests/it/memory.rs`, fixture made by
`tests/data/memory/make_reference_mpnet.py`) checks the pooled vectors to 1e-4.

Usage: mpnet_to_onnx.py MODEL_DIR OUT.onnx
Inputs of the graph: input_ids, attention_mask (int64, [batch, seq]).
Output: last_hidden_state (float32, [batch, seq, hidden]). Pooling happens in Rust.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bert_to_onnx import Encoder, Graph, read_safetensors  # noqa: E402

PADDING_IDX = 1  # fixed in MPNetEmbeddings, whatever config.json says
NUM_BUCKETS, MAX_DISTANCE = 32, 128  # compute_position_bias' defaults, not the config's


def strip_prefix(tensors):
    """Some checkpoints name weights `mpnet.encoder...`, others `encoder...`."""
    return {k[6:] if k.startswith("mpnet.") else k: v for k, v in tensors.items()}


def relative_position_bucket(relative_position):
    """MPNetEncoder.relative_position_bucket in numpy, in float32 as torch computes it.

    Bidirectional: half the buckets for keys after the query, half for keys before;
    in each half, distances below 8 get a bucket each, longer ones share log-spaced
    buckets up to MAX_DISTANCE.
    """
    num_buckets = NUM_BUCKETS // 2
    n = -relative_position
    ret = (n < 0).astype(np.int64) * num_buckets
    n = np.abs(n)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    ratio = np.maximum(n, 1).astype(np.float32) / np.float32(max_exact)  # n = 0 is small anyway
    scaled = np.log(ratio) / np.float32(math.log(MAX_DISTANCE / max_exact)) * np.float32(num_buckets - max_exact)
    val_if_large = np.minimum(max_exact + scaled.astype(np.int64), num_buckets - 1)
    return ret + np.where(is_small, n, val_if_large)


def build(model_dir, out_path):
    model_dir = Path(model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    w = strip_prefix(read_safetensors(model_dir / "model.safetensors"))
    max_len = cfg["max_position_embeddings"]
    g = Graph()
    e = Encoder(g, w, cfg)

    # Embeddings: word + position, then LayerNorm. Position ids come from input_ids,
    # not from attention_mask: padding_idx + cumsum(not_pad) * not_pad, where not_pad
    # marks tokens other than the pad id (1). So the first real token is at 2.
    word = g.op("Gather", [g.const("word_emb", w["embeddings.word_embeddings.weight"]), "input_ids"], axis=0)
    pad = g.const("pad_id", np.array(PADDING_IDX, np.int64))
    not_pad = g.op("Cast", [g.op("Not", [g.op("Equal", ["input_ids", pad])])], to=TensorProto.INT64)
    counted = g.op("CumSum", [not_pad, g.const("axis", np.array(1, np.int64))])
    positions = g.op("Add", [g.op("Mul", [counted, not_pad]), pad])
    pos = g.op("Gather", [g.const("pos_emb", w["embeddings.position_embeddings.weight"]), positions], axis=0)
    x = e.layer_norm(g.op("Add", [word, pos]), "embeddings.LayerNorm")
    bias_mask = e.mask_bias()

    # Relative position bias [1, heads, seq, seq], shared by all layers. The bias for
    # key j seen from query i depends only on j - i, so a table holds it for every
    # distance in [-(max_len - 1), max_len - 1]; the graph looks up j - i + max_len - 1.
    distances = np.arange(-(max_len - 1), max_len, dtype=np.int64)
    table = w["encoder.relative_attention_bias.weight"][relative_position_bucket(distances)]
    seq_len = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const("one", np.array(1, np.int64))], axis=0)
    steps = g.op("Range", [g.const("zero", np.array(0, np.int64)), seq_len, g.const("step", np.array(1, np.int64))])
    keys = g.op("Unsqueeze", [steps, g.const("axis0", np.array([0], np.int64))])  # [1, seq]: j
    queries = g.op("Unsqueeze", [steps, g.const("axis1", np.array([1], np.int64))])  # [seq, 1]: i
    index = g.op("Add", [g.op("Sub", [keys, queries]), g.const("offset", np.array(max_len - 1, np.int64))])
    rel = g.op("Gather", [g.const("rel_bias", table), index], axis=0)  # [seq, seq, heads]
    rel = g.op("Unsqueeze", [g.op("Transpose", [rel], perm=[2, 0, 1]), g.const("axis0", np.array([0], np.int64))])
    # Both biases are added to the scores of every layer; sum them once.
    score_bias = g.op("Add", [rel, bias_mask])  # [batch, heads, seq, seq]

    def names(i):
        p = f"encoder.layer.{i}"
        a = p + ".attention"
        return (a + ".attn.q", a + ".attn.k", a + ".attn.v", a + ".attn.o", a + ".LayerNorm",
                p + ".intermediate.dense", p + ".output.dense", p + ".output.LayerNorm")

    x = e.layers(x, score_bias, cfg["num_hidden_layers"], names)
    e.save(x, "mpnet_encoder", ["input_ids", "attention_mask"], out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: mpnet_to_onnx.py MODEL_DIR OUT.onnx")
    build(sys.argv[1], sys.argv[2])
