#!/usr/bin/env python3
"""Recall of every evaluation set (this folder and each folder under sets/), imported
into a library of its own, with totals by question type and by split (dev = tuned on,
test = held out).

    cargo build --locked
    python3 tests/data/memory/eval_all.py [--bin target/debug/lorekeeper] [--work /tmp/recall]
        [--mode hybrid] [--k 10] [--config FILE] [--reimport] [--misses]

A library already imported under --work is reused (retrieval settings need no new
import); --reimport starts again, which a change to how turns are embedded needs.
--config names a config file whose [memory] settings apply to the import and the search.
"""

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def sets():
    return [HERE] + sorted(p for p in (HERE / "sets").glob("*") if (p / "questions.jsonl").exists())


def run(bin_, args):
    out = subprocess.run([bin_, *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{out.stderr}")
    return out.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target/debug/lorekeeper"))
    ap.add_argument("--work", default="/tmp/lorekeeper-recall")
    ap.add_argument("--mode", default="hybrid")
    ap.add_argument("--k", default="10")
    ap.add_argument("--config", default=None)
    ap.add_argument("--reimport", action="store_true")
    ap.add_argument("--misses", action="store_true")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    a = ap.parse_args()
    work = Path(a.work)
    if a.reimport and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    config = Path(a.config).resolve() if a.config else work / "config.toml"
    if not a.config and not config.exists():
        config.write_text("")
    totals = {}  # (group, name) -> [n, sum@5, sum@10]
    rows = []
    for folder in sets():
        name = folder.name if folder != HERE else "mira"
        lib = work / f"{name}.sqlite"
        common = ["--library", str(lib), "--config", str(config)]
        if not lib.exists():
            run(a.bin, ["memory", "import", *common, str(folder / "conversation.jsonl")])
        out = run(a.bin, ["memory", "eval", *common, "--json", "--k", a.k, "--mode", a.mode, str(folder / "questions.jsonl")])
        report = None
        for line in out.splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and "by_type" in obj:
                report = obj
        if report is None:
            sys.exit(f"no report from memory eval for {name}:\n{out}")
        rows.append((name, report))
        for group, table in (("all", {"all": {"questions": report["questions"], "recall_at_5": report["recall_at_5"], "recall_at_10": report["recall_at_10"]}}),
                             ("type", report["by_type"]), ("split", report["by_split"]),
                             ("split/type", report.get("by_split_and_type", {}))):
            for key, r in table.items():
                t = totals.setdefault((group, key), [0, 0.0, 0.0])
                t[0] += r["questions"]
                t[1] += r["recall_at_5"] * r["questions"]
                t[2] += r["recall_at_10"] * r["questions"]
        if a.misses:
            for m in report["misses"]:
                print(f"  [{name}] {m['question']}  missing {m['missing']}")
    if a.json:
        print(json.dumps({f"{g}:{k}": {"n": v[0], "r5": round(v[1] / v[0], 3), "r10": round(v[2] / v[0], 3)} for (g, k), v in totals.items()}))
        return
    print(f"mode {a.mode}, k {a.k}")
    print("| set | questions | recall@5 | recall@10 | " + " | ".join(sorted({t for _, r in rows for t in r['by_type']})) + " |")
    types = sorted({t for _, r in rows for t in r["by_type"]})
    for name, r in rows:
        cells = [f"{r['by_type'][t]['recall_at_10']:.3f}" if t in r["by_type"] else "–" for t in types]
        print(f"| {name} | {r['questions']} | {r['recall_at_5']:.3f} | {r['recall_at_10']:.3f} | " + " | ".join(cells) + " |")
    print()
    print("| group | questions | recall@5 | recall@10 |")
    for (g, k), (n, s5, s10) in sorted(totals.items()):
        print(f"| {g}: {k} | {n} | {s5 / n:.3f} | {s10 / n:.3f} |")


if __name__ == "__main__":
    main()
