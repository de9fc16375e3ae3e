"""Loaded by every Python that a grading kernel starts (its PYTHONPATH names this folder):
it installs the kernel's grading barrier (tools/grading_barrier.py) in that process too,
so that a program started by a graded notebook cannot read what the notebook may not."""

import os
import runpy

if os.environ.get("TRANSFORMER_BOOK_BARRIER"):
    runpy.run_path(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "grading_barrier.py"))["install_from_environment"]()
