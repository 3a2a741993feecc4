"""Add up the per-file counts gathered under a directory (one subdirectory per item)."""

import argparse
import collections
import json
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--top", type=int, default=8)
ap.add_argument("counts", type=Path)
ap.add_argument("out", type=Path)
args = ap.parse_args()
total: collections.Counter[str] = collections.Counter()
files = {}
for path in sorted(args.counts.rglob("count.json")):
    one = json.loads(path.read_text())
    files[one["file"]] = one["words"]
    total.update(one["counts"])
result = {"files": files, "words": sum(files.values()), "top": total.most_common(args.top)}
args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
print(f"{len(files)} files, {result['words']} words; most common: {result['top'][:3]}")
