"""Reading chapter notebooks: the one place that knows the book's directives.

A chapter is `chapters/NN_name.ipynb`, paired with `chapters/NN_name.py`
(jupytext, py:percent). Inside it:

- `#| default_exp MODULE` (once, anywhere in a code cell) names the module that
  the chapter's `#| export` cells go to;
- a code cell whose first line is `#| export` goes into that module, and one
  whose first line is `#| export OTHER` goes into `transformer/OTHER.py`;
- an exercise's solution sits between `### BEGIN SOLUTION` and
  `### END SOLUTION` (nbgrader's markers);
- a code cell whose first line is `#| check NAME` is the check that grades
  exercise NAME; `#| check NAME points=2` weighs it (default: 1 point);
- inside a check, lines between `### BEGIN HIDDEN TESTS` and `### END HIDDEN TESTS`
  (nbgrader's markers) run when grading but are left out of student copies;
- a markdown cell whose first line is `<!-- #| answer NAME points=N -->` is a written
  answer, graded by hand (nbgrader's "manually graded answer"): the rest of the cell is
  the teacher's model answer, which a student copy replaces by `YOUR ANSWER HERE`;
- `#| fig-cap: ...` and `#| fig-alt: ...` lines in a code cell give its figure's
  caption and alt text (tools/figures.py: the site and the Chinese edition read them).

nbgrader reads the same markers (it finds them anywhere in a line, markdown
included), so the marker text appears nowhere else: `marker_problems` says where
it does. The nbgrader cell metadata of every cell follows from these conventions
(`nbgrader_metadata`): nothing about it is written by hand.

An **appendix** is a notebook whose title reads "Appendix: ..." (`# 14 · Appendix:
Benchmarks`). It follows the same pipeline (executed, paired, nbval, may export a
module) but is reference material, not a step of the derivation: it needs no
exercises and no "what is still missing" bridge. Appendices are numbered after every
chapter; chapters are numbered 01, 02, ... without gaps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
PACKAGE = ROOT / "transformer"

CHAPTER_NAME = re.compile(r"^(\d\d)_[a-z0-9_]+$")
DIRECTIVE = re.compile(r"^#\|\s*(\w+)(?:\s+(.*?))?\s*$")
BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
# nbgrader's delimiters, which it matches as substrings of any line of any cell.
NBGRADER_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
                    "BEGIN MARK SCHEME", "END MARK SCHEME")
CHECK_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
ANSWER_LINE = re.compile(r"^<!--\s*#\|\s*answer\s+(.*?)\s*-->\s*$")
ANSWER_STUB = "YOUR ANSWER HERE"  # what nbgrader puts in a released written-answer cell
DEFAULT_POINTS = 1
# The kernel every chapter names: the standard one, which every Jupyter install has and
# which runs the Python that started Jupyter (jupyter_client maps the native kernel's
# "python" to sys.executable), so the project's environment needs no kernel of its own.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


class BookError(Exception):
    """A chapter breaks one of the book's rules; the message says which and how to fix it."""


