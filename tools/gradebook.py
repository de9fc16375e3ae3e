"""A gradebook for a class: grade a folder of returned notebooks, several at a time.

Behind `python -m tools.exercises grade PATH ...` (`make grade NB=folder/ OUT=dir`):

- every *.ipynb under each PATH is one returned notebook, whatever its name; its
  chapter is recognised from the notebook itself (`recognise`): the chapter a student
  copy records in its metadata, else the check names / nbgrader grade_ids of its cells,
  else its title heading `# NN · ...`;
- its student comes from a roster, when one is given (`Roster`: a CSV with a `student`
  column, the id written into the gradebook, and any columns of names, logins, e-mail
  addresses or file names found in the returned files' paths), else from the path
  (`student_of`);
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
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import nbformat

from tools.exercise_cells import META_KEY, check_name, in_student_terms
from tools.notebooks import (
    ROOT,
    BookError,
    Chapter,
    read_book,
    read_chapter,
    stored_seconds,
)

GRADER = "tools.exercises"  # run as `python -m tools.exercises grade-one ...` from ROOT
TITLE = re.compile(r"^#\s+(\d+)\s*·")
COLUMNS = ["file", "student", "chapter", "exercise", "status", "points", "max_points", "message"]
OUTPUTS = ("gradebook.csv", "summary.csv", "feedback")
COPY_SUFFIX = re.compile(r"(\s*\(\d+\)|[-_ ]\d+)$")  # "hw3 (1)", "hw3-2": a re-download


# --- which chapter is this? -------------------------------------------------------

def recognise(notebook: nbformat.NotebookNode, chapters: list[Chapter]
              ) -> tuple[Chapter | None, str]:
    """(chapter, how it was recognised) or (None, why not)."""
    chapters = [c for c in chapters if c.checks]  # an appendix has no exercises to grade
    by_name = {c.name: c for c in chapters}
    recorded = (notebook.metadata.get(META_KEY) or {}).get("chapter")
    if recorded in by_name:
        return by_name[recorded], "the chapter recorded in the student copy"
    found: set[str] = set()
    title = None
    for cell in notebook.cells:
        if cell.cell_type == "code":
            grade_id = ((cell.metadata.get("nbgrader") or {}).get("grade_id")) or ""
            found.update({grade_id, grade_id.removesuffix("-solution"),
                          check_name(cell) or ""})
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


# --- whose notebook is this? -------------------------------------------------------

def tokens(text: str) -> list[str]:
    """Lower-case words of a path or a name: 'returned/hw7/Alice_Smith (1).ipynb' ->
    ['returned', 'hw7', 'alice', 'smith', '1', 'ipynb']."""
    return [t for t in re.split(r"[^0-9a-z]+", text.lower()) if t]


@dataclass
class Roster:
    """Students and the strings that identify them in returned files' paths.

    Read from a CSV file whose header has a `student` column (the id written into the
    gradebook: a login, a number) and any other columns: names, e-mail addresses, LMS
    logins, or a `file` column naming a student's returned file(s) exactly (several
    separated by `;`). A notebook belongs to the student one of whose values appears in
    its path, below the graded folder, as whole words (`Alice Smith` matches
    `hw3/alice_smith_83921_hw3 final (1).ipynb` and `returned/hw7/Alice Smith/...`; the
    words run together also match, as LMS downloads write them: `smithalice`); the
    longest match wins. A `file` entry always wins.
    """

    students: list[str]
    aliases: dict[str, list[list[str]]] = field(default_factory=dict)  # student -> word lists
    files: dict[str, str] = field(default_factory=dict)  # exact path or name -> student

    @classmethod
    def read(cls, path: Path) -> Roster:
        try:
            with open(path, newline="", encoding="utf-8-sig") as handle:
                rows = list(csv.DictReader(handle))
        except OSError as err:
            raise BookError(f"roster {path}: {err.strerror}") from None
        if not rows or "student" not in rows[0]:
            raise BookError(f"roster {path}: expected a CSV file whose header has a "
                            "`student` column (the id to write into the gradebook), and "
                            "optionally columns of names, e-mails or file names")
        roster = cls(students=[])
        for number, row in enumerate(rows, start=2):
            student = (row.get("student") or "").strip()
            if not student:
                raise BookError(f"roster {path}, line {number}: the `student` column is empty")
            if student in roster.aliases:
                raise BookError(f"roster {path}, line {number}: student {student!r} appears twice")
            roster.students.append(student)
            words = []
            for column, value in row.items():
                for item in (value or "").split(";") if column in ("file", "files") else [value or ""]:
                    item = item.strip()
                    if not item:
                        continue
                    if column in ("file", "files"):
                        roster.files[item] = student
                        continue
                    if "@" in item:  # an e-mail: its local part too
                        words.append(tokens(item.split("@")[0]))
                    words.append(tokens(item))
            roster.aliases[student] = [w for w in words if w]
        return roster

    def match(self, relative: Path) -> tuple[str | None, str]:
        """(student, '') for a notebook's path below the graded folder, or (None, why not)."""
        text = relative.as_posix()
        for key in (text, relative.name):
            if key in self.files:
                return self.files[key], ""
        words = tokens(text.removesuffix(".ipynb"))
        joined = {a + b for a, b in zip(words, words[1:], strict=False)} | set(words)
        scores: dict[str, int] = {}
        for student, aliases in self.aliases.items():
            for alias in aliases:
                size = len(alias)
                found = any(words[i:i + size] == alias for i in range(len(words) - size + 1))
                if not found and size > 1:  # 'Alice Smith' written as 'alicesmith' or 'smithalice'
                    found = "".join(alias) in joined or "".join(reversed(alias)) in joined
                if found:
                    scores[student] = max(scores.get(student, 0), sum(map(len, alias)))
        if not scores:
            return None, ("no student of the roster matches this file's path: add its name "
                          "to the roster's `file` column")
        best = max(scores.values())
        winners = sorted(s for s, score in scores.items() if score == best)
        if len(winners) > 1:
            return None, (f"this file's path matches students {', '.join(winners)} equally: "
                          "name it in the roster's `file` column")
        return winners[0], ""


