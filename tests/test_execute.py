"""tools/execute.py: how the book starts its kernels."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import nbformat
from tools.execute import execute_notebook
notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
execute_notebook(notebook)
print(notebook.cells[0].outputs[0]["text"], end="")
"""


def test_kernel_starts_without_the_unencrypted_transport_warning():
    """ipykernel warns 'running over TCP without encryption' unless the manager hands it
    CurveZMQ keys; execute_notebook does, so make book, grading and CI print no warning."""
    run = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("42")
    assert "without encryption" not in run.stderr, run.stderr
    assert "WARNING" not in run.stderr, run.stderr
