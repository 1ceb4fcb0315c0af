#!/usr/bin/env python3
"""Turn a conversation.txt and a questions.txt into the JSON-lines files that
`lorekeeper memory import` and `lorekeeper memory eval` read.

One folder holds one conversation: this folder (Mira, the first set) and every folder
under sets/. Turn ids are `sNN-tNN` (session, turn). Questions cite turns by the `#tag`
written at the end of a turn; each question gets a type and a split (dev / test,
alternating in file order, so the held-out half is fixed before anyone tunes).

conversation.txt:
    # a comment
    @speakers U=user M=Mira        letter=speaker name (default: this one)
    @scope character:mira          the memories' scope (default: character:mira)
    == 2024-01-05                  a new session on that date
    U: what was said #tag          a turn, optionally tagged for questions
questions.txt:
    type | question | tag, tag

    python3 build_eval_set.py              # this folder and every folder under sets/
    python3 build_eval_set.py sets/harbour # just one
"""

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent
DEFAULT_SPEAKERS = {"U": "user", "M": "Mira"}
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def build(folder: Path):
    speakers, scope = dict(DEFAULT_SPEAKERS), "character:mira"
    turns, tags, session, n, date = [], {}, 0, 0, None
    for lineno, raw in enumerate((folder / "conversation.txt").read_text().splitlines(), 1):
        line = raw.strip()
        where = f"{folder}/conversation.txt:{lineno}"
        if not line or line.startswith("#"):
            continue
        if line.startswith("@speakers"):
            speakers = dict(p.split("=", 1) for p in line.split()[1:])
            continue
        if line.startswith("@scope"):
            scope = line.split(None, 1)[1].strip()
            continue
        if line.startswith("== "):
            new_date = line[3:].strip()
            assert DATE.match(new_date), f"{where}: a session needs a YYYY-MM-DD date"
            assert date is None or new_date > date, f"{where}: sessions must go forward in time"
            session, n, date = session + 1, 0, new_date
            continue
        assert date is not None, f"{where}: a turn before the first session"
        who, text = line.split(":", 1)
        assert who in speakers, f"{where}: unknown speaker letter {who!r}"
        text, tag = text.strip(), None
        if " #" in text:
            text, tag = text.rsplit(" #", 1)
            assert re.fullmatch(r"[A-Za-z0-9_]+", tag), f"{where}: a tag is letters, digits and _"
        n += 1
        tid = f"s{session:02d}-t{n:02d}"
        if tag:
            assert tag not in tags, f"{where}: duplicate tag {tag}"
            tags[tag] = tid
        hour = 18 + n // 12
        minute = (n * 4) % 60
        turns.append({
            "id": tid,
            "speaker": speakers[who],
            "text": text,
            "time": f"{date}T{hour:02d}:{minute:02d}:00Z",
            "session": f"s{session:02d}",
            "scope": scope,
            "witnesses": list(dict.fromkeys(speakers.values())),
        })
    with open(folder / "conversation.jsonl", "w") as out:
        for t in turns:
            out.write(json.dumps(t, ensure_ascii=False) + "\n")
    questions = []
    for lineno, raw in enumerate((folder / "questions.txt").read_text().splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        parts = [p.strip() for p in raw.split("|")]
        assert len(parts) == 3, f"{folder}/questions.txt:{lineno}: type | question | tags"
        kind, question, evidence = parts
        missing = [t.strip() for t in evidence.split(",") if t.strip() not in tags]
        assert not missing, f"{folder}/questions.txt:{lineno}: unknown tags {missing}"
        ids = [tags[t.strip()] for t in evidence.split(",")]
        split = "dev" if len(questions) % 2 == 0 else "test"
        questions.append({"question": question, "evidence": ids, "type": kind, "split": split})
    with open(folder / "questions.jsonl", "w") as out:
        for q in questions:
            out.write(json.dumps(q, ensure_ascii=False) + "\n")
    kinds = {}
    for q in questions:
        kinds[q["type"]] = kinds.get(q["type"], 0) + 1
    words = sum(len(t["text"].split()) for t in turns) / max(len(turns), 1)
    print(f"{folder.name}: {len(turns)} turns ({words:.1f} words each) in {session} sessions, "
          f"{len(questions)} questions {kinds}")


def main():
    folders = [Path(a) for a in sys.argv[1:]] or [HERE] + sorted(p for p in (HERE / "sets").glob("*") if p.is_dir())
    for folder in folders:
        build(folder)


if __name__ == "__main__":
    main()
