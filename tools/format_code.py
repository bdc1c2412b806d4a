"""`make format`: ruff format and ruff check --fix, with every notebook's outputs kept
byte for byte.

ruff rewrites a whole notebook when it formats one: its JSON writer respells floats in
stored outputs (1.399e-07 becomes 1.399e-7) and does not always read them back exactly
(6.314e-23 came back as 6.313999999999999e-23). So each notebook's text is read first,
and afterwards written back as it was with only its code cells' sources replaced, in
nbformat's layout (indent 1, sorted keys, non-ASCII kept, a final newline).

    python tools/format_code.py RUFF    (the venv's ruff; from the repository root)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NOTEBOOKS = sorted(Path("notebooks").glob("*.ipynb")) + sorted(
    Path("book").glob("*.ipynb")
)


def dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def main() -> int:
    ruff = sys.argv[1]
    before = {path: path.read_text(encoding="utf-8") for path in NOTEBOOKS}
    subprocess.run([ruff, "format", "."], check=True)
    fixed = subprocess.run([ruff, "check", "--fix", "--exit-zero", "."], check=True)
    for path, old_text in before.items():
        new_text = path.read_text(encoding="utf-8")
        if new_text == old_text:
            continue
        old, new = json.loads(old_text), json.loads(new_text)
        if [c["cell_type"] for c in old["cells"]] != [
            c["cell_type"] for c in new["cells"]
        ]:
            print(
                f"{path}: ruff changed the cells; left as ruff wrote it",
                file=sys.stderr,
            )
            return 1
        cells = [
            dict(a, source=b["source"]) if a["cell_type"] == "code" else a
            for a, b in zip(old["cells"], new["cells"], strict=True)
        ]
        path.write_text(dumps(dict(old, cells=cells)), encoding="utf-8")
    return fixed.returncode


if __name__ == "__main__":
    sys.exit(main())
