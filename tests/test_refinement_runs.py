"""Chapter 13's comparison, trained ahead of time (tools/refinement_runs.py, `make refinements`).

The shipped results must be what the shipped config and the tool produce: the same
config, every variant of the tool with the seeds the chapter reads its verdicts from, a
full training curve per run and finite scores. And the tool itself, run for two
updates, writes a file of that shape.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tools import refinement_runs
from transformer.config import load_config

ROOT = Path(__file__).resolve().parent.parent


def check_shape(result: dict, steps: int, seeds: dict[str, int]) -> None:
    """Every run complete; `seeds`: variant -> the number of seeds it must have."""
    assert set(result) >= {"config", "valid_ids", "long_factor", "variants", "torch", "jobs", "runs"}
    every = refinement_runs.variants(result["config"]["model"]["d_ff"])
    counts: dict[str, int] = {}
    for run in result["runs"]:
        assert run["options"] == every[run["variant"]], run["variant"]
        assert len(run["losses"]) == steps and all(math.isfinite(x) for x in run["losses"])
        assert math.isfinite(run["short"]) and math.isfinite(run["long"]) and run["cpu_seconds"] > 0
        counts[run["variant"]] = counts.get(run["variant"], 0) + 1
    assert {name: counts.get(name, 0) for name in seeds} == seeds, counts


def test_the_shipped_comparison_is_the_shipped_configs():
    result = json.loads(refinement_runs.OUT.read_text(encoding="utf-8"))
    config = load_config(refinement_runs.CONFIG)
    assert result["config"] == config
    assert result["valid_ids"] == refinement_runs.VALID_IDS and result["long_factor"] == refinement_runs.LONG
    variants = list(refinement_runs.variants(config["model"]["d_ff"]))
    assert result["variants"] == variants
    seeds = {name: refinement_runs.SEEDS if name in refinement_runs.SPREAD else refinement_runs.SINGLE_SEEDS
             for name in variants}
    check_shape(result, config["train"]["steps"], {name: len(seeds[name]) for name in variants})
    assert all(run["seed"] in seeds[run["variant"]] for run in result["runs"])
    for run in result["runs"]:  # the curve the chapter draws: every eval_every updates, to the end
        assert [step for step, _ in run["valid_curve"]] == list(
            range(config["train"]["eval_every"], config["train"]["steps"] + 1, config["train"]["eval_every"]))


def test_the_tool_writes_what_the_chapter_reads(tmp_path, small_corpus):
    """Two updates of two variants, on the corpus's first poems (--corpus, tests/conftest.py):
    on all of them, reading and encoding the corpus and scoring the whole validation stream
    took most of the test's 44 seconds."""
    out = tmp_path / "comparison.json"
    run = subprocess.run([sys.executable, "-m", "tools.refinement_runs", "--steps", "2",
                          "--seeds", "0", "--variants", "all four", "2017", "--jobs", "2",
                          "--corpus", str(small_corpus), "--out", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["config"]["train"]["steps"] == 2 and result["variants"] == ["all four", "2017"]
    assert result["config"]["data"]["corpus"] == str(small_corpus.resolve())
    check_shape(result, 2, {"2017": 1, "all four": 1})
    assert [r["variant"] for r in result["runs"]] == ["all four", "2017"]  # in the order asked for


def test_an_unknown_variant_is_refused(capsys):
    with pytest.raises(SystemExit):
        refinement_runs.main(["--variants", "ALiBi", "--out", "/nonexistent/x.json"])
    assert "ALiBi" in capsys.readouterr().err


def test_a_missing_corpus_is_refused(capsys, tmp_path):
    with pytest.raises(SystemExit):
        refinement_runs.main(["--corpus", str(tmp_path / "none.txt"), "--out", str(tmp_path / "x.json")])
    assert "--corpus" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
