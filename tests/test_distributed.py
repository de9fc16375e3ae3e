"""Chapter 12: training on several processes (torchrun, DDP, gloo on CPU), configs, resume.

The equivalences are measured on a tiny model (d_model 16, 1 + 1 layers, ~50 words a
side, 6 steps of 16 sentences). Tolerances: DDP and accumulation change only the order
in which float32 sums are added; measured here after 6 steps, the largest weight
difference is 4.5e-7 (2 micro-batches against 1) and 8.2e-7 (2 processes x 2 micro-batches
against 1 process), the largest relative gradient-norm and loss differences 1e-7 and 2e-7;
we allow 1e-5. The attention key biases are left out of the weight comparison: their
true gradient is 0 and Adam turns rounding noise into steps of the learning rate's
size (they differ by up to 0.07). Crash and resume must be bit for bit identical.
"""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from transformer.config import load_config
from transformer.resume import load_resume_checkpoint, save_resume_checkpoint
from transformer.trainer import train_from_config

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = Path(sys.executable).parent / "torchrun"  # the real command, from this environment
TINY = {"model": {"d_model": 16, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1,
                  "d_ff": 32, "dropout": 0.0},
        "data": {"corpus_size": 600, "valid_size": 50},
        "train": {"steps": 6, "batch_size": 16, "warmup": 10, "checkpoint_every": 2, "log_every": 2}}
TOLERANCE = 1e-5


def tiny(dropout: float = 0.0, **train) -> dict:
    return {**TINY, "model": {**TINY["model"], "dropout": dropout}, "train": {**TINY["train"], **train}}


DIE_AFTER_STEP = Path(__file__).resolve().parent / "die_after_step.py"  # the crash's test double


