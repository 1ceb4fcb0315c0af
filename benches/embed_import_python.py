#!/usr/bin/env python3
"""Python onnxruntime embedding exactly what `lorekeeper memory import` embeds, for the
side-by-side import-speed comparison in BENCHMARKS.md (session 8).

    python3 -m venv /tmp/ortpy && /tmp/ortpy/bin/pip install onnxruntime==1.31.1 tokenizers numpy
    /tmp/ortpy/bin/python benches/embed_import_python.py [--model model_int8.onnx] [--context 2]

The inputs are built as the import builds them (src/memory/bank/write.rs): each turn is
preceded by up to `--context` earlier turns of its session, joined by newlines; the
turns go in chunks of 256 in file order (one `bank.add` each), each chunk is sorted by
length and run in batches of 32 (truncation 256, pad to the longest), mean-pooled and
L2-normalised, with 2 intra-op threads and all graph optimisations (`--workers 2 --threads 1`: two
sessions of one thread, each running every other batch). `--sort tokens`
sorts by token count instead of byte length. Only the embedding is timed (no SQLite), so
this is the ceiling for the Rust import on the same model.
"""

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from collections import defaultdict, deque
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models/all-MiniLM-L6-v2"


def import_inputs(path, context):
    """The texts the import embeds, grouped in the import's chunks of 256."""
    turns = [json.loads(l) for l in Path(path).read_text().splitlines() if l.strip()]
    recent = defaultdict(deque)
    texts = []
    for t in turns:
        window = recent[t.get("session")]
        texts.append("".join(w + "\n" for w in window) + t["text"])
        window.append(t["text"])
        while len(window) > context:
            window.popleft()
    return [texts[i : i + 256] for i in range(0, len(texts), 256)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", default=str(ROOT / "tests/data/memory/conversation.jsonl"))
    ap.add_argument("--model", default="model.onnx")
    ap.add_argument("--context", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1, help="sessions run in parallel, one batch each")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--sort", choices=["bytes", "tokens"], default="bytes")
    args = ap.parse_args()

    chunks = import_inputs(args.file, args.context)
    tok = Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    tok.enable_truncation(256)
    tok.enable_padding()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sessions = [ort.InferenceSession(str(MODEL / args.model), opts, providers=["CPUExecutionProvider"]) for _ in range(args.workers)]
    names = {i.name for i in sessions[0].get_inputs()}
    pool = ThreadPoolExecutor(args.workers)

    def embed(batch, session=sessions[0]):
        enc = tok.encode_batch(batch)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        out = session.run(None, {k: v for k, v in feed.items() if k in names})[0]
        v = (out * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def key(text):
        if args.sort == "tokens":
            return len(tok.encode(text).ids)
        return len(text.encode())

    embed(chunks[0][: args.batch])
    total = sum(len(c) for c in chunks)
    tokens = sum(min(len(tok.encode(t).ids), 256) for c in chunks for t in c)
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.passes):
        for chunk in chunks:
            ordered = sorted(chunk, key=key)
            batches = [ordered[i : i + args.batch] for i in range(0, len(ordered), args.batch)]
            list(pool.map(lambda ib: embed(ib[1], sessions[ib[0] % args.workers]), enumerate(batches)))
    rate = args.passes * total / (time.perf_counter() - started)
    per_cpu = args.passes * total / max(time.process_time() - cpu, 1e-9)
    print(
        f"python onnxruntime {ort.__version__}: {rate:.1f} turns/s embedded, {per_cpu:.1f} turns per CPU-second ({args.model}, context {args.context}, "
        f"{args.workers} x {args.threads} threads, batch {args.batch}, {total} turns, {tokens / total:.1f} tokens/input)"
    )


if __name__ == "__main__":
    main()
