"""Suite-wide: which test files are slow, so that `make quick` leaves them out and
`make test` starts them first.

The seconds are what each file took in `make pytest` on the 2-core machine (one
thread per file, two files at a time); files not listed take a few seconds. With
pytest-xdist's `--dist loadfile` each file goes whole to one worker, in the order of
collection: starting the longest first keeps one long file from running alone at the
end. A new slow file belongs here (`make pytest` prints the slowest tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest

SLOW = {  # file: seconds of its tests in make pytest, measured 2026-12-02 (see above)
    "test_cheats.py": 178,      # issue 20's class (03, 07, 13) through real nbgrader and make grade; alone
    "test_site.py": 250,        # Sphinx builds both sites; Chromium opens every page, prints two PDFs
    "test_distributed.py": 87,  # torchrun, several processes
    "test_exercises.py": 99,    # kernels: grading, the proof, student copies
    "test_nbgrader.py": 84,     # real nbgrader on a toy chapter, twice
    "test_clean_install.py": 43,  # the wheel into an empty venv (pip unpacks torch)
    "test_refinement_runs.py": 13,  # the comparison tool, two runs of two updates
    "test_generation.py": 19,   # the command line, in subprocesses
    "test_readme.py": 18,       # the README's examples, and its command lines in subprocesses
    "test_text.py": 9,          # rebuilds the shipped corpus from npm's package
    "test_training.py": 6,      # the copy task learns
    "test_notebooks.py": 6,     # nbval itself on chapter 01
    "test_toolchain.py": 5,     # torch.compile and torch.export
    "test_lm.py": 3,
    "test_packaging.py": 3,     # builds the wheel and the sdist
    "test_refinements.py": 3,
    "test_execute.py": 2,       # starts a kernel
    "test_bench_peers.py": 2,   # imports Hugging Face transformers
    "test_pretrained.py": 1,
    "test_benchmarks.py": 1,
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: a test file that takes more than a few seconds (tests/conftest.py); "
        "`make quick` leaves these out")


def pytest_collection_modifyitems(config, items):
    for item in items:
        # real nbgrader runs whole chapters: slow wherever its test lives
        if item.path.name in SLOW or item.get_closest_marker("nbgrader"):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: -SLOW.get(item.path.name, 0))  # stable: file order kept within


SMALL_CORPUS = 3000  # poems: the shipped corpus's first ones (of 49,025)


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory) -> Path:
    """The shipped corpus's first SMALL_CORPUS poems, in the text format read_corpus reads
    (`data.corpus` of a config, `--corpus` of tools/refinement_runs.py). A run on the whole
    corpus spends most of a test's seconds reading, splitting and encoding it in every
    process and scoring the whole validation stream; chapter 12 and make refinements use
    the whole corpus."""
    from tools.extract_corpus import corpus_text
    from transformer.corpus import read_corpus

    path = tmp_path_factory.mktemp("corpus") / "poems.txt"
    path.write_text(corpus_text(read_corpus()[:SMALL_CORPUS]), encoding="utf-8")  # Documents: (author, title, text)
    return path
