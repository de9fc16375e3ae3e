"""Run chapters top to bottom in a fresh kernel and store their outputs.

    python -m tools.execute [CHAPTER ...]    (.py or .ipynb; default: every chapter)

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

from tools import export
from tools.notebooks import CHAPTERS, KERNELSPEC, ROOT, stamp_notebook

KERNEL = KERNELSPEC["name"]  # "python3": the running environment's Python


def cores() -> int:
    """The cores this process may use (what `nproc` prints)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_jobs() -> int:
    """How many chapters (or test files) run at once: $JOBS, else the cores."""
    if os.environ.get("JOBS"):
        return max(1, int(os.environ["JOBS"]))
    return cores()


def pool_env(jobs: int, env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a chapter that runs beside jobs - 1 others.

    An OpenMP thread that waits for work spins by default: right for one chapter alone
    (the next parallel loop starts at once), ruinous when the chapters' threads together
    outnumber the cores, since a spinning thread holds a core that another chapter's
    thread needs. Then waiting threads are told to sleep (OMP_WAIT_POLICY=PASSIVE, unless
    env sets a policy). Measured on 2 cores, two processes of 2 threads each multiplying
    the same matrices: 2.1 s each spinning, 1.14 s sleeping (0.60 s for one alone); a
    training step of chapter 11's model alone: about a tenth slower sleeping. The policy
    changes no number a chapter computes.
    """
    env = dict(os.environ if env is None else env)
    threads = int(env.get("OMP_NUM_THREADS") or cores())
    if jobs * threads > cores():
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


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
