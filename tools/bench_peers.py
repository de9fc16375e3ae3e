"""Benchmark: the book's models against the libraries a user would pick instead (issue 25).

    .venv/bin/python -m tools.bench_peers                 # everything, 2 threads
    .venv/bin/python -m tools.bench_peers --only train    # or: generate, eval
    .venv/bin/python -m tools.bench_peers --repeats 9 --rounds 5 --threads 2

Needs Hugging Face `transformers` (pinned, with what it pulls in, in requirements-bench.txt,
which `make install` installs; elsewhere `.venv/bin/pip install -r requirements-bench.txt`).
It is a dependency of this benchmark and of appendix 14, not of the package.

Both sides get random weights at equal sizes, in one process, timed interleaved (ours,
theirs, ours, ...) so that a change of machine load hits both alike. Each round reports the
median of --repeats timings of each side and the ratio ours / theirs; the summary gives the
median ratio over the rounds and its spread. Wall time is the figure (both sides use the
same threads); the CPU-time ratio is printed beside it. The models and the timed calls are
appendix 14's (transformer.benchmarks and transformer.benchmark_peers), so the page and this
script time the same thing.

1. Language model training step: chapter 11's LanguageModel against GPT2LMHeadModel
   (transformer.benchmark_peers.peer_language_models, lm_train_step_fns: forward, next-token
   cross-entropy, backward, clipping, fused AdamW on both sides). Two sizes: "issue"
   (vocabulary 2,000, d_model 256, 8 heads, 4 layers, d_ff 1,024, dropout 0.1, 8 windows
   of 127 tokens) and "chapter11" (the shipped model's config.json and the batch of
   transformer/configs/lm.toml: 16 windows of 128 characters, vocabulary 6,179).
   "issue, GPT-2's dropout" is the issue size without the dropout inside our feed-forward
   layer (GPT-2 has none there): the same work on both sides, for reference.
2. Generation, greedy with the KV cache, exactly N new tokens (no early <eos>), batch 1 and
   8: the language model (16-token prompt, 64 new tokens) against GPT2LMHeadModel.generate,
   the translator (chapter 08's Transformer, 3 + 3 layers, 20-token source, 32 new tokens)
   against MarianMTModel.generate (transformer.benchmark_peers.greedy_fns).
3. Eval forward of the translator against torch.nn.Transformer (appendix 14's
   TorchReference: d_model 256, 3 + 3 layers, batch 32, length 64, padded sentences, where
   PyTorch takes its nested-tensor fast path).

Targets (issue 25): training step <= 0.85x, generation <= 0.80x, eval forward <= 0.90x.
Not a test: the numbers depend on the machine and its load (printed first and last); on a
shared machine compare ratios from one run. tests/test_bench_peers.py checks that the timed
calls generate the tokens of their plain references, and as many on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tomllib
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from tools.timing import Round, interleaved_rounds
from transformer.benchmark_peers import (
    greedy_fns,
    hf_transformers_version,
    lm_train_step_fns,
    peer_language_models,
    peer_translators,
)
from transformer.benchmarks import eval_forward, machine_info, paired_models, random_batch

ROOT = Path(__file__).resolve().parent.parent

if hf_transformers_version() is None:  # pragma: no cover - said to the user
    sys.exit("tools/bench_peers.py needs Hugging Face transformers: "
             ".venv/bin/pip install -r requirements-bench.txt")
import transformers  # noqa: E402

transformers.logging.set_verbosity_error()
warnings.filterwarnings("ignore", message=".*generation flags.*")
warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")  # nn.Transformer's fast path

ISSUE_LM = dict(vocab_size=2000, d_model=256, num_heads=8, num_layers=4, d_ff=1024, dropout=0.1,
                batch=8, seq_len=127)
MODEL_KEYS = ("vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "dropout")


def chapter11_lm() -> dict:
    """The shipped language model's size (its config.json) and batch (transformer/configs/lm.toml)."""
    shipped = json.loads((ROOT / "transformer" / "checkpoints" / "tang_poems" / "config.json").read_text())["config"]
    config = tomllib.loads((ROOT / "transformer" / "configs" / "lm.toml").read_text(encoding="utf-8"))
    return dict({key: shipped[key] for key in MODEL_KEYS},
                batch=config["train"]["batch_size"], seq_len=config["data"]["seq_len"])


# Our models after transformer.speed_up (chapter 14), unless --plain asks for the chapters' plain layers.
FAST = True

def lm_train_steps(size: dict, ffn_dropout: bool = True) -> tuple[Callable[[], float], Callable[[], float], dict]:
    """One training step of each language model on the same random windows; and their sizes.

    ffn_dropout=False switches off the dropout inside our feed-forward layers (GPT-2's placement).
    """
    ours, theirs = peer_language_models(**{key: size[key] for key in MODEL_KEYS}, fast=FAST)
    if not ffn_dropout:
        for layer in ours.decoder.layers:
            layer.ffn.dropout.p = 0.0
    g = torch.Generator().manual_seed(0)
    windows = torch.randint(3, size["vocab_size"], (size["batch"], size["seq_len"] + 1), generator=g)
    ours_step, theirs_step = lm_train_step_fns(ours, theirs, windows)
    counts = {"ours": sum(p.numel() for p in ours.parameters()),
              "theirs": sum(p.numel() for p in theirs.parameters())}
    return ours_step, theirs_step, counts