def student_of(path: Path, root: Path | None, chapter: str | None) -> str:
    """The student of a returned notebook without a roster.

    `root` is the folder below which the notebook was found, less the folders that all
    its notebooks share (`returned/hw7/alice/...` and `returned/hw7/bob/...` give `alice`
    and `bob`). The first folder left is the student (nbgrader's `submitted/STUDENT/...`,
    or one folder per student); a notebook with no folder left is named after its file,
    less the chapter's name and a re-download's ` (1)` (`07_blocks_alice.ipynb` ->
    `alice`).
    """
    if root is not None and path.is_relative_to(root):
        parts = path.relative_to(root).parts
        if len(parts) > 1:
            return parts[0]
    stem = COPY_SUFFIX.sub("", path.stem)
    if chapter:
        topic = chapter.split("_", 1)[-1]  # 07_blocks -> blocks
        for part in (chapter, topic):
            rest = re.sub(rf"(^|[_\-. ]){re.escape(part)}($|[_\-. ])", "_", stem).strip("_-. ")
            if rest and rest != stem and rest != chapter.split("_", 1)[0]:
                return rest
    return stem


def shared_folder(paths: list[Path], root: Path) -> Path:
    """`root` extended by the folders that every notebook found under it shares, so that
    the first folder below it is a student's (`returned/hw7/alice/...` and
    `returned/hw7/bob/...` give `returned/hw7`). Where all notebooks sit in one folder,
    that folder is taken for the student's (`returned/alice/07.ipynb` alone)."""
    parents = [p.relative_to(root).parts[:-1] for p in paths]
    common: list[str] = []
    for level in zip(*parents, strict=False):  # stops at the shortest
        if len(set(level)) != 1:
            break
        common.append(level[0])
    if common and all(len(p) == len(common) for p in parents):
        common.pop()
    return root.joinpath(*common)


# --- grading one notebook (in its own process) -------------------------------------

def run_worker(path: Path, chapter: Chapter | None, timeout: int, threads: int,
               protect: list[Path] = ()) -> dict:
    """Grade one notebook in a child process (with its own kernel); never raises.

    The child is `python -m tools.exercises grade-one`, started in the repository root
    (where `tools` imports), so the paths it is given are absolute."""
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
        return {**base, "error": f"the grader failed on this notebook (exit {process.returncode}): "
                                 f"{tail[-400:]}"}


# --- many notebooks ------------------------------------------------------------------

def collect(paths: list[Path]) -> list[tuple[Path, Path | None]]:
    """(notebook, the folder that holds its student's folders) for every notebook named
    or found: for a folder, the folder itself with the folders its notebooks all share."""
    found = []
    for path in paths:
        if path.is_dir():
            notebooks = [nb for nb in sorted(path.rglob("*.ipynb"))
                         if ".ipynb_checkpoints" not in nb.parts]
            root = shared_folder(notebooks, path)
            found += [(nb, root) for nb in notebooks]
        elif path.exists():
            found.append((path, None))
        else:
            raise BookError(f"{path}: no such file or folder")
    return found


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
        if roster is not None:
            base = next((p for p in args.paths if path.resolve().is_relative_to(p.resolve())
                         and p.is_dir()), path.parent)
            student, unmatched = roster.match(path.resolve().relative_to(base.resolve()))
            if student is None:
                student, chapter, why = f"? {path.name}", None, unmatched
        else:
            student = student_of(path, root, chapter.name if chapter else None)
        jobs_list.append((path, student, chapter, why))
    jobs_list.sort(key=lambda job: -stored_seconds(job[2].notebook) if job[2] else 0)

    def one(job) -> tuple[dict, str]:
        path, student, chapter, why = job
        if chapter is None:
            return {"file": str(path), "chapter": None, "results": [], "error": why}, student
        return run_worker(path, chapter, args.timeout, threads, protect), student

    start = time.perf_counter()
    rows: list[dict] = []
    ungraded = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(one, job) for job in jobs_list]
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
    order = {str(path): i for i, (path, _) in enumerate(notebooks)}
    rows.sort(key=lambda r: (order[r["file"]],))
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "gradebook.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    columns, summary = summarise(rows, roster.students if roster else [])
    with open(out / "summary.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(summary)
    (out / "feedback").mkdir()
    for line in summary:
        own = [r for r in rows if r["student"] == line["student"]]
        (out / "feedback" / f"{safe_name(line['student'])}.md").write_text(
            feedback(line["student"], own, by_name), encoding="utf-8")
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
