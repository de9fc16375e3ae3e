"""A gradebook for a class: grade a folder of returned notebooks, several at a time.

Behind `python tools/exercises.py grade PATH ...` (`make grade NB=folder/`):

- every *.ipynb under each PATH is one returned notebook, whatever its name; its
  chapter is recognised from the notebook itself (`recognise`): the chapter a student
  copy records in its metadata, else the check names / nbgrader grade_ids of its cells,
  else its title heading `# NN · ...`;
- each notebook is graded in its own process and its own fresh kernel, `--jobs` at a
  time (default: the machine's cores; each kernel then gets cores/jobs threads), with a
  time limit per notebook; a notebook that crashes, hangs or cannot be recognised gets
  rows that say so, and the others go on;
- OUT/gradebook.csv has one row per exercise (file, student, chapter, exercise,
  status, points, max_points, message) and OUT/summary.csv one row per student
  (points per chapter and in total).

The student of a notebook is the first folder under PATH that holds it (nbgrader's
`submitted/STUDENT/...` layout, or one folder per student), else the file name with
the chapter's name taken out (`07_blocks_alice.ipynb` -> `alice`).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebooks import (  # noqa: E402
    ROOT,
    BookError,
    Chapter,
    read_book,
    read_chapter,
    stored_seconds,
)

EXERCISES = Path(__file__).resolve().parent / "exercises.py"
TITLE = re.compile(r"^#\s+(\d+)\s*·")
COLUMNS = ["file", "student", "chapter", "exercise", "status", "points", "max_points", "message"]


# --- which chapter is this? -------------------------------------------------------

def recognise(notebook: nbformat.NotebookNode, chapters: list[Chapter]
              ) -> tuple[Chapter | None, str]:
    """(chapter, how it was recognised) or (None, why not)."""
    import exercises

    chapters = [c for c in chapters if c.checks]  # an appendix has no exercises to grade
    by_name = {c.name: c for c in chapters}
    recorded = (notebook.metadata.get(exercises.META_KEY) or {}).get("chapter")
    if recorded in by_name:
        return by_name[recorded], "the chapter recorded in the student copy"
    found: set[str] = set()
    title = None
    for cell in notebook.cells:
        if cell.cell_type == "code":
            grade_id = ((cell.metadata.get("nbgrader") or {}).get("grade_id")) or ""
            found.update({grade_id, grade_id.removesuffix("-solution"),
                          exercises.check_name(cell) or ""})
        elif cell.cell_type == "markdown" and title is None:
            for line in cell.source.splitlines():
                if (match := TITLE.match(line)) is not None:
                    title = int(match.group(1))
                    break
    overlap = {c.name: len(found & {name for name, _ in c.checks}) for c in chapters}
    best = max(overlap.values(), default=0)
    if best:
        candidates = [c for c in chapters if overlap[c.name] == best]
        chosen = next((c for c in candidates if c.number == title), candidates[0])
        return chosen, f"its checks ({best} of {len(chosen.checks)} found)"
    by_number = [c for c in chapters if c.number == title]
    if by_number:
        return by_number[0], f"its title heading (# {title:02d} · ...)"
    return None, ("not recognised as a chapter of the book with exercises: no such chapter "
                  "title '# NN · ...' and no check of any chapter in it")


def student_of(path: Path, root: Path | None, chapter: str | None) -> str:
    """The student a returned notebook belongs to (see the module's docstring)."""
    if root is not None and path.is_relative_to(root):
        parts = path.relative_to(root).parts
        if len(parts) > 1:
            return parts[0]
    stem = path.stem
    if chapter:
        topic = chapter.split("_", 1)[-1]  # 07_blocks -> blocks
        for part in (chapter, topic):
            rest = re.sub(rf"(^|[_\-. ]){re.escape(part)}($|[_\-. ])", "_", stem).strip("_-. ")
            if rest and rest != stem and rest != chapter.split("_", 1)[0]:
                return rest
    return stem


# --- grading one notebook (in its own process) -------------------------------------

def grade_file(path: Path, chapter_path: Path | None, timeout: int) -> dict:
    """Grade one notebook; a dict that says what happened, for JSON."""
    import exercises

    start = time.perf_counter()
    outcome = {"file": str(path), "chapter": None, "results": [], "error": None}
    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception as err:  # noqa: BLE001 - any unreadable file is reported, not raised
        outcome["error"] = f"not a readable notebook: {type(err).__name__}: {err}"
        return outcome
    if chapter_path is not None:
        chapter = read_chapter(chapter_path.resolve().with_suffix(".ipynb"))
    else:
        chapter, why = recognise(notebook, read_book())
        if chapter is None:
            outcome["error"] = why
            return outcome
    outcome["chapter"] = chapter.name
    results = exercises.grade(notebook, chapter, timeout=timeout)
    outcome["results"] = [asdict(r) for r in results]
    outcome["seconds"] = round(time.perf_counter() - start, 1)
    return outcome


def run_worker(path: Path, chapter: Chapter | None, timeout: int, threads: int) -> dict:
    """Grade one notebook in a child process (with its own kernel); never raises."""
    command = [sys.executable, str(EXERCISES), "grade-one", str(path),
               "--timeout", str(timeout)]
    if chapter is not None:
        command += ["--chapter", str(chapter.path)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, start_new_session=True)
    base = {"file": str(path), "chapter": chapter.name if chapter else None, "results": []}
    try:
        out, err = process.communicate(timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the grader and the kernel it started
        process.communicate()
        return {**base, "error": f"stopped: the notebook ran longer than {timeout} s"}
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # a kernel left behind, if any
        except ProcessLookupError:
            pass
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        tail = " | ".join(err.strip().splitlines()[-3:])
        return {**base, "error": f"the grader failed on this notebook (exit {process.returncode}): "
                                 f"{tail[-400:]}"}


# --- many notebooks ------------------------------------------------------------------

def collect(paths: list[Path]) -> list[tuple[Path, Path | None]]:
    """(notebook, the folder it was found under) for every notebook named or found."""
    found = []
    for path in paths:
        if path.is_dir():
            for nb in sorted(path.rglob("*.ipynb")):
                if ".ipynb_checkpoints" not in nb.parts:
                    found.append((nb, path))
        elif path.exists():
            found.append((path, None))
        else:
            raise BookError(f"{path}: no such file or folder")
    return found


def rows_of(outcome: dict, student: str, chapters: dict[str, Chapter]) -> list[dict]:
    """Gradebook rows for one graded notebook."""
    import exercises

    file, chapter = outcome["file"], outcome.get("chapter") or ""
    if outcome.get("results"):
        return [{"file": file, "student": student, "chapter": chapter, "exercise": r["name"],
                 "status": "passed" if r["passed"] else "failed", "points": r["points"],
                 "max_points": r["max_points"],
                 "message": exercises.in_student_terms(r["detail"]) if r["detail"] else ""}
                for r in outcome["results"]]
    error = outcome.get("error") or "no result"
    if chapter in chapters:  # known chapter, but the notebook could not be run
        return [{"file": file, "student": student, "chapter": chapter, "exercise": name,
                 "status": "failed", "points": 0, "max_points": chapters[chapter].points[name],
                 "message": error} for name, _ in chapters[chapter].checks]
    return [{"file": file, "student": student, "chapter": chapter, "exercise": "",
             "status": "not graded", "points": 0, "max_points": 0, "message": error}]


def summarise(rows: list[dict]) -> tuple[list[str], list[dict]]:
    """One row per student: points per chapter and in total (best notebook per chapter)."""
    per: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
    for row in rows:
        files = per.setdefault(row["student"], {}).setdefault(row["chapter"] or "?", {})
        got, total = files.get(row["file"], (0, 0))
        files[row["file"]] = (got + float(row["points"]), total + float(row["max_points"]))
    chapters = sorted({c for by_chapter in per.values() for c in by_chapter})
    summary = []
    for student in sorted(per):
        line = {"student": student, "notebooks": sum(len(v) for v in per[student].values())}
        points = total = 0.0
        for chapter in chapters:
            if chapter not in per[student]:
                line[chapter] = ""
                continue
            got, out_of = max(per[student][chapter].values())
            points, total = points + got, total + out_of
            line[chapter] = f"{got:g}/{out_of:g}"
        line.update(points=f"{points:g}", max_points=f"{total:g}",
                    percent=f"{100 * points / total:.0f}" if total else "")
        summary.append(line)
    return ["student", "notebooks", *chapters, "points", "max_points", "percent"], summary


def main(args: argparse.Namespace) -> int:
    """`exercises.py grade`: grade, print progress and a summary, write the CSV files."""
    notebooks = collect(args.paths)
    if not notebooks:
        raise BookError(f"no notebooks (*.ipynb) in {', '.join(map(str, args.paths))}")
    book = read_book(args.book)
    by_name = {c.name: c for c in book}
    explicit = read_chapter(args.chapter.resolve().with_suffix(".ipynb")) if args.chapter else None
    cores = os.cpu_count() or 1
    jobs = max(1, min(args.jobs or cores, len(notebooks)))
    threads = max(1, cores // jobs)
    print(f"grading {len(notebooks)} notebooks, {jobs} at a time "
          f"({threads} thread{'s' if threads > 1 else ''} each)", flush=True)

    # Recognise every notebook first (cheap), then start the longest chapters first,
    # so that a chapter 09 (minutes of training) does not start last and run alone.
    jobs_list = []
    for path, root in notebooks:
        chapter, why = explicit, ""
        if chapter is None:
            try:
                chapter, why = recognise(nbformat.read(path, as_version=4), book)
            except Exception as err:  # noqa: BLE001 - reported as a row
                chapter, why = None, f"not a readable notebook: {type(err).__name__}: {err}"
        jobs_list.append((path, root, chapter, why))
    jobs_list.sort(key=lambda job: -stored_seconds(job[2].notebook) if job[2] else 0)

    def one(job) -> tuple[dict, str]:
        path, root, chapter, why = job
        if chapter is None:
            return ({"file": str(path), "chapter": None, "results": [], "error": why},
                    student_of(path, root, None))
        return run_worker(path, chapter, args.timeout, threads), student_of(path, root, chapter.name)

    start = time.perf_counter()
    rows: list[dict] = []
    ungraded = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(one, job) for job in jobs_list]
        for future in as_completed(futures):
            outcome, student = future.result()
            new = rows_of(outcome, student, by_name)
            rows += new
            got = sum(float(r["points"]) for r in new)
            total = sum(float(r["max_points"]) for r in new)
            if outcome.get("error"):
                ungraded += 1
                print(f"  {outcome['file']}: {outcome['error']}", flush=True)
            else:
                print(f"  {outcome['file']} ({outcome['chapter']}, {student}): {got:g}/{total:g} "
                      f"points, {outcome.get('seconds', '?')} s", flush=True)
    order = {str(path): i for i, (path, _) in enumerate(notebooks)}
    rows.sort(key=lambda r: (order[r["file"]],))
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "gradebook.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    columns, summary = summarise(rows)
    with open(args.out / "summary.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(summary)
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    print(f"\n{'student':<16} {'notebooks':>9} {'points':>12}")
    for line in summary:
        print(f"{line['student']:<16} {line['notebooks']:>9} "
              f"{line['points'] + '/' + line['max_points']:>12}")
    out = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    print(f"graded {len(notebooks) - ungraded} of {len(notebooks)} notebooks in "
          f"{time.perf_counter() - start:.0f} s; wrote {out}/gradebook.csv and {out}/summary.csv")
    return 1 if ungraded else 0
