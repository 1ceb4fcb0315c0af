#!/usr/bin/env python3
"""Python onnxruntime on the same model, tokenizer, batch size and thread count as the
Rust embedder's throughput line in `cargo bench --bench memory` ("embedding throughput").

    python3 -m venv /tmp/ortpy && /tmp/ortpy/bin/pip install onnxruntime==1.31.1 tokenizers numpy
    /tmp/ortpy/bin/python benches/embed_python.py

Same work as the Rust side: 3 passes over the first 256 turns of the evaluation
conversation in batches of 32, tokenised (truncation 256, pad to the longest), run,
mean-pooled and L2-normalised; 2 intra-op threads, all graph optimisations.
"""

import json
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models/all-MiniLM-L6-v2"
BATCH, THREADS, PASSES = 32, 2, 3


def main():
    texts = [json.loads(l)["text"] for l in (ROOT / "tests/data/memory/conversation.jsonl").read_text().splitlines()][:256]
    tok = Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    tok.enable_truncation(256)
    tok.enable_padding()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = THREADS
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(MODEL / "model.onnx"), opts, providers=["CPUExecutionProvider"])

    def embed(batch):
        enc = tok.encode_batch(batch)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        out = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        v = (out * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    embed(texts[:BATCH])
    started = time.perf_counter()
    for _ in range(PASSES):
        for i in range(0, len(texts), BATCH):
            embed(texts[i : i + BATCH])
    rate = PASSES * len(texts) / (time.perf_counter() - started)
    print(f"python onnxruntime {ort.__version__}: {rate:.1f} sentences/s (batch {BATCH}, {THREADS} threads)")


if __name__ == "__main__":
    main()
