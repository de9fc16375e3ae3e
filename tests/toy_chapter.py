"""A small made-up chapter whose checks lean on torch.allclose, math.isclose, abs and
torch.testing.assert_close, with wrong answers that pass them only if the library is
patched: what the grading guard must stop (tests/test_exercises.py, test_nbgrader.py)."""

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from notebooks import read_chapter, stamp_notebook  # noqa: E402

TOY = [  # a small chapter whose checks lean on torch.allclose, math.isclose, abs, assert_close
    ("markdown", "# 01 · Toy\n\nThree exercises."),
    ("code", "import builtins\nimport math\n\nimport torch"),
    ("code", "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
    ("code", "#| check ex1-double\n_x = torch.arange(4.0)\n_y = double(_x)\n"
             "assert torch.allclose(_y, _x + _x), f'expected 2 x = {(_x + _x).tolist()}, got {_y}'"),
    ("code", "def half(v):\n    ### BEGIN SOLUTION\n    return v / 2\n    ### END SOLUTION"),
    ("code", "#| check ex2-half points=2\n_h, _g = half(3.0), half(-4.0)\n"
             "assert math.isclose(_h, 1.5), f'expected 1.5, got {_h}'\n"
             "assert abs(_g + 2) < 1e-9, f'expected -2, got {_g}'"),
    ("code", "def norm(v):\n    ### BEGIN SOLUTION\n    return torch.linalg.vector_norm(v)\n"
             "    ### END SOLUTION"),
    ("code", "#| check ex3-norm\n_n = norm(torch.tensor([3.0, 4.0]))\n### BEGIN HIDDEN TESTS\n"
             "torch.testing.assert_close(norm(torch.zeros(2)), torch.tensor(0.0))\n"
             "### END HIDDEN TESTS\n"
             "torch.testing.assert_close(_n, torch.tensor(5.0))"),
]
WRONG = {"ex1-double": "def double(x):\n    return x", "ex2-half": "def half(v):\n    return v",
         "ex3-norm": "def norm(v):\n    return v.sum()"}
PATCH = ("torch.allclose = lambda *a, **k: True\nmath.isclose = lambda *a, **k: True\n"
         "builtins.abs = lambda x: 0\ntorch.testing.assert_close = lambda *a, **k: None\n")
CHEATS = {
    # wrong answers, with the library patched in the solution cell
    "patch_before": {name: PATCH + wrong for name, wrong in WRONG.items()},
    # wrong answers whose functions patch the library when the check calls them
    "patch_during": {name: wrong.replace("\n", "\n    import builtins, math, torch\n    "
                                         + PATCH.replace("\n", "\n    ").rstrip() + "\n", 1)
                     for name, wrong in WRONG.items()},
}


def toy_chapter(directory: Path):
    """The toy chapter, stamped as `make stamp` stamps a real one."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell(source) if kind == "markdown"
                      else nbformat.v4.new_code_cell(source) for kind, source in TOY]
    stamp_notebook(notebook)
    directory.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, directory / "01_toy.ipynb")
    return read_chapter(directory / "01_toy.ipynb")
