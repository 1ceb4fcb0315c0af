#!/usr/bin/env python3
"""Turn conversation.txt and questions.txt into the JSON-lines files that
`lorekeeper memory import` and `lorekeeper memory eval` read.

Turn ids are `sNN-tNN` (session, turn). Questions cite turns by the `#tag` written at
the end of a turn; each question gets a type and a split (dev / test, alternating).

    python3 build_eval_set.py   # writes conversation.jsonl and questions.jsonl here
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
SPEAKERS = {"U": "user", "M": "Mira"}


def main():
    turns, tags, session, n, date = [], {}, 0, 0, None
    for raw in (HERE / "conversation.txt").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("== "):
            session, n, date = session + 1, 0, line[3:].strip()
            continue
        who, text = line.split(":", 1)
        text, tag = text.strip(), None
        if " #" in text:
            text, tag = text.rsplit(" #", 1)
        n += 1
        tid = f"s{session:02d}-t{n:02d}"
        if tag:
            assert tag not in tags, f"duplicate tag {tag}"
            tags[tag] = tid
        hour = 18 + n // 12
        minute = (n * 4) % 60
        turns.append({
            "id": tid,
            "speaker": SPEAKERS[who],
            "text": text,
            "time": f"{date}T{hour:02d}:{minute:02d}:00Z",
            "session": f"s{session:02d}",
            "scope": "character:mira",
            "witnesses": ["user", "Mira"],
        })
    with open(HERE / "conversation.jsonl", "w") as out:
        for t in turns:
            out.write(json.dumps(t, ensure_ascii=False) + "\n")
    questions = []
    for raw in (HERE / "questions.txt").read_text().splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        kind, question, evidence = [p.strip() for p in raw.split("|")]
        ids = [tags[t.strip()] for t in evidence.split(",")]
        split = "dev" if len(questions) % 2 == 0 else "test"
        questions.append({"question": question, "evidence": ids, "type": kind, "split": split})
    with open(HERE / "questions.jsonl", "w") as out:
        for q in questions:
            out.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(f"{len(turns)} turns in {session} sessions, {len(questions)} questions")


if __name__ == "__main__":
    main()