@dataclass
class Chapter:
    """One chapter notebook, read once."""

    path: Path  # chapters/NN_name.ipynb
    number: int
    notebook: nbformat.NotebookNode
    default_module: str | None = None
    # (module, cell index, source without the directive line), in notebook order
    exports: list[tuple[str, int, str]] = field(default_factory=list)
    # (check name, cell index)
    checks: list[tuple[str, int]] = field(default_factory=list)
    # check name -> points it is worth (`#| check NAME points=N`, default 1)
    points: dict[str, float] = field(default_factory=dict)
    # (answer name, cell index) of the written answers, graded by hand; their points
    # are in `points` too
    answers: list[tuple[str, int]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def rel(self) -> str:
        """chapters/NN_name.ipynb (the full path for a notebook outside the repo)."""
        if self.path.is_relative_to(ROOT):
            return self.path.relative_to(ROOT).as_posix()
        return str(self.path)

    @property
    def title(self) -> str:
        """The text of the notebook's first '# ' heading, or its file name."""
        for cell in self.notebook.cells:
            if cell.cell_type == "markdown":
                for line in cell.source.splitlines():
                    if line.startswith("# "):
                        # "# 03 · Single-head attention" -> "Single-head attention"
                        return re.sub(r"^\d+\s*[·.:-]?\s*", "", line[2:].strip())
        return self.name

    @property
    def is_appendix(self) -> bool:
        """True for an appendix: its title starts with "Appendix" (no exercises, no bridge)."""
        return self.title.startswith("Appendix")

    @property
    def modules(self) -> list[str]:
        """Modules this chapter exports to, default first."""
        seen = [self.default_module] if self.default_module else []
        for module, _, _ in self.exports:
            if module not in seen:
                seen.append(module)
        return seen


def stored_seconds(notebook: nbformat.NotebookNode) -> float:
    """How long the committed run took, from its cells' timestamps (0 if it has none).

    nbclient records them; `make book` and `make grade` start the longest chapters first.
    """
    from datetime import datetime

    times = [datetime.fromisoformat(cell.metadata["execution"][key].replace("Z", "+00:00"))
             for cell in notebook.cells if "execution" in cell.get("metadata", {})
             for key in ("iopub.execute_input", "shell.execute_reply")
             if key in cell.metadata["execution"]]
    return (max(times) - min(times)).total_seconds() if times else 0.0


# Chapters that time one implementation against another and assert on the ratio: with a
# second chapter beside them on two cores, single ratios of appendix 14 were seen from
# 0.15 to 1.8 (a CI run failed on it), alone they hold within about 20%.
RUNS_ALONE = frozenset({"14_benchmarks"})


def running_order(chapters: list[Chapter]) -> tuple[list[Chapter], list[Chapter]]:
    """(alone, together): the chapters in RUNS_ALONE, to run first one by one with nothing
    beside them, then the others, to run several at a time; each list longest first."""
    longest_first = sorted(chapters, key=lambda c: -stored_seconds(c.notebook))
    return ([c for c in longest_first if c.name in RUNS_ALONE],
            [c for c in longest_first if c.name not in RUNS_ALONE])


def directive(line: str) -> tuple[str, str] | None:
    """('export', 'data') for '#| export data'; None if the line is no directive."""
    match = DIRECTIVE.match(line.strip())
    return (match.group(1), match.group(2) or "") if match else None


def parse_check(value: str) -> tuple[str, float]:
    """('ex4-leak', 2) for the directive value 'ex4-leak points=2'; points default to 1."""
    words = value.split()
    if not words or not CHECK_NAME.match(words[0]):
        raise BookError(f"`#| check {value}`: a check needs a name of letters, digits, '-' "
                        "and '_' (it becomes nbgrader's grade_id), e.g. `#| check ex1-causal`")
    points: float = DEFAULT_POINTS
    for option in words[1:]:
        key, _, number = option.partition("=")
        try:
            points = float(number) if key == "points" else float("nan")
        except ValueError:
            points = float("nan")
        if not 0 < points < float("inf"):
            raise BookError(f"`#| check {value}`: the only option is `points=N`, with N a "
                            "positive number (default 1)")
    return words[0], int(points) if points == int(points) else points


def check_directive(source: str) -> tuple[str, float] | None:
    """(name, points) for a cell whose first line is `#| check NAME [points=N]`, else None."""
    lines = source.splitlines()
    found = directive(lines[0]) if lines else None
    return parse_check(found[1]) if found and found[0] == "check" else None


def answer_directive(source: str) -> tuple[str, float] | None:
    """(name, points) for a markdown cell whose first line is `<!-- #| answer NAME points=N -->`."""
    lines = source.splitlines()
    match = ANSWER_LINE.match(lines[0].strip()) if lines else None
    return parse_check(match.group(1)) if match else None


def read_chapter(path: Path) -> Chapter:
    """Parse one notebook's directives; raise BookError on a malformed one."""
    match = CHAPTER_NAME.match(path.stem)
    if not match:
        raise BookError(f"{path.name}: chapter files are named NN_name.ipynb (lower case)")
    notebook = nbformat.read(path, as_version=4)
    chapter = Chapter(path=path, number=int(match.group(1)), notebook=notebook)
    pending: list[tuple[str | None, int, str]] = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown":
            try:
                answer = answer_directive(cell.source)
            except BookError as err:
                raise BookError(f"{chapter.rel}, cell {index}: {err}") from None
            if answer:
                chapter.answers.append((answer[0], index))
                chapter.points[answer[0]] = answer[1]
        if cell.cell_type != "code":
            continue
        lines = cell.source.splitlines()
        for line in lines:
            found = directive(line)
            if found and found[0] == "default_exp":
                if chapter.default_module:
                    raise BookError(f"{chapter.rel}: `#| default_exp` appears more than once")
                chapter.default_module = found[1]
        first = directive(lines[0]) if lines else None
        if first and first[0] == "export":
            pending.append((first[1] or None, index, "\n".join(lines[1:]).strip("\n")))
        elif first and first[0] == "check":
            try:
                name, points = parse_check(first[1])
            except BookError as err:
                raise BookError(f"{chapter.rel}, cell {index}: {err}") from None
            chapter.checks.append((name, index))
            chapter.points[name] = points
    for module, index, source in pending:
        module = module or chapter.default_module
        if module is None:
            raise BookError(
                f"{chapter.rel}, cell {index}: `#| export` with no module; "
                "add `#| default_exp MODULE` near the top of the notebook"
            )
        chapter.exports.append((module, index, source))
    return chapter


def read_book(directory: Path = CHAPTERS) -> list[Chapter]:
    """All chapters, in chapter order; two chapters may not share a number."""
    chapters = [read_chapter(p) for p in sorted(directory.glob("*.ipynb"))]
    numbers: dict[int, str] = {}
    for chapter in chapters:
        if chapter.number in numbers:
            raise BookError(f"{numbers[chapter.number]} and {chapter.rel} share number {chapter.number:02d}")
        numbers[chapter.number] = chapter.rel
    return chapters


def marked_regions(source: str, begin_marker: str, end_marker: str) -> list[tuple[int, int]]:
    """(begin, end) line indices of each region between two marker lines, markers included."""
    regions, begin = [], None
    for i, line in enumerate(source.splitlines()):
        if line.strip() == begin_marker:
            if begin is not None:
                raise BookError(f"nested `{begin_marker}`")
            begin = i
        elif line.strip() == end_marker:
            if begin is None:
                raise BookError(f"`{end_marker}` without a BEGIN")
            regions.append((begin, i))
            begin = None
    if begin is not None:
        raise BookError(f"`{begin_marker}` without an END")
    return regions


def solution_regions(source: str) -> list[tuple[int, int]]:
    """(begin, end) line indices of each solution region in a cell, markers included."""
    return marked_regions(source, BEGIN_SOLUTION, END_SOLUTION)


def hidden_test_regions(source: str) -> list[tuple[int, int]]:
    """(begin, end) line indices of each hidden-tests region in a check, markers included."""
    return marked_regions(source, BEGIN_HIDDEN, END_HIDDEN)


def strip_hidden_tests(source: str) -> str:
    """A check's source without its hidden-tests regions (what a student copy shows)."""
    lines = source.splitlines()
    for begin, end in reversed(hidden_test_regions(source)):
        del lines[begin:end + 1]
    return "\n".join(lines)


# --- nbgrader cell metadata, derived from the conventions above ------------------

def answer_metadata(name: str, points: int, index: int, seen: set[str]) -> dict:
    """A written answer's nbgrader metadata (manually graded); its name joins `seen`."""
    if name in seen:
        raise BookError(f"cell {index}: answer `{name}` has the name of another exercise")
    seen.add(name)
    return {"grade": True, "grade_id": name, "locked": False, "points": points,
            "schema_version": 3, "solution": True, "task": False}


def nbgrader_metadata(notebook: nbformat.NotebookNode) -> list[dict | None]:
    """The nbgrader metadata each cell must carry (None: none), in cell order.

    - a code cell with a solution region: a solution cell, grade_id `NAME-solution`
      after the check NAME that follows it;
    - a code cell whose first line is `#| check NAME [points=N]`: an autograded test,
      grade_id NAME, N points (default 1), locked;
    - every other code cell: locked (read-only; nbgrader restores it from the
      teacher's copy when grading), grade_id `cell-ID` after the cell's nbformat id,
      which jupytext keeps, so that ids do not shift when a cell is inserted;
    - a markdown cell whose first line is `<!-- #| answer NAME points=N -->`: a
      manually graded answer (solution and graded), grade_id NAME, N points;
    - other markdown and raw cells: none. The prose does not take part in grading;
      leaving it unlocked lets a student write notes beside an exercise.

    Raises BookError for a notebook that breaks the conventions (a solution with no
    check after it, a cell that is both, a repeated check name, a cell without id).
    """
    cells = notebook.cells
    found: list[dict | None] = [None] * len(cells)
    pending: list[int] = []  # solution cells waiting for the check that follows them
    seen: set[str] = set()
    for index, cell in enumerate(cells):
        if cell.cell_type == "markdown" and (answer := answer_directive(cell.source)):
            found[index] = answer_metadata(*answer, index, seen)
            continue
        if cell.cell_type != "code":
            continue
        solution = bool(solution_regions(cell.source))
        check = check_directive(cell.source)
        if solution and check:
            raise BookError(f"cell {index}: a cell is either a solution or a check, not both")
        meta = {"grade": False, "locked": False, "schema_version": 3, "solution": False,
                "task": False}
        if solution:
            if pending:
                raise BookError(f"cell {pending[0]}: solution with no `#| check` cell after it")
            pending.append(index)
            meta["solution"] = True
        elif check:
            name, points = check
            if name in seen:
                raise BookError(f"cell {index}: check `{name}` appears twice (or shares its "
                                "name with a written answer)")
            seen.add(name)
            meta.update(grade=True, locked=True, grade_id=name, points=points)
            for waiting in pending:
                found[waiting]["grade_id"] = f"{name}-solution"
            pending = []
        else:
            if not cell.get("id"):
                raise BookError(f"cell {index} has no id (nbformat 4.5 cell ids): "
                                "open and save the notebook with a current Jupyter or jupytext")
            meta.update(locked=True, grade_id=f"cell-{cell.id}")
        found[index] = meta
    if pending:
        raise BookError(f"cell {pending[0]}: solution with no `#| check` cell after it")
    return found


def marker_problems(notebook: nbformat.NotebookNode) -> list[str]:
    """Where nbgrader's marker text appears outside its place (nbgrader would break)."""
    problems = []
    for index, cell in enumerate(notebook.cells):
        allowed: set[int] = set()
        if cell.cell_type == "code":
            try:
                regions = solution_regions(cell.source) + hidden_test_regions(cell.source)
            except BookError as err:
                problems.append(f"cell {index}: {err}")
                continue
            for begin, end in regions:
                allowed.update((begin, end))
            if hidden_test_regions(cell.source) and not check_directive(cell.source):
                problems.append(f"cell {index}: hidden tests outside a `#| check` cell")
        for number, line in enumerate(cell.source.splitlines()):
            if number not in allowed and any(m in line for m in NBGRADER_MARKERS):
                problems.append(
                    f"cell {index} ({cell.cell_type}), line {number + 1}: nbgrader's marker "
                    f"text in {line.strip()[:60]!r}; nbgrader scans every line of every cell "
                    "for it, so say it in words")
    return problems


def stamp_notebook(notebook: nbformat.NotebookNode) -> list[str]:
    """Write the derived nbgrader metadata and the kernelspec into a notebook, in place.

    Deterministic and idempotent; returns what changed (empty when nothing did).
    """
    changes = []
    for index, (cell, meta) in enumerate(zip(notebook.cells, nbgrader_metadata(notebook),
                                             strict=True)):
        if meta is None:
            if "nbgrader" in cell.metadata:
                del cell.metadata["nbgrader"]
                changes.append(f"cell {index}: nbgrader metadata removed (a {cell.cell_type} cell)")
        elif cell.metadata.get("nbgrader") != meta:
            what = "added" if "nbgrader" not in cell.metadata else "updated"
            cell.metadata["nbgrader"] = meta
            changes.append(f"cell {index} ({meta.get('grade_id')}): nbgrader metadata {what}")
    if notebook.metadata.get("kernelspec") != KERNELSPEC:
        notebook.metadata["kernelspec"] = dict(KERNELSPEC)
        changes.append(f"kernelspec set to {KERNELSPEC['name']}")
    return changes
