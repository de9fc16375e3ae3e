"""Run chapters top to bottom in a fresh kernel and store their outputs.

    python tools/execute.py [CHAPTER ...]    (.py or .ipynb; default: every chapter)

For each chapter: take the newer of the pair as the source (jupytext --sync),
stamp its nbgrader metadata and kernelspec (tools/notebooks.py), execute it in a
fresh kernel with chapters/ as the working directory, write the executed .ipynb,
and rewrite the .py pair from it. Then export the package.
This is how a committed notebook is produced: never commit one run by hand in
a kernel that had state from earlier edits.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import zmq
from nbclient import NotebookClient
from traitlets.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export  # noqa: E402
from notebooks import CHAPTERS, KERNELSPEC, ROOT, stamp_notebook  # noqa: E402

KERNEL = KERNELSPEC["name"]  # "python3": the running environment's Python


def default_jobs() -> int:
    """How many chapters (or test files) run at once: $JOBS, else $BOOK_JOBS (its
    older name), else the cores this process may use (what `nproc` prints)."""
    for name in ("JOBS", "BOOK_JOBS"):
        if os.environ.get(name):
            return max(1, int(os.environ[name]))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def kernel_config() -> Config:
    """Kernel manager settings: encrypt the kernel's sockets with CurveZMQ keys.

    Over plain TCP, ipykernel (7.x) warns at every start that the connection is
    not encrypted, which a reader of `make book` takes for a fault. Here the
    manager hands the kernel a CurveZMQ key pair ("auto": whenever the
    kernelspec declares support, as ipykernel's does), so there is nothing to
    warn about. Without CurveZMQ in pyzmq the default (plain TCP) stays.
    """
    if not zmq.has("curve"):
        return Config()
    return Config({"KernelManager": {"transport_encryption": "auto"}})


def notebook_client(notebook: nbformat.NotebookNode, *, allow_errors: bool = False,
                    timeout: int = 900) -> NotebookClient:
    """A client that runs `notebook` in a fresh kernel with chapters/ as working directory."""
    return NotebookClient(
        notebook, timeout=timeout, kernel_name=KERNEL, allow_errors=allow_errors,
        resources={"metadata": {"path": str(CHAPTERS)}}, config=kernel_config(),
    )


def execute_notebook(notebook: nbformat.NotebookNode, *, allow_errors: bool = False,
                     timeout: int = 900) -> nbformat.NotebookNode:
    """Execute in a fresh kernel, in chapters/, and return the executed notebook."""
    notebook_client(notebook, allow_errors=allow_errors, timeout=timeout).execute()
    return notebook


def run_chapter(path: Path) -> float:
    """Sync, execute and store one chapter; return the seconds it took."""
    ipynb, script = path.with_suffix(".ipynb"), path.with_suffix(".py")
    subprocess.run([sys.executable, "-m", "jupytext", "--quiet", "--sync",
                    str(script if script.exists() else ipynb)], check=True)
    notebook = nbformat.read(ipynb, as_version=4)
    stamp_notebook(notebook)  # nbgrader metadata for cells the sync added or changed
    start = time.perf_counter()
    execute_notebook(notebook)
    seconds = time.perf_counter() - start
    nbformat.write(notebook, ipynb)
    script.write_text(jupytext.writes(notebook, fmt="py:percent"))
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", type=Path)
    args = parser.parse_args()
    paths = args.chapters or sorted(CHAPTERS.glob("*.ipynb"))
    for path in paths:
        path = path.resolve()
        seconds = run_chapter(path)
        print(f"executed {path.with_suffix('.ipynb').relative_to(ROOT)} in {seconds:.1f}s")
    return export.main([])


if __name__ == "__main__":
    sys.exit(main())