def lm_generation_inputs(batch: int, prompt_len: int = 16):
    """Both language models at the issue's size and random prompts [batch, prompt_len]."""
    ours, theirs = peer_language_models(**{key: ISSUE_LM[key] for key in MODEL_KEYS}, fast=FAST)
    prompts = torch.randint(3, ISSUE_LM["vocab_size"], (batch, prompt_len), generator=torch.Generator().manual_seed(1))
    return ours.eval(), theirs.eval(), prompts


def translator_generation_inputs(batch: int, src_len: int = 20):
    """Both translators and random sources [batch, src_len]."""
    ours, theirs = peer_translators(fast=FAST)
    src = torch.randint(3, 2000, (batch, src_len), generator=torch.Generator().manual_seed(1))
    return ours.eval(), theirs.eval(), src


def eval_forwards() -> tuple[Callable[[], None], Callable[[], None]]:
    """Eval forward of our translator and of torch.nn.Transformer on one padded batch."""
    ours, reference = paired_models(1000, 256, 8, 3, 1024, 0.1, 65, fast=FAST)
    batch = random_batch(32, 64, 64, 1000)
    return eval_forward(ours, batch), eval_forward(reference, batch)


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def compare(name: str, ours, theirs, repeats: int, rounds: int, warmup: int = 2) -> dict:
    """Interleaved timings; per-round medians and ratios (ours / theirs), wall and CPU time."""
    def report(r: int, t: Round) -> None:
        print(f"  {name} round {r}: wall ours {t.wall_ours * 1e3:7.1f} ms, theirs "
              f"{t.wall_theirs * 1e3:7.1f} ms, ratio {t.wall:.3f} | cpu ratio {t.cpu:.3f}; "
              f"load {load()}", flush=True)

    rows = interleaved_rounds(ours, theirs, repeats, rounds, warmup, report)
    wall, cpu = [t.wall for t in rows], [t.cpu for t in rows]
    return {"name": name, "ours_ms": 1e3 * statistics.median(t.wall_ours for t in rows),
            "theirs_ms": 1e3 * statistics.median(t.wall_theirs for t in rows),
            "wall": statistics.median(wall), "wall_spread": (min(wall), max(wall)),
            "cpu": statistics.median(cpu), "load": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["train", "generate", "eval"], default=None)
    parser.add_argument("--sizes", nargs="+", choices=["issue", "chapter11", "issue-gpt2-dropout"],
                        default=["issue", "chapter11", "issue-gpt2-dropout"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--plain", action="store_true", help="our models as the chapters build them, without speed_up")
    args = parser.parse_args(argv)
    global FAST
    FAST = not args.plain
    torch.set_num_threads(args.threads)
    info = machine_info()
    print(f"{info['cpu']}, {info['cores']} cores, {torch.get_num_threads()} threads; torch {torch.__version__}, "
          f"transformers {transformers.__version__}; load average {load()}", flush=True)
    results = []
    if args.only in (None, "train"):
        for name in args.sizes:
            size = chapter11_lm() if name == "chapter11" else ISSUE_LM
            ours, theirs, counts = lm_train_steps(size, ffn_dropout=name != "issue-gpt2-dropout")
            print(f"LM training step, size {name}: {size}; parameters ours {counts['ours']:,}, "
                  f"GPT-2 {counts['theirs']:,}", flush=True)
            results.append((compare(f"LM train step ({name})", ours, theirs, args.repeats, args.rounds), 0.85))
    if args.only in (None, "generate"):
        for kind, build, new_tokens in (("LM", lm_generation_inputs, 64),
                                        ("translator", translator_generation_inputs, 32)):
            for batch in (1, 8):
                ours, theirs = greedy_fns(*build(batch), new_tokens)
                results.append((compare(f"{kind} generate, batch {batch}", ours, theirs,
                                        max(1, args.repeats // 2), args.rounds, warmup=1), 0.80))
    if args.only in (None, "eval"):
        ours, theirs = eval_forwards()
        results.append((compare("eval vs nn.Transformer", ours, theirs, args.repeats, args.rounds), 0.90))
    print("\nsummary (wall-time ratio ours / theirs: median over rounds, spread; CPU-time ratio; "
          "1-minute load at the end of the measurement)")
    for r, target in results:
        met = "met" if r["wall"] <= target else "NOT met"
        print(f"  {r['name']:36s} ours {r['ours_ms']:7.1f} ms, theirs {r['theirs_ms']:7.1f} ms: "
              f"{r['wall']:.3f} ({r['wall_spread'][0]:.3f}..{r['wall_spread'][1]:.3f}), cpu {r['cpu']:.3f}, "
              f"load {r['load']:.2f}; target <= {target}: {met}")
    print(f"load average at the end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
