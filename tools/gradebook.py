"""A gradebook for a class: grade a folder of returned notebooks, several at a time.

Behind `python -m tools.exercises grade PATH ...` (`make grade NB=folder/ OUT=dir`):

- every *.ipynb under each PATH is one returned notebook, whatever its name; its
  chapter is recognised from the notebook itself, and its student comes from a roster
  or from the path (tools/returned_notebooks.py: `recognise`, `Roster`, `student_of`);
- each notebook is graded in its own process and its own fresh kernel, `--jobs` at a
  time (default: the machine's cores; each kernel then gets cores/jobs threads), with a
  time limit per notebook, under the grading guard and barrier (it cannot read the
  repository, the other returned notebooks or the gradebook); a notebook that crashes,
  hangs or cannot be recognised gets rows that say so, and the others go on;
- OUT/gradebook.csv has one row per exercise (file, student, chapter, exercise,
  status, points, max_points, message), OUT/summary.csv one row per student (points per
  chapter and in total; every student of the roster, those who handed in nothing
  included), and OUT/feedback/STUDENT.md every exercise's full message for that student.
  An OUT that already holds a gradebook is refused unless `--force`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime
from pathlib import Path

import nbformat

from tools.exercise_cells import in_student_terms
from tools.notebooks import (
    ROOT,
    BookError,
    Chapter,
    read_book,
    read_chapter,
    stored_seconds,
)
from tools.returned_notebooks import Roster, collect, recognise, student_of

GRADER = "tools.exercises"  # run as `python -m tools.exercises grade-one ...` from ROOT
COLUMNS = ["file", "student", "chapter", "exercise", "status", "points", "max_points", "message"]
OUTPUTS = ("gradebook.csv", "summary.csv", "feedback")


# --- grading one notebook (in its own process) -------------------------------------

def run_worker(path: Path, chapter: Chapter | None, timeout: int, threads: int,
               protect: list[Path] = ()) -> dict:
    """Grade one notebook in a child process (with its own kernel); never raises.

    The child is `python -m tools.exercises grade-one`, started in the repository root
    (where `tools` imports), so the paths it is given are absolute. A child that ends
    without a report (its kernel failed to start or to shut down: on a busy machine
    nbclient's cleanup can fail before the notebook ran) is run once more; a notebook
    that breaks the grader breaks it twice and is reported."""
    outcome = _run_child(path, chapter, timeout, threads, protect)
    if outcome.get("crashed"):
        outcome = _run_child(path, chapter, timeout, threads, protect)
    outcome.pop("crashed", None)
    return outcome


def _run_child(path: Path, chapter: Chapter | None, timeout: int, threads: int,
               protect: list[Path]) -> dict:
    """One run of the grading child: its report, or an error row ("crashed": no report)."""
    command = [sys.executable, "-m", GRADER, "grade-one", str(path.resolve()),
               "--timeout", str(timeout)]
    if chapter is not None:
        command += ["--chapter", str(chapter.path)]
    for folder in protect:
        command += ["--protect", str(Path(folder).resolve())]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, cwd=ROOT, start_new_session=True)
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
        outcome = json.loads(out.strip().splitlines()[-1])
        return {**outcome, "file": str(path)}  # as given: the gradebook's rows name it so
    except (json.JSONDecodeError, IndexError, TypeError):
        tail = " | ".join(err.strip().splitlines()[-3:])
        return {**base, "crashed": True,
                "error": f"the grader failed on this notebook (exit {process.returncode}): "
                         f"{tail[-400:]}"}


# --- the rows ---------------------------------------------------------------------------

def status_of(result: dict) -> str:
    if result.get("manual"):
        return "to grade by hand" if result.get("answer") else "not answered"
    return "passed" if result["passed"] else "failed"


def rows_of(outcome: dict, student: str, chapters: dict[str, Chapter]) -> list[dict]:
    """Gradebook rows for one graded notebook (a written answer's row holds its text)."""
    file, chapter = outcome["file"], outcome.get("chapter") or ""
    if outcome.get("results"):
        rows = []
        for r in outcome["results"]:
            status = status_of(r)
            if r.get("manual"):
                message = r.get("answer") or ""
            else:
                message = in_student_terms(r["detail"]) if r["detail"] else ""
            rows.append({"file": file, "student": student, "chapter": chapter,
                         "exercise": r["name"], "status": status,
                         "points": "" if status == "to grade by hand" else r["points"],
                         "max_points": r["max_points"], "message": message,
                         "detail": r["detail"]})
        return rows
    error = outcome.get("error") or "no result"
    if chapter in chapters:  # known chapter, but the notebook could not be run
        return [{"file": file, "student": student, "chapter": chapter, "exercise": name,
                 "status": "failed", "points": 0, "max_points": chapters[chapter].points[name],
                 "message": error, "detail": error}
                for name, _ in chapters[chapter].checks + chapters[chapter].answers]
    return [{"file": file, "student": student, "chapter": chapter, "exercise": "",
             "status": "not graded", "points": 0, "max_points": 0, "message": error,
             "detail": error}]


def summarise(rows: list[dict], students: list[str] = ()) -> tuple[list[str], list[dict]]:
    """One row per student (each of `students`, and each found in `rows`): the points of
    each chapter, of the best notebook where a student handed in several, the total, and
    the points of written answers waiting to be graded by hand."""
    per: dict[str, dict[str, dict[str, list[float]]]] = {s: {} for s in students}
    for row in rows:
        if row["status"] == "not graded":
            continue
        files = per.setdefault(row["student"], {}).setdefault(row["chapter"] or "?", {})
        got, total, by_hand = files.get(row["file"], (0.0, 0.0, 0.0))
        if row["status"] in ("passed", "failed"):  # autograded
            got, total = got + float(row["points"] or 0), total + float(row["max_points"])
        elif row["status"] == "to grade by hand":
            by_hand += float(row["max_points"])
        files[row["file"]] = (got, total, by_hand)
    chapters = sorted({c for by_chapter in per.values() for c in by_chapter})
    summary = []
    for student in sorted(per):
        line = {"student": student, "notebooks": sum(len(v) for v in per[student].values())}
        points = total = pending = 0.0
        for chapter in chapters:
            if chapter not in per[student]:
                line[chapter] = "missing"
                continue
            got, out_of, by_hand = max(per[student][chapter].values())  # the best notebook
            points, total, pending = points + got, total + out_of, pending + by_hand
            line[chapter] = f"{got:g}/{out_of:g}"
        line.update(points=f"{points:g}", max_points=f"{total:g}",
                    percent=f"{100 * points / total:.0f}" if total else "",
                    by_hand_max=f"{pending:g}")
        summary.append(line)
    return (["student", "notebooks", *chapters, "points", "max_points", "percent",
             "by_hand_max"], summary)


# --- feedback ---------------------------------------------------------------------------

def safe_name(student: str) -> str:
    """A file name for a student id (letters, digits, '.', '-', '_' kept)."""
    return re.sub(r"[^\w.-]+", "_", student).strip("._") or "student"


def feedback(student: str, rows: list[dict], chapters: dict[str, Chapter]) -> str:
    """A student's feedback, in Markdown: per notebook, every exercise with its full message."""
    lines = [f"# Feedback for {student}", ""]
    by_file: dict[str, list[dict]] = {}
    for row in rows:
        by_file.setdefault(row["file"], []).append(row)
    if not by_file:
        lines.append("No notebook was handed in.")
    for file, own in by_file.items():
        chapter = chapters.get(own[0]["chapter"])
        title = (f"{chapter.number:02d} · {chapter.title}" if chapter
                 else own[0]["chapter"] or "not recognised")
        checked = [r for r in own if r["status"] in ("passed", "failed")]
        got = sum(float(r["points"] or 0) for r in checked)
        total = sum(float(r["max_points"]) for r in checked)
        lines += [f"## {title}: {got:g} of {total:g} points", "", f"File: `{file}`", ""]
        for r in own:
            if r["status"] == "not graded":
                lines += [f"- not graded: {r['detail']}", ""]
                continue
            points = (f"{float(r['points'] or 0):g} of {float(r['max_points']):g} points"
                      if r["status"] in ("passed", "failed") else
                      f"{float(r['max_points']):g} points, graded by hand")
            lines.append(f"- **{r['status']}** · `{r['exercise']}` ({points})")
            if r["status"] == "to grade by hand":
                text = r["message"]
            elif r["detail"].startswith("NotImplementedError"):
                text = "not attempted: the solution still raises NotImplementedError"
            else:
                text = r["detail"]
            if text:
                lines += [""] + ["  > " + line for line in text.splitlines()] + [""]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# --- the command ------------------------------------------------------------------------

def refuse_to_overwrite(out: Path, force: bool) -> None:
    """Refuse an OUT that holds an earlier gradebook (unless force: then clear it)."""
    earlier = [out / name for name in OUTPUTS if (out / name).exists()]
    if not earlier:
        return
    if not force:
        when = datetime.fromtimestamp(max(p.stat().st_mtime for p in earlier))
        raise BookError(f"{out} already holds a gradebook (written {when:%Y-%m-%d %H:%M}); "
                        "grading again would replace it. Choose another folder (`make grade "
                        "... OUT=dir`, `--out dir`), or replace it with `FORCE=1` (`--force`)")
    for path in earlier:
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def planned(notebooks: list[tuple[Path, Path | None]], paths: list[Path], book: list[Chapter],
            explicit: Chapter | None, roster: Roster | None
            ) -> list[tuple[Path, str, Chapter | None, str]]:
    """(notebook, student, chapter or None, why none) for every notebook, the longest
    chapters first, so that a chapter 09 (minutes of training) does not start last and run
    alone. Recognising a notebook is cheap: all are recognised before any is graded."""
    work = []
    for path, root in notebooks:
        chapter, why = explicit, ""
        if chapter is None:
            try:
                chapter, why = recognise(nbformat.read(path, as_version=4), book)
            except Exception as err:  # noqa: BLE001 - reported as a row
                chapter, why = None, f"not a readable notebook: {type(err).__name__}: {err}"
        if roster is not None:
            base = next((p for p in paths if path.resolve().is_relative_to(p.resolve())
                         and p.is_dir()), path.parent)
            student, unmatched = roster.match(path.resolve().relative_to(base.resolve()))
            if student is None:
                student, chapter, why = f"? {path.name}", None, unmatched
        else:
            student = student_of(path, root, chapter.name if chapter else None)
        work.append((path, student, chapter, why))
    work.sort(key=lambda job: -stored_seconds(job[2].notebook) if job[2] else 0)
    return work


def grade_all(work: list[tuple[Path, str, Chapter | None, str]], jobs: int, threads: int,
              timeout: int, protect: list[Path], by_name: dict[str, Chapter]
              ) -> tuple[list[dict], int]:
    """Grade every notebook, `jobs` at a time, printing each as it ends; (the gradebook's
    rows, how many notebooks could not be graded)."""
    def one(job) -> tuple[dict, str]:
        path, student, chapter, why = job
        if chapter is None:
            return {"file": str(path), "chapter": None, "results": [], "error": why}, student
        return run_worker(path, chapter, timeout, threads, protect), student

    rows: list[dict] = []
    ungraded = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(one, job) for job in work]
        for future in as_completed(futures):
            outcome, student = future.result()
            new = rows_of(outcome, student, by_name)
            rows += new
            checked = [r for r in new if r["status"] in ("passed", "failed")]
            got = sum(float(r["points"] or 0) for r in checked)
            total = sum(float(r["max_points"]) for r in checked)
            if outcome.get("error"):
                ungraded += 1
                print(f"  {outcome['file']}: {outcome['error']}", flush=True)
            else:
                print(f"  {outcome['file']} ({outcome['chapter']}, {student}): {got:g}/{total:g} "
                      f"points, {outcome.get('seconds', '?')} s", flush=True)
    return rows, ungraded


def write_gradebook(out: Path, rows: list[dict], students: list[str],
                    by_name: dict[str, Chapter]) -> list[dict]:
    """Write OUT/gradebook.csv, OUT/summary.csv and OUT/feedback/; return the summary."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "gradebook.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    columns, summary = summarise(rows, students)
    with open(out / "summary.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(summary)
    (out / "feedback").mkdir()
    for line in summary:
        own = [r for r in rows if r["student"] == line["student"]]
        (out / "feedback" / f"{safe_name(line['student'])}.md").write_text(
            feedback(line["student"], own, by_name), encoding="utf-8")
    return summary


def main(args: argparse.Namespace) -> int:
    """`python -m tools.exercises grade`: grade, print progress and a summary, write the gradebook."""
    out = args.out.resolve()
    refuse_to_overwrite(out, args.force)
    roster = Roster.read(args.roster) if args.roster else None
    notebooks = collect(args.paths)
    if not notebooks:
        raise BookError(f"no notebooks (*.ipynb) in {', '.join(map(str, args.paths))}")
    book = read_book(args.book)
    by_name = {c.name: c for c in book}
    explicit = read_chapter(args.chapter.resolve().with_suffix(".ipynb")) if args.chapter else None
    cores = os.cpu_count() or 1
    jobs = max(1, min(args.jobs or cores, len(notebooks)))
    threads = max(1, cores // jobs)
    # The graded notebooks may not read the returned work or the gradebook.
    protect = [p.resolve() if p.is_dir() else p.resolve().parent for p in args.paths] + [out]
    print(f"grading {len(notebooks)} notebooks, {jobs} at a time "
          f"({threads} thread{'s' if threads > 1 else ''} each)", flush=True)
    work = planned(notebooks, args.paths, book, explicit, roster)
    start = time.perf_counter()
    rows, ungraded = grade_all(work, jobs, threads, args.timeout, protect, by_name)
    order = {str(path): i for i, (path, _) in enumerate(notebooks)}
    rows.sort(key=lambda r: (order[r["file"]],))
    summary = write_gradebook(out, rows, roster.students if roster else [], by_name)
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    print(f"\n{'student':<16} {'notebooks':>9} {'points':>12}")
    for line in summary:
        print(f"{line['student']:<16} {line['notebooks']:>9} "
              f"{line['points'] + '/' + line['max_points']:>12}"
              + (f"  (+{line['by_hand_max']} by hand)" if line["by_hand_max"] != "0" else ""))
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print(f"graded {len(notebooks) - ungraded} of {len(notebooks)} notebooks in "
          f"{time.perf_counter() - start:.0f} s; wrote {shown}/gradebook.csv, summary.csv "
          f"and feedback/ (one file per student)")
    return 1 if ungraded else 0
