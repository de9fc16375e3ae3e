"""Suite-wide: which test files are slow, so that `make quick` leaves them out and
`make test` starts them first.

The seconds are what each file took in `make pytest` on the 2-core machine (one
thread per file, two files at a time); files not listed take a few seconds. With
pytest-xdist's `--dist loadfile` each file goes whole to one worker, in the order of
collection: starting the longest first keeps one long file from running alone at the
end. A new slow file belongs here (`make pytest` prints the slowest tests).
"""

from __future__ import annotations

import pytest

SLOW = {  # file: seconds in make pytest (measured, see above)
    "test_nbgrader.py": 110,   # real nbgrader on a toy chapter, twice
    "test_site.py": 90,        # Sphinx builds the site; Chromium opens every page
    "test_generation.py": 70,  # the command line, in subprocesses
    "test_exercises.py": 60,   # kernels: grading, the proof, student copies
    "test_packaging.py": 60,   # builds the wheel and the sdist
    "test_distributed.py": 60,  # torchrun, several processes
    "test_training.py": 40,    # the copy task learns
    "test_lm.py": 30,
    "test_refinements.py": 30,
    "test_refinement_runs.py": 30,  # the comparison tool, two runs of two updates
    "test_toolchain.py": 30,   # torch.compile and torch.export
    "test_clean_install.py": 40,  # the wheel into an empty venv (pip unpacks torch)
    "test_pretrained.py": 20,
    "test_benchmarks.py": 20,
    "test_bench_peers.py": 40,  # Hugging Face models beside ours: generation and training steps
    "test_text.py": 10,
    "test_notebooks.py": 35,   # nbval itself on chapter 01
    "test_execute.py": 10,     # starts a kernel
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: a test file that takes more than a few seconds (tests/conftest.py); "
        "`make quick` leaves these out")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: -SLOW.get(item.path.name, 0))  # stable: file order kept within
