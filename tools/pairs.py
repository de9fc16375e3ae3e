"""Check that each chapter's .ipynb and its jupytext .py pair hold the same cells.

    python -m tools.pairs --check    exit 1 and name each pair that disagrees

The .py pair is what `jupytext` writes from the notebook (py:percent); a
mismatch means one side was edited and the other was not synced.

Not `jupytext --sync` or its pre-commit hook: both rewrite one side, and a check in CI
must only read; this is jupytext's own writer, compared with the committed pair.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext

from tools.notebooks import CHAPTERS, ROOT


def pair_text(notebook_path: Path) -> str:
    """The py:percent text that jupytext writes for a notebook."""
    return jupytext.writes(jupytext.read(notebook_path), fmt="py:percent")


def problems(directory: Path = CHAPTERS) -> list[str]:
    """One line per chapter whose pair is missing or disagrees."""
    found = []
    notebooks = {p.stem: p for p in directory.glob("*.ipynb")}
    scripts = {p.stem: p for p in directory.glob("*.py")}
    for stem in sorted(set(notebooks) | set(scripts)):
        if stem not in scripts:
            found.append(f"{notebooks[stem].relative_to(ROOT)} has no .py pair: "
                         f"run `jupytext --sync {notebooks[stem].relative_to(ROOT)}`")
        elif stem not in notebooks:
            found.append(f"{scripts[stem].relative_to(ROOT)} has no .ipynb pair: "
                         f"run `make execute NB={scripts[stem].relative_to(ROOT)}`")
        elif pair_text(notebooks[stem]) != scripts[stem].read_text():
            found.append(f"{notebooks[stem].relative_to(ROOT)} and its .py pair disagree: "
                         f"run `make execute NB={scripts[stem].relative_to(ROOT)}` "
                         "(takes the newer of the two and re-runs it)")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report only (the default)")
    parser.parse_args()
    found = problems()
    for line in found:
        print(f"out of sync: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
