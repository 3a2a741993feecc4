"""Count the words of one text file: {"file": ..., "words": N, "counts": {word: n}}."""

import collections
import json
import re
import sys
from pathlib import Path

src, out = Path(sys.argv[1]), Path(sys.argv[2])
words = re.findall(r"[a-z']+", src.read_text(encoding="utf-8").lower())
counts = collections.Counter(words)
out.write_text(json.dumps({"file": src.name, "words": len(words), "counts": counts}, sort_keys=True))
