"""Build the book: run every chapter in a fresh kernel, then build the website from the runs.

    python -m tools.book [--jobs N] [CHAPTER ...]     (default: every chapter)

Chapters run N at a time (default: $JOBS, else the machine's cores), the longest
first as the committed run's cell timestamps predict: chapter 09 trains on one
thread for minutes, and the other chapters run beside it on the second core. A
chapter that times code against a peer (notebooks.RUNS_ALONE: appendix 14) runs
first, with nothing beside it, as in `make test`: its ratios mean nothing otherwise.

Each chapter is executed top to bottom from its committed source in a fresh kernel
(the stored outputs are not reused) and the executed copy is written to
_build/executed/. The website (tools/website.py) is then built from those copies
into _build/html/. The committed notebooks are not touched. Naming chapters runs
only those; the site is then built from the fresh runs of those chapters and the
committed outputs of the others.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat

from tools import website
from tools.execute import default_jobs, execute_notebook, pool_env
from tools.notebooks import ROOT, read_book, read_chapter, running_order
from tools.site_layout import HTML

EXECUTED = ROOT / "_build" / "executed"


def run(path: Path) -> tuple[Path, float]:
    """Execute one chapter in a fresh kernel; write the executed copy; return its time."""
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    execute_notebook(notebook)
    seconds = time.perf_counter() - start
    nbformat.write(notebook, EXECUTED / path.name)
    return path, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", type=Path)
    parser.add_argument("--jobs", type=int,
                        default=default_jobs(),
                        help="chapters run at the same time (default: $JOBS, or the cores)")
    args = parser.parse_args(argv)
    every = read_book()
    chosen = ([read_chapter(p.resolve().with_suffix(".ipynb")) for p in args.chapters]
              or every)
    shutil.rmtree(EXECUTED, ignore_errors=True)
    EXECUTED.mkdir(parents=True)
    start = time.perf_counter()
    alone, together = running_order(chosen)
    for chapter in alone:
        path, seconds = run(chapter.path)
        print(f"ran {path.relative_to(ROOT)} in {seconds:5.1f} s (alone)", flush=True)
    jobs = max(1, min(args.jobs, len(together)))
    with ProcessPoolExecutor(max_workers=jobs, initializer=os.environ.update,
                             initargs=(pool_env(jobs),)) as pool:  # the kernels inherit it
        for future in as_completed([pool.submit(run, c.path) for c in together]):
            path, seconds = future.result()
            print(f"ran {path.relative_to(ROOT)} in {seconds:5.1f} s", flush=True)
    print(f"book: {len(chosen)} chapters run in {time.perf_counter() - start:.1f} s", flush=True)
    ran = {c.name for c in chosen}
    for chapter in every:  # chapters not named: their committed outputs
        if chapter.name not in ran:
            shutil.copyfile(chapter.path, EXECUTED / chapter.path.name)
    status = website.build(EXECUTED)
    if status == 0:
        print(f"book: done in {time.perf_counter() - start:.1f} s; "
              f"open {(HTML / 'index.html').relative_to(ROOT)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
