"""Returned notebooks: which chapter each is for, and whose it is.

- `collect`: every *.ipynb under the paths given (a file, or a folder searched), each
  with the folder below which its student's folder lies;
- `recognise`: the chapter of a notebook, whatever its file name: the chapter a student
  copy records in its metadata, else the check names / nbgrader grade_ids of its cells,
  else its title heading `# NN · ...`;
- its student: from a roster (`Roster`: a CSV with a `student` column, the id written
  into the gradebook, and any columns of names, logins, e-mail addresses or file names
  found in the returned files' paths), else from the path (`student_of`).

Used by tools/gradebook.py (`python -m tools.exercises grade`), and by tools/grading.py
and tools/exercises.py (`check`), which recognise the chapter of the notebook they run.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from tools.exercise_cells import META_KEY, check_name
from tools.notebooks import BookError, Chapter

TITLE = re.compile(r"^#\s+(\d+)\s*·")
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


# --- the notebooks handed in ---------------------------------------------------------

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