def torchrun(tmp: Path, config: dict, out: Path, processes: int = 2, *, env: dict | None = None,
             background: bool = False, die_after: str | None = None):
    """`torchrun --standalone --nproc_per_node=N -m transformer train CONFIG --out OUT`; with
    die_after="RANK:STEP", process RANK dies (SIGKILL) right after update STEP."""
    path = tmp / f"{out.name}.json"
    path.write_text(json.dumps(config))
    program = ["-m", "transformer", "train"] if die_after is None else [str(DIE_AFTER_STEP), die_after]
    command = [str(TORCHRUN), "--standalone", f"--nproc_per_node={processes}", *program,
               str(path), "--out", str(out), "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    if background:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(run / "model" / "model.safetensors")


def metrics(run: Path) -> dict:
    return json.loads((run / "model" / "config.json").read_text())["metadata"]["metrics"]


def max_difference(a: Path, b: Path, *, key_biases: bool = False) -> float:
    """Largest weight difference; key biases (true gradient 0, Adam-amplified noise) left out unless asked."""
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    return max((wa[k] - wb[k]).abs().max().item() for k in wa if key_biases or "k_proj.bias" not in k)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One process x 16 sentences, in this process: the reference of the equivalences."""
    tmp = tmp_path_factory.mktemp("runs")
    history = train_from_config(tiny(), tmp / "one", progress=False, verbose=False)
    return tmp, history


# ---- configs ---------------------------------------------------------------------------

def test_example_prints_each_shipped_config(tmp_path, capsys):
    """`train --example NAME` prints the config shipped in the package, ready to edit and load."""
    from transformer.commands import example_configs, main

    assert example_configs() == ["base", "big", "book", "lm", "refinements"]
    for name in example_configs():
        assert main(["train", "--example", name]) == 0
        text = capsys.readouterr().out
        assert text == (ROOT / "transformer" / "configs" / f"{name}.toml").read_text(encoding="utf-8")
        (tmp_path / f"{name}.toml").write_text(text, encoding="utf-8")
        load_config(tmp_path / f"{name}.toml")


@pytest.mark.parametrize("name", ["book", "base", "big", "lm", "refinements"])
def test_shipped_configs_load(name):
    config = load_config(ROOT / "transformer" / "configs" / f"{name}.toml")
    assert config["model"]["task"] == ("lm" if name in ("lm", "refinements") else "translation")
    if name in ("base", "big"):
        assert config["model"]["paper"] == name and config["model"]["num_encoder_layers"] == 6
        assert config["model"]["d_model"] == {"base": 512, "big": 1024}[name]


@pytest.mark.parametrize("config, words", [
    ({"train": {"stpes": 10}}, ["train.stpes", "steps"]),
    ({"trian": {}}, ["trian", "train"]),
    ({"train": {"steps": 0}}, ["train.steps", "positive"]),
    ({"train": {"batch_size": True}}, ["train.batch_size"]),
    ({"train": {"factor": float("nan")}}, ["train.factor"]),
    ({"train": {"clip": float("inf")}}, ["train.clip"]),
    ({"train": {"precision": "fp8"}}, ["train.precision", "bf16"]),
    ({"train": {"device": "tpu"}}, ["train.device"]),
    ({"train": {"micro_batches": 32, "batch_size": 16}}, ["train.micro_batches", "train.batch_size"]),
    ({"model": {"paper": "huge"}}, ["model.paper", "base"]),
    ({"model": {"d_model": 30, "num_heads": 4}}, ["model.d_model", "model.num_heads"]),
    ({"model": {"dropout": 1.0}}, ["model.dropout"]),
    ({"data": {"pairs": 3}}, ["data.pairs"]),
    ({"model": {"task": "chat"}}, ["model.task", "'lm'"]),
    ({"model": {"task": "lm", "max_len": 16}, "data": {"seq_len": 32}}, ["data.seq_len", "model.max_len"]),
    ({"train": {"lr": 0.0}}, ["train.lr"]),
    ({"train": {"save_dtype": "int8"}}, ["train.save_dtype", "float16"]),
    ({"train": {"eval_every": -1}}, ["train.eval_every"]),
    ({"model": {"positions": "alibi"}}, ["model.positions", "'sinusoidal'"]),
    ({"model": {"positions": "rotary"}}, ["model.positions", "'sinusoidal'"]),  # chapter 13's name
    ({"model": {"norm": "batch"}}, ["model.norm", "'layer'"]),
    ({"model": {"activation": "relu2"}}, ["model.activation", "'gelu'"]),
    ({"model": {"num_kv_heads": 2}}, ["model.num_kv_heads", "ModernLanguageModel"]),
    ({"model": {"num_kv_heads": 0}}, ["model.num_kv_heads"]),
    ({"model": [1, 2]}, ["model", "table"]),
    ([1, 2], ["dict"]),
])
def test_bad_configs_name_the_key(config, words):
    with pytest.raises(ValueError) as info:
        load_config(config)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.parametrize("config, words", [
    ({"model": {"positions": "alibi"}}, ["model.positions", "'rotary'"]),
    ({"model": {"norm": "batch"}}, ["model.norm", "'rms'"]),
    ({"model": {"activation": "relu2"}}, ["model.activation", "'swiglu'"]),
    ({"model": {"num_kv_heads": 3}}, ["model.num_heads", "model.num_kv_heads"]),
])
def test_bad_configs_for_chapter_13s_model_name_the_key(config, words):
    """With model_class=ModernLanguageModel the names of chapter 13 are known, and checked."""
    from transformer.refinements import ModernLanguageModel

    with pytest.raises(ValueError) as info:
        load_config(config, ModernLanguageModel)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_bad_config_files(tmp_path):
    for name, text, word in [("a.toml", "[train\nsteps = 1", "not valid TOML"), ("a.json", "{", "not valid JSON"),
                             ("a.yaml", "train: 1", ".toml or .json")]:
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=word):
            load_config(tmp_path / name)
    with pytest.raises(ValueError, match="cannot be read"):
        load_config(tmp_path / "missing.toml")


def test_pairs_file(tmp_path):
    good = tmp_path / "pairs.tsv"
    good.write_text("".join(f"I love apples {i}\t我 喜欢 苹果 {i}\n" for i in range(20)), encoding="utf-8")
    config = tiny(steps=2)
    config["data"] = {"pairs": str(good), "valid_size": 4}
    history = train_from_config(config, tmp_path / "run", progress=False, verbose=False)
    assert history["step"] == [1, 2] and history["valid_loss"] is not None
    bad = tmp_path / "bad.tsv"
    bad.write_text("I love apples\t我 喜欢 苹果\nno tab here\n", encoding="utf-8")
    config["data"] = {"pairs": str(bad), "valid_size": 0}
    with pytest.raises(ValueError, match=r"line 2"):
        train_from_config(config, tmp_path / "bad", progress=False, verbose=False)


def test_cli_reports_a_bad_config_in_one_line(tmp_path):
    (tmp_path / "bad.toml").write_text("[train]\nsteps = -1\n")
    result = subprocess.run([sys.executable, "-m", "transformer", "train", str(tmp_path / "bad.toml")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "train.steps" in result.stderr


def test_main_dispatches_and_refuses_an_unknown_command(capsys):
    from transformer.commands import COMMANDS, main

    assert set(COMMANDS) == {"translate", "poem", "train"}
    assert main(["fly"]) == 2 and "translate, poem, train" in capsys.readouterr().err
    assert main([]) == 2
    assert main(["-h"]) == 0


# ---- checkpoints: no pickle, atomic ------------------------------------------------------

STATE = {"step": 4, "w": torch.arange(6.0).reshape(2, 3), "betas": (0.9, 0.98), "ids": {0: torch.tensor(1), 3: None},
         "rng": [torch.get_rng_state(), (3, tuple(range(5)), None)], "note": "step 4"}


def test_resume_checkpoint_round_trip(tmp_path):
    assert load_resume_checkpoint(tmp_path / "none") is None
    save_resume_checkpoint(tmp_path, STATE)
    loaded = load_resume_checkpoint(tmp_path)
    assert torch.equal(loaded["w"], STATE["w"]) and loaded["betas"] == (0.9, 0.98)
    assert set(loaded["ids"]) == {0, 3} and loaded["ids"][3] is None and int(loaded["ids"][0]) == 1
    assert torch.equal(loaded["rng"][0], STATE["rng"][0]) and loaded["rng"][1] == STATE["rng"][1]
    with open(next(tmp_path.glob("step-*.safetensors")), "rb") as f:
        assert b"\x80" not in f.read(2)  # not a pickle


def test_keeps_the_newest_checkpoints(tmp_path):
    for step in range(1, 6):
        save_resume_checkpoint(tmp_path, {**STATE, "step": step}, keep=2)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00000004.safetensors", "step-00000005.safetensors"]
    assert load_resume_checkpoint(tmp_path)["step"] == 5


def test_refuses_what_needs_pickle(tmp_path):
    with pytest.raises(ValueError, match="pickle"):
        save_resume_checkpoint(tmp_path, {"step": 1, "f": lambda: 1})


# Test doubles of the two operations a crash can interrupt: writing a file (killed half-way)
# and renaming it into place (killed before it happens); the package's code runs unchanged.
KILL_DURING_SAVE = """
import os, signal, sys, torch
import transformer.resume as resume
state = {"step": 4, "w": torch.ones(1000), "note": "old"}
resume.save_resume_checkpoint(sys.argv[1], state)
name, stage = sys.argv[2], sys.argv[3]
real_write, real_replace = resume._write_file, os.replace
def write(path, data):
    if stage == "half written" and path.name == "." + name + ".tmp":
        real_write(path, data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    real_write(path, data)
def replace(source, target):
    if stage == "written, not renamed" and os.path.basename(target) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(source, target)
resume._write_file, resume.os.replace = write, replace
resume.save_resume_checkpoint(sys.argv[1], {"step": 6, "w": torch.zeros(1000), "note": "new"})
"""


@pytest.mark.parametrize("name", ["step-00000006.safetensors", "latest"])
@pytest.mark.parametrize("stage", ["half written", "written, not renamed"])
def test_a_process_killed_while_saving_leaves_the_previous_checkpoint(tmp_path, name, stage):
    result = subprocess.run([sys.executable, "-c", KILL_DURING_SAVE, str(tmp_path), name, stage], timeout=120)
    assert result.returncode == -signal.SIGKILL
    loaded = load_resume_checkpoint(tmp_path)
    assert loaded["step"] == 4 and loaded["note"] == "old" and torch.equal(loaded["w"], torch.ones(1000))


def test_a_corrupt_latest_is_a_clear_error(tmp_path):
    save_resume_checkpoint(tmp_path, STATE)
    next(tmp_path.glob("step-*.safetensors")).write_bytes(b"garbage")
    with pytest.raises(ValueError, match="cannot resume"):
        load_resume_checkpoint(tmp_path)


# ---- equivalences ------------------------------------------------------------------------

def test_accumulation_equals_the_whole_batch(runs, tmp_path):
    tmp, whole = runs
    accumulated = train_from_config(tiny(micro_batches=2), tmp_path / "acc", progress=False, verbose=False)
    assert max_difference(tmp / "one", tmp_path / "acc") < TOLERANCE
    for a, b in zip(whole["grad_norm"], accumulated["grad_norm"], strict=True):
        assert abs(a - b) <= TOLERANCE * a
    assert whole["tokens"] == accumulated["tokens"]


def test_ddp_two_processes_equal_one_process_with_the_whole_batch(runs, tmp_path):
    """2 processes x 8 sentences (each in 2 micro-batches, under no_sync) == 1 process x 16."""
    tmp, whole = runs
    result = torchrun(tmp_path, tiny(micro_batches=2), tmp_path / "two")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rank 0 of 2" in result.stdout and "rank 1" not in result.stdout  # rank 0 alone logs
    assert max_difference(tmp / "one", tmp_path / "two") < TOLERANCE
    two = metrics(tmp_path / "two")
    assert two["world_size"] == 2 and two["tokens"] == whole["tokens"]
    for a, b in zip(whole["grad_norm"], two["grad_norms"], strict=True):
        assert abs(a - b) <= TOLERANCE * a, (whole["grad_norm"], two["grad_norms"])
    for a, b in zip(whole["loss"], two["losses"], strict=True):
        assert abs(a - b) <= TOLERANCE * a


def test_a_killed_worker_resumes_to_the_same_weights(tmp_path):
    """SIGKILL of process 1 after step 5 (last checkpoint: step 4), then the same command again."""
    config = tiny(dropout=0.1)  # dropout on: the restored random generators matter
    full = torchrun(tmp_path, config, tmp_path / "full")
    assert full.returncode == 0, full.stderr[-3000:]
    crashed = torchrun(tmp_path, config, tmp_path / "crashed", die_after="1:5")
    assert crashed.returncode != 0 and not (tmp_path / "crashed" / "model").exists()
    assert load_resume_checkpoint(tmp_path / "crashed" / "checkpoints")["step"] == 4
    resumed = torchrun(tmp_path, config, tmp_path / "crashed")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming at step 4" in resumed.stdout
    assert max_difference(tmp_path / "full", tmp_path / "crashed", key_biases=True) == 0.0  # bit for bit
    assert metrics(tmp_path / "crashed")["losses"] == metrics(tmp_path / "full")["losses"][4:]


def test_a_checkpoint_resumes_only_with_as_many_processes(tmp_path):
    train_from_config(tiny(steps=2), tmp_path / "run", progress=False, verbose=False)
    state = load_resume_checkpoint(tmp_path / "run" / "checkpoints")
    save_resume_checkpoint(tmp_path / "run" / "checkpoints", {**state, "world_size": 2})
    with pytest.raises(ValueError, match="2 processes"):
        train_from_config(tiny(steps=4), tmp_path / "run", progress=False, verbose=False)


def test_sigterm_saves_and_stops_cleanly(tmp_path):
    """torchrun forwards SIGTERM to its workers; they finish the step, agree, save and exit."""
    out = tmp_path / "long"
    run = torchrun(tmp_path, tiny(steps=100_000, checkpoint_every=100_000), out, background=True,
                   env={"PYTHONUNBUFFERED": "1"})
    try:
        first = run.stdout.readline()  # rank 0's first line: training starts
        assert first.startswith("rank 0 of 2"), (first, run.stderr.read()[-3000:] if run.poll() is not None else "")
        time.sleep(1)  # some steps in; no checkpoint yet (the first would come at step 100,000)
        assert run.poll() is None and not (out / "checkpoints").exists()
        run.send_signal(signal.SIGTERM)
        stdout, stderr = run.communicate(timeout=120)
    finally:
        run.kill()
    lines = [line for line in stdout.splitlines() if line.startswith("stopped by SIGTERM")]
    assert len(lines) == 1, (stdout, stderr[-3000:])  # rank 0 alone says it
    step = int(lines[0].split("at step ")[1].split(";")[0])
    state = load_resume_checkpoint(out / "checkpoints")
    assert state["step"] == step > 0 and state["world_size"] == 2


# ---- GPU (skipped without one) --------------------------------------------------------

def cuda(test):
    """Mark a test as needing a GPU: `-m cuda` selects them; without a GPU they skip, saying why."""
    return pytest.mark.cuda(pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")(test))


@cuda
def test_cuda_model_and_decoders_match_the_cpu():
    from transformer import Transformer
    from transformer.beam_search import beam_search
    from transformer.data import BOS_ID, EOS_ID
    from transformer.decoding import greedy_decode

    torch.manual_seed(0)
    model = Transformer(40, 40, d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                        d_ff=64, dropout=0.0).eval()
    src, tgt = torch.randint(4, 40, (3, 7)), torch.randint(4, 40, (3, 5))
    with torch.no_grad():
        cpu_logits = model(src, tgt)
        cpu_greedy = greedy_decode(model, src, BOS_ID, EOS_ID, max_new_tokens=6)
        cpu_beam = beam_search(model, src[:1], BOS_ID, EOS_ID, beam_size=3, max_new_tokens=6)
        model.cuda()
        gpu_logits = model(src.cuda(), tgt.cuda()).cpu()
        gpu_greedy = greedy_decode(model, src.cuda(), BOS_ID, EOS_ID, max_new_tokens=6).cpu()
        gpu_beam = beam_search(model, src[:1].cuda(), BOS_ID, EOS_ID, beam_size=3, max_new_tokens=6)
    assert (cpu_logits - gpu_logits).abs().max().item() < 1e-4
    assert torch.equal(cpu_greedy, gpu_greedy)
    assert torch.equal(cpu_beam[0], gpu_beam[0].cpu())
    assert torch.allclose(cpu_beam[1], gpu_beam[1].cpu(), atol=1e-4)


@cuda
def test_cuda_ddp_step_matches_the_cpu(tmp_path):
    cpu = train_from_config(tiny(device="cpu"), tmp_path / "cpu", progress=False, verbose=False)
    gpu = torchrun(tmp_path, tiny(device="cuda"), tmp_path / "gpu", processes=1)  # the command, on the GPU
    assert gpu.returncode == 0, gpu.stderr[-3000:]
    assert max_difference(tmp_path / "cpu", tmp_path / "gpu") < 1e-3
    assert abs(cpu["loss"][-1] - metrics(tmp_path / "gpu")["losses"][-1]) < 1e-3
    if torch.cuda.device_count() >= 2:  # DDP over two GPUs with nccl (one GPU cannot hold two nccl ranks)
        two = torchrun(tmp_path, tiny(device="cuda"), tmp_path / "gpu2", processes=2)
        assert two.returncode == 0, two.stderr[-3000:]
        assert max_difference(tmp_path / "cpu", tmp_path / "gpu2") < 1e-3


@cuda
def test_cuda_fp16_with_a_grad_scaler_trains(tmp_path):
    fp32 = train_from_config(tiny(device="cuda", steps=20), tmp_path / "fp32", progress=False, verbose=False)
    fp16 = train_from_config(tiny(device="cuda", steps=20, precision="fp16"), tmp_path / "fp16",
                             progress=False, verbose=False)
    assert all(torch.isfinite(torch.tensor(fp16["loss"])))
    assert abs(fp32["valid_loss"] - fp16["valid_loss"]) < 0.1
    state = load_resume_checkpoint(tmp_path / "fp16" / "checkpoints")
    assert state["train_state"]["scaler"] is not None  # the loss scale is resumed too


def test_fp16_on_a_cpu_is_refused(tmp_path):
    with pytest.raises(ValueError, match="fp16"):
        train_from_config(tiny(precision="fp16", device="cpu"), tmp_path / "x", progress=False, verbose=False)


# ---- the language model (task = "lm") -----------------------------------------------------

TINY_LM = {"model": {"task": "lm", "d_model": 16, "num_heads": 2, "num_layers": 1, "d_ff": 32, "dropout": 0.0,
                     "max_len": 16},
           "data": {"min_count": 50, "seq_len": 16},
           "train": {"steps": 4, "batch_size": 8, "warmup": 2, "lr": 3e-3, "checkpoint_every": 2,
                     "log_every": 2, "eval_every": 2, "save_dtype": "float16"}}


@pytest.fixture(scope="module")
def tiny_lm(small_corpus) -> dict:
    """TINY_LM on the corpus's first poems (tests/conftest.py): on all 49,025, reading and
    encoding them in every process and scoring the whole validation stream took about 20 of
    a test's 30 seconds. Chapter 12 runs the language model on the whole corpus."""
    return {**TINY_LM, "data": {**TINY_LM["data"], "corpus": str(small_corpus)}}


def test_the_small_corpus_reads_back_as_written(tiny_lm):
    from conftest import SMALL_CORPUS

    from transformer.corpus import read_corpus

    assert read_corpus(tiny_lm["data"]["corpus"]) == read_corpus()[:SMALL_CORPUS]


def test_language_model_on_two_processes_equals_one_and_loads(tmp_path, tiny_lm):
    """The LM task: 2 processes x 4 windows == 1 process x 8; the result loads with its vocabulary."""
    from transformer.lm import LanguageModel, load_language_model

    one = train_from_config(tiny_lm, tmp_path / "one", progress=False, verbose=False)
    result = torchrun(tmp_path, tiny_lm, tmp_path / "two")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rank 0 of 2 on cpu: lm" in result.stdout
    assert max_difference(tmp_path / "one", tmp_path / "two") < 1e-3  # float16 files: compare at their precision
    two = metrics(tmp_path / "two")
    for a, b in zip(one["loss"], two["losses"], strict=True):
        assert abs(a - b) <= TOLERANCE * a
    assert [step for step, _ in two["valid_curve"]] == [2, 4] and one["valid_curve"][-1][1] == one["valid_loss"]
    model, vocab, stored = load_language_model(tmp_path / "two" / "model")
    assert isinstance(model, LanguageModel) and next(model.parameters()).dtype == torch.float32
    assert len(vocab) == model.vocab_size and stored["step"] == 4
    assert weights(tmp_path / "two")["embed.embedding.weight"].dtype == torch.float16


def test_language_model_with_chapter_13s_refinements_trains_and_loads_as_configured(tmp_path, tiny_lm):
    """model.positions, norm, activation and num_kv_heads reach ModernLanguageModel (chapter 13's,
    passed as model_class) and its saved config."""
    from transformer.lm import load_language_model
    from transformer.refinements import GroupedQueryAttention, ModernLanguageModel, RMSNorm, SwiGLU

    every = {"positions": "rotary", "norm": "rms", "activation": "swiglu", "num_kv_heads": 1}
    cfg = {**tiny_lm, "model": {**tiny_lm["model"], **every}}
    history = train_from_config(cfg, tmp_path / "run", progress=False, verbose=False,
                                model_class=ModernLanguageModel)
    assert all(math.isfinite(loss) for loss in history["loss"])
    model, _, _ = load_language_model(tmp_path / "run" / "model", model_class=ModernLanguageModel)
    assert type(model) is ModernLanguageModel
    assert {key: model.config[key] for key in every} == every
    kinds = {type(m) for m in model.modules()}
    assert {GroupedQueryAttention, RMSNorm, SwiGLU} <= kinds and torch.nn.LayerNorm not in kinds


def test_resuming_checks_the_refinement_keys_and_reads_older_configs_as_defaults(tmp_path):
    """A checkpoint's config without the keys that came later (model.positions, ...) resumes as
    if it held their defaults; a changed refinement is refused, by name."""
    from transformer.trainer import _check_same_config

    cfg = load_config(TINY_LM)
    older = {**cfg, "model": {k: v for k, v in cfg["model"].items()
                              if k not in ("positions", "norm", "activation", "num_kv_heads")}}
    _check_same_config(older, cfg, tmp_path)  # no error
    from transformer.refinements import ModernLanguageModel

    rotary = load_config({**TINY_LM, "model": {**TINY_LM["model"], "positions": "rotary"}}, ModernLanguageModel)
    with pytest.raises(ValueError, match=r"model\.positions \('sinusoidal' -> 'rotary'\)"):
        _check_same_config(older, rotary, tmp_path)


def test_language_model_epochs_cover_the_stream_once_and_resume(tmp_path, tiny_lm):
    from transformer.tasks import lm_epoch_batches

    stream = torch.arange(1000) + 4  # every id its own position
    batches = lm_epoch_batches(stream, batch_size=4, seq_len=10, seed=3, world_size=2)
    starts = sorted(int(inputs[i, 0]) for inputs, _ in batches for i in range(4))
    offset = (starts[0] - 4) % 10  # the epoch's random offset
    assert len(set(starts)) == len(starts) and all((x - 4) % 10 == offset for x in starts)  # each window once
    windows = -(-(1000 - offset - 1) // 10)  # ceil: sequential_windows pads the last one
    assert len(batches) == windows // 4  # only the incomplete last batch is dropped
    for inputs, labels in batches:
        kept = labels[:, :-1] != -100  # the padded tail of the last window is ignored
        assert torch.equal(labels[:, :-1][kept], inputs[:, 1:][kept])  # labels: the inputs shifted by one
    again = lm_epoch_batches(stream, batch_size=4, seq_len=10, seed=3, world_size=2)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again, strict=True))
    other = lm_epoch_batches(stream, batch_size=4, seq_len=10, seed=4, world_size=2)
    assert [int(x[0, 0]) for x, _ in other] != [int(x[0, 0]) for x, _ in batches]  # another epoch, another order
    # A run killed after step 3 (last checkpoint: step 2) and resumed ends where an uninterrupted one does.
    full = torchrun(tmp_path, tiny_lm, tmp_path / "full", processes=1)  # as the resumed run: one thread
    assert full.returncode == 0, full.stderr[-3000:]
    crashed = torchrun(tmp_path, tiny_lm, tmp_path / "crashed", processes=1, die_after="0:3")
    assert crashed.returncode != 0 and load_resume_checkpoint(tmp_path / "crashed" / "checkpoints")["step"] == 2
    resumed = torchrun(tmp_path, tiny_lm, tmp_path / "crashed", processes=1)
    assert resumed.returncode == 0 and "resuming at step 2" in resumed.stdout, resumed.stderr[-3000:]
    assert max_difference(tmp_path / "full", tmp_path / "crashed", key_biases=True) == 0.0
    assert metrics(tmp_path / "crashed")["valid_curve"] == metrics(tmp_path / "full")["valid_curve"]
