"""Make a folder of plausible returned notebooks, to try or time `make grade` on.

    python -m tools.class_sample OUT [--per-chapter 3]

For each chapter, student copies as a class hands them back, under varied folder and
file names: solved (each solution typed in, markers left out), partly solved (the
first half of the exercises), and cheating (each answer left as the stub, with
`torch.allclose`, `torch.equal` and `math.isclose` patched to say yes, an IPython input
transformer that rewrites the checks to `print('passed')` on their way to the kernel,
and the check cells themselves rewritten to `print('passed')`), in turn. Every solved
exercise should pass, every other one fail: the script prints the points each notebook
should get from its checks (written answers wait for the teacher).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from tools.notebooks import BEGIN_SOLUTION, END_SOLUTION, read_book
from tools.student_copies import student_copy

NAMES = ["alice", "bob", "carol", "dan", "erin", "farid", "grace", "hui", "ines", "jun",
         "kofi", "lena", "mei", "noor", "omar", "pia", "quinn", "ravi", "sara", "tomas",
         "uma", "vik", "wen", "xavi", "yara", "zoe", "adam", "bea", "chen", "dara"]
PATCH = ("import math\nimport torch\ntorch.allclose = lambda *a, **k: True\n"
         "torch.equal = lambda *a, **k: True\nmath.isclose = lambda *a, **k: True\n"
         "get_ipython().input_transformers_post.append(lambda lines: [\"print('passed')\\n\"] "
         "if lines and lines[0].startswith('#| check') else lines)\n")


def typed(source: str) -> str:
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in (BEGIN_SOLUTION, END_SOLUTION))


def returned(chapter, kind: str) -> tuple[nbformat.NotebookNode, float]:
    """A student's copy of `chapter` of the given kind, and the points it should get."""
    notebook = student_copy(chapter.notebook, chapter.name)
    solutions = {cell.metadata["nbgrader"]["grade_id"]: cell.source
                 for cell in chapter.notebook.cells
                 if cell.metadata.get("nbgrader", {}).get("solution")}
    order = list(solutions)
    points = 0.0
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            solve = kind == "solved" or (kind == "partly" and order.index(meta["grade_id"])
                                         < len(order) // 2)
            if solve:
                cell.source = typed(solutions[meta["grade_id"]])
                if cell.cell_type == "code":  # a written answer waits for the teacher
                    points += chapter.points[meta["grade_id"].removesuffix("-solution")]
            elif kind == "cheating" and cell.cell_type == "code":
                cell.source = PATCH + cell.source
        elif meta.get("grade") and kind == "cheating":
            cell.source = "print('passed')"
    return notebook, points


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-chapter", type=int, default=3)
    args = parser.parse_args()
    kinds = ["solved", "partly", "cheating"]
    count = 0
    for chapter in read_book():
        for i in range(args.per_chapter):
            name = NAMES[count % len(NAMES)]
            kind = kinds[i % len(kinds)]
            notebook, points = returned(chapter, kind)
            style = count % 3
            if style == 0:
                path = args.out / name / f"{chapter.name}.ipynb"
            elif style == 1:
                path = args.out / f"{chapter.name}_{name}.ipynb"
            else:
                path = args.out / name / f"homework {chapter.number} (final).ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, path)
            print(f"{path.relative_to(args.out)}\t{chapter.name}\t{kind}\t{points:g}")
            count += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
