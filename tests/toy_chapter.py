"""A small made-up chapter whose checks lean on torch.allclose, math.isclose, abs,
torch.testing.assert_close and a class of the book's package, with wrong answers that
pass them only if the grading is fooled: a patched library or class, a check rewritten on
its way to the kernel, an exception handler that hides the check's error, the teacher's
notebook read from disk. What the grading guard and barrier must stop
(tests/test_exercises.py, test_nbgrader.py)."""

from pathlib import Path

import nbformat

from tools.notebooks import read_chapter, stamp_notebook

ROOT = Path(__file__).resolve().parent.parent

TOY = [  # a small chapter whose checks lean on torch.allclose, math.isclose, abs, assert_close
    ("markdown", "# 01 · Toy\n\nFour exercises and a written answer."),
    ("code", "import builtins\nimport math\n\nimport torch"),
    ("markdown", "### Exercise 1 · Double"),
    ("code", "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"),
    ("code", "#| check ex1-double\n_x = torch.arange(4.0)\n_y = double(_x)\n"
             "assert torch.allclose(_y, _x + _x), f'expected 2 x = {(_x + _x).tolist()}, got {_y}'\n"
             "### BEGIN HIDDEN TESTS\n_x = torch.tensor([-3.0, 0.5])\n"
             "assert torch.allclose(double(_x), _x + _x)\n### END HIDDEN TESTS"),
    ("markdown", "### Exercise 2 · Half"),
    ("code", "def half(v):\n    ### BEGIN SOLUTION\n    return v / 2\n    ### END SOLUTION"),
    ("code", "#| check ex2-half points=2\n_h, _g = half(3.0), half(-4.0)\n"
             "assert math.isclose(_h, 1.5), f'expected 1.5, got {_h}'\n"
             "assert abs(_g + 2) < 1e-9, f'expected -2, got {_g}'\n"
             "### BEGIN HIDDEN TESTS\nassert math.isclose(half(1.0), 0.5)\n### END HIDDEN TESTS"),
    ("markdown", "### Exercise 3 · Norm"),
    ("code", "def norm(v):\n    ### BEGIN SOLUTION\n    return torch.linalg.vector_norm(v)\n"
             "    ### END SOLUTION"),
    ("code", "#| check ex3-norm\n_n = norm(torch.tensor([3.0, 4.0]))\n### BEGIN HIDDEN TESTS\n"
             "torch.testing.assert_close(norm(torch.zeros(2)), torch.tensor(0.0))\n"
             "### END HIDDEN TESTS\n"
             "torch.testing.assert_close(_n, torch.tensor(5.0))"),
    ("markdown", "### Exercise 4 · Rows of a table\nWhy is a lookup a product with a one-hot "
                 "vector?"),
    ("code", "def rows(weight, ids):\n    ### BEGIN SOLUTION\n    return weight[ids]\n"
             "    ### END SOLUTION"),
    ("code", "#| check ex4-rows\nfrom transformer.embedding import TokenEmbedding as _Table\n"
             "_t = _Table(10, 4, scale=False)\n_ids = torch.tensor([3, 1])\n"
             "assert torch.equal(rows(_t.embedding.weight, _ids), _t(_ids)), 'not the rows'\n"
             "### BEGIN HIDDEN TESTS\n_ids = torch.tensor([[0, 9], [9, 9]])\n"
             "assert torch.equal(rows(_t.embedding.weight, _ids), _t(_ids))\n"
             "### END HIDDEN TESTS"),
    ("markdown", "<!-- #| answer ex4-why points=2 -->\nThe one-hot vector has a single 1, so "
                 "the product adds up exactly one row."),
]
POINTS = 5  # autograded: 1 + 2 + 1 + 1 (and 2 by hand)
WRONG = {"ex1-double": "def double(x):\n    return x", "ex2-half": "def half(v):\n    return v",
         "ex3-norm": "def norm(v):\n    return v.sum()",
         "ex4-rows": "def rows(weight, ids):\n    return torch.zeros(*ids.shape, weight.size(1))"}
PATCH = ("torch.allclose = lambda *a, **k: True\nmath.isclose = lambda *a, **k: True\n"
         "builtins.abs = lambda x: 0\ntorch.testing.assert_close = lambda *a, **k: None\n"
         "torch.equal = lambda *a, **k: True\n")
# Each cheat goes into the first solution cell, with a wrong answer in every exercise.
WHOLE_NOTEBOOK = {
    # every check cell rewritten to print('passed') on its way to the kernel
    "input_transformer": "get_ipython().input_transformers_post.append(lambda lines: "
                         "[\"print('passed')\\n\"] if lines and lines[0].startswith('#| check') "
                         "else lines)\n",
    "cleanup_transformer": "get_ipython().input_transformers_cleanup.append(lambda lines: "
                           "[\"print('passed')\\n\"] if lines and lines[0].startswith('#| check') "
                           "else lines)\n",
    # every error of a check swallowed by a custom exception handler
    "custom_exception_handler": "get_ipython().set_custom_exc((Exception,), "
                                "lambda *args, **kwargs: None)\n",
    # the class the ex4 check compares with, patched to agree with the wrong answer
    "patched_package_class": "import transformer.embedding\ntransformer.embedding.TokenEmbedding"
                             ".forward = lambda self, ids: torch.zeros(*ids.shape, 4)\n",
}
CHEATS = {
    # wrong answers, with the library patched in the solution cell
    "patch_before": {name: PATCH + wrong for name, wrong in WRONG.items()},
    # wrong answers whose functions patch the library when the check calls them
    "patch_during": {name: wrong.replace("\n", "\n    import builtins, math, torch\n    "
                                         + PATCH.replace("\n", "\n    ").rstrip() + "\n", 1)
                     for name, wrong in WRONG.items()},
    # the answers raise bdb.BdbQuit, which IPython stops without showing an error
    "bdb_quit": {name: wrong.split("\n")[0] + "\n    import bdb\n    raise bdb.BdbQuit"
                 for name, wrong in WRONG.items()},
    **{cheat: {name: (code if i == 0 else "") + wrong
               for i, (name, wrong) in enumerate(WRONG.items())}
       for cheat, code in WHOLE_NOTEBOOK.items()},
}


def reading_the_source(chapter_path: Path) -> dict[str, str]:
    """A cheat that reads the teacher's notebook from disk and runs its solutions."""
    code = (f"import json\n_source = json.load(open({str(chapter_path)!r}))\n"
            "for _cell in _source['cells']:\n"
            "    if 'BEGIN SOLUTION' in ''.join(_cell['source']):\n"
            "        exec(''.join(_cell['source']))\n")
    return {name: wrong + "\n" + code for name, wrong in WRONG.items()}


def toy_chapter(directory: Path):
    """The toy chapter, stamped as `make sync` stamps a real one."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell(source) if kind == "markdown"
                      else nbformat.v4.new_code_cell(source) for kind, source in TOY]
    stamp_notebook(notebook)
    directory.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, directory / "01_toy.ipynb")
    return read_chapter(directory / "01_toy.ipynb")
