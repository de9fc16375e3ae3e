"""The proof that every check can fail, run inside the chapter's own kernel.

After each check cell of a chapter, a *proof cell* is inserted. When the notebook runs,
that cell first asks the grading guard whether the check compares only against what
the guard restores (names bound to modules or library and package objects, or defined
by the exercise's own solution: anything else, a student's cell could rebind), and runs
the check as a student copy shows it (hidden tests left out), which must pass on the
solution too. Then it replaces the exercise's solution in turn by the student stub and
by each recorded near-miss answer (tests/near_misses/NN_name.py) and runs the whole
check after each: the check must fail every time. Then the solution and the check run once more (the
check must pass again, so that the exercises after it see the state they expect) and
the random number generators are put back as the check left them, so that the cells
after the proof print what they print in a plain run of the chapter.

So one run of a chapter both executes it (its outputs can be compared with the
committed ones) and proves its checks: `python -m tools.exercises verify` runs such a
notebook with nbclient, and `make test` hands it to nbgrader as the solved student's
submission (tools/chapter_test.py), so the one execution is graded too.

This file's source also travels inside each proof cell and runs in the kernel (the
grading barrier keeps a graded kernel from reading the repository, tools/ included),
so it imports only the standard library at the top; the tools it uses around the run
(tools/exercise_cells.py, the grading guard's names_read) are imported inside the
functions that run outside the kernel.

    notebook = with_proof_cells(chapter, answers)     # before the run
    ...execute notebook, the grading guard loaded...
    problems = proof_problems(notebook, chapter)      # after it
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

MIME = "application/vnd.transformer-book.exercise-proof+json"
HEADER = "# exercise proof of check "  # first line of a proof cell: HEADER + check name
FIRST_LINE = re.compile(r"^# exercise proof of check (\S+)")


# --- in the kernel ----------------------------------------------------------------

def _error_text(error: BaseException | None) -> str | None:
    """'Ename: evalue', as nbclient records an error output, or None."""
    return None if error is None else f"{type(error).__name__}: {error}".strip()


def _rng_states() -> list:
    """The state of every random number generator a chapter draws from."""
    import random
    import sys

    states = [(random.setstate, random.getstate())]
    if "numpy" in sys.modules:
        numpy_random = sys.modules["numpy"].random
        states.append((numpy_random.set_state, numpy_random.get_state()))
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        states.append((torch.set_rng_state, torch.get_rng_state()))
    return states


def prove(payload: dict) -> dict:
    """Run one check against each wrong answer in this kernel; display and return the results.

    payload: {"check": name, "check_source": ..., "solution": ..., "forget": [names],
              "visible": the check less its hidden tests (None: it has none),
              "forget_check": [names the check binds],
              "reads": [names the check reads that the solution does not define],
              "variants": [[label, source], ...]}
    Returns {"check": name, "untrusted": [names], "visible": error or None,
             "variants": [[label, error or None], ...],
             "after": error of the solution and check re-run, or None}.
    """
    import sys

    shell = get_ipython()  # noqa: F821 - defined inside IPython
    states = _rng_states()
    forget = "".join(f"globals().pop({name!r}, None)\n" for name in payload["forget"])
    guard = sys.modules.get("_transformer_book_grading_guard")
    untrusted = []
    if payload.get("reads") is not None:
        untrusted = (guard.guard.untrusted(payload["reads"]) if guard is not None
                     else ["(the grading guard is not loaded in this kernel)"])

    def run(source: str) -> str | None:
        # Each source runs as a cell would (input transformers and the grading guard's
        # hooks included), without entering the history.
        result = shell.run_cell(source, store_history=False)
        return _error_text(result.error_before_exec or result.error_in_exec)

    show = shell._showtraceback
    shell._showtraceback = lambda *args, **kwargs: None  # the expected failures stay silent
    try:
        visible = None
        if payload.get("visible") is not None:
            # what the whole check bound (a name of its hidden tests) must not help
            run("".join(f"globals().pop({name!r}, None)\n" for name in payload["forget_check"]))
            visible = run(payload["visible"])
        variants = []
        for label, source in payload["variants"]:
            run(forget)
            run(source)
            variants.append([label, run(payload["check_source"])])
        run(forget)
        after = run(payload["solution"]) or run(payload["check_source"])
    finally:
        shell._showtraceback = show
        for set_state, state in states:
            set_state(state)
    found = {"check": payload["check"], "untrusted": untrusted, "visible": visible,
             "variants": variants, "after": after}
    from IPython.display import display

    display({MIME: found, "text/plain": f"exercise proof of {payload['check']}: "
             f"{sum(error is not None for _, error in variants)} of {len(variants)} "
             "wrong answers fail the check"}, raw=True)
    return found


def prove_encoded(encoded: str) -> dict:
    """`prove` for a payload in base64-encoded JSON (what a proof cell holds)."""
    return prove(json.loads(base64.b64decode(encoded)))


# --- around the run ---------------------------------------------------------------

def proof_source(payload: dict) -> str:
    """The proof cell: run this file's source in the kernel and prove one check.

    The source travels in the cell (a graded kernel may not read tools/), and so does
    the payload; both base64-encoded, so that the solution's and the hidden tests'
    marker lines inside them are not seen by nbgrader, which scans every cell for them.
    """
    encoded = base64.b64encode(json.dumps(payload).encode()).decode()
    source = base64.b64encode(Path(__file__).read_bytes()).decode()
    return (f"{HEADER}{payload['check']} (inserted by tools/exercise_proof.py)\n"
            f"_proof = {{'__name__': 'exercise_proof'}}\n"
            f"exec(__import__('base64').b64decode({source!r}), _proof)\n"
            f"_proof['prove_encoded']({encoded!r})\n"
            "del _proof;")


def proof_name(cell) -> str | None:
    """The check a proof cell proves, or None for any other cell."""
    match = FIRST_LINE.match(cell.source) if cell.cell_type == "code" else None
    return match.group(1) if match else None


def payloads(chapter, answers: dict[str, dict[str, str]]) -> dict[int, dict]:
    """{check cell index: what its proof cell runs} for each check after a solution."""
    from tools.exercise_cells import check_name, defined_names, strip_solutions
    from tools.grading_guard import names_read
    from tools.notebooks import solution_regions, strip_hidden_tests

    found, solution = {}, None
    for index, cell in enumerate(chapter.notebook.cells):
        if cell.cell_type == "code" and solution_regions(cell.source):
            solution = cell.source
        elif (name := check_name(cell)) is not None and solution is not None:
            variants = [["the student stub", strip_solutions(solution)]]
            variants += [[f"near-miss \"{label}\"", source]
                         for label, source in answers.get(name, {}).items()]
            visible = strip_hidden_tests(cell.source)
            reads = sorted(names_read(cell.source) - set(defined_names(solution)))
            found[index] = {"check": name, "check_source": cell.source, "solution": solution,
                            "forget": defined_names(solution),
                            "visible": visible if visible != cell.source else None,
                            "forget_check": defined_names(cell.source),
                            "reads": reads,
                            "variants": variants}
    return found


def with_proof_cells(notebook, chapter, answers: dict[str, dict[str, str]]):
    """A copy of `notebook` (the chapter's cells, in order) with a proof cell after each check."""
    import nbformat

    proofs = payloads(chapter, answers)
    copy = nbformat.from_dict(notebook)
    copy.cells = []
    for index, cell in enumerate(notebook.cells):
        copy.cells.append(cell)
        if index in proofs:
            copy.cells.append(nbformat.v4.new_code_cell(proof_source(proofs[index])))
    return copy


def without_proof_cells(cells: list) -> list:
    """The cells of a run, less the proof cells: the chapter's own, in order."""
    return [cell for cell in cells if proof_name(cell) is None]


def proof_problems(executed, chapter, verbose: bool = False) -> list[str]:
    """What the run of a notebook with proof cells says about the chapter's checks."""
    from tools.exercise_cells import check_name, error_of, stderr_of

    problems, cells = [], executed.cells
    wanted = {name for name, _ in chapter.checks}
    for index, cell in enumerate(cells):
        name = check_name(cell)
        if name not in wanted or proof_name(cell) is not None:
            continue
        if cell.get("execution_count") is None:
            problems.append(f"check `{name}` did not run")
            continue
        if (error := error_of(cell)) is not None:
            problems.append(f"check `{name}` fails on the solution: {error}")
            continue
        if (line := stderr_of(cell)) is not None:
            problems.append(f"check `{name}` writes to stderr on the solution under grading "
                            f"({line!r}), which nbgrader grades as a failure")
        proof = cells[index + 1] if index + 1 < len(cells) else None
        found = None
        if proof is not None and proof_name(proof) == name:
            found = next((output["data"][MIME] for output in proof.get("outputs", [])
                          if MIME in output.get("data", {})), None)
        if found is None:
            why = error_of(proof) if proof is not None else None
            problems.append(f"check `{name}`: its proof did not run"
                            + (f" ({why})" if why else ""))
            continue
        for untrusted in found.get("untrusted", []):
            problems.append(f"check `{name}` reads `{untrusted}`, which the notebook "
                            "defines: a student's cell could replace it. Take the "
                            "reference from the package or a library inside the check "
                            "(`from transformer.NAME import ...`), or build it there")
        if found.get("visible") is not None:
            problems.append(f"check `{name}` without its hidden tests (as a student copy shows "
                            f"it) fails on the solution: {found['visible']}")
        for label, error in found["variants"]:
            if error is None:
                problems.append(f"check `{name}` passes on {label}: it cannot tell that "
                                "answer from the solution")
            elif verbose:
                print(f"  {name}: fails on {label}: {error.splitlines()[0][:160]}")
        if found["after"] is not None:
            problems.append(f"check `{name}` fails on the solution after the wrong answers "
                            f"ran (state not restored?): {found['after']}")
    return problems
