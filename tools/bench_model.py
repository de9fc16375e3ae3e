"""Benchmark: our Transformer against torch.nn.Transformer and against the machine, in one process.

    .venv/bin/python -m tools.bench_model [--repeats 7] [--rounds 3] [--profile]
    .venv/bin/python -m tools.bench_model --mfu      # paper-base training step vs the GEMM peak
    .venv/bin/python -m tools.bench_model --decode   # greedy decoding vs the bandwidth bound

Default: both models get token embeddings (scaled by sqrt(d_model)), the same
sinusoidal positions, an output layer, and the same masks (source and target padding,
causal target). Configuration (issues 4 and 12): d_model 256, 8 heads, 3+3 layers,
d_ff 1024, vocabulary 1000, batch 32, source and target length 64, 2 threads.
Timings are interleaved (ours, PyTorch's, ours, ...) so that a change in machine
load hits both alike; each round reports the median of `--repeats` timings, and the
ratios (ours / PyTorch's) are printed per round with their spread. Targets (issue 12):
train step <= 0.95x and eval forward <= 0.90x PyTorch's.

--mfu: one training step of the paper's base model (d_model 512, 6+6 layers, vocabulary
1000) on a batch of 4096 target tokens (64 sentences of 64), its model FLOPs
(transformer.benchmarks.train_step_flops) per second against the fp32 GEMM peak measured
in the same run. Target (issue 12): >= 55%.
--decode: greedy decoding with the KV cache at the paper's base decoder, batch 1 and
batch 16, tokens/s against the memory-bandwidth bound measured in the same run.

The helpers live in transformer.benchmarks (chapter 14, the benchmark appendix).
`--profile` prints the top operators of one train step of each model (torch.profiler).
This is a script, not a test: its numbers depend on the machine and its load (printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
from torch import nn

from tools.timing import Round, interleaved_rounds
from transformer import PAPER_CONFIGS, Transformer
from transformer.benchmarks import (
    bandwidth_bytes_per_second,
    bytes_per_token,
    cpu_seconds,
    eval_forward,
    gemm_flops_per_second,
    machine_info,
    paired_models,
    random_batch,
    train_step_flops,
    train_step_fn,
)
from transformer.decoding import greedy_decode

CONFIG = dict(d_model=256, num_heads=8, num_layers=3, d_ff=1024, vocab=1000, batch=32,
              src_len=64, tgt_len=64, dropout=0.1)


def build_models() -> tuple[nn.Module, nn.Module]:
    c = CONFIG
    return paired_models(c["vocab"], c["d_model"], c["num_heads"], c["num_layers"], c["d_ff"],
                         c["dropout"], c["src_len"] + 1)


def make_batch(seed: int = 0):
    c = CONFIG
    return random_batch(c["batch"], c["src_len"], c["tgt_len"], c["vocab"], seed)


def eval_forward_fn(model: nn.Module, batch):
    return eval_forward(model, batch)


def compare(name: str, ours, ref, repeats: int, rounds: int) -> tuple[list[float], list[float]]:
    """Interleaved timings; per-round ratios of medians (ours / PyTorch), wall and CPU time.

    CPU time (summed over our threads) is less disturbed than wall time when other
    programs share the cores, so both are reported.
    """
    def report(r: int, t: Round) -> None:
        print(f"  {name} round {r}: wall ours {t.wall_ours * 1e3:8.1f} ms, torch "
              f"{t.wall_theirs * 1e3:8.1f} ms, ratio {t.wall:.3f} | cpu ours {t.cpu_ours * 1e3:8.1f} ms, "
              f"torch {t.cpu_theirs * 1e3:8.1f} ms, ratio {t.cpu:.3f}", flush=True)

    found = interleaved_rounds(ours, ref, repeats, rounds, report=report)
    return [t.wall for t in found], [t.cpu for t in found]


def profile(model: nn.Module, batch, label: str) -> None:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    step = train_step_fn(model, batch)
    step()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    print(f"\n=== {label}: top operators of one train step (self CPU time) ===")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--mfu", action="store_true", help="paper-base training step vs GEMM peak")
    parser.add_argument("--decode", action="store_true", help="greedy decoding vs bandwidth bound")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {machine_info()}; load {os.getloadavg()[0]:.1f}")
    if args.mfu:
        return model_flops_utilisation(args.repeats)
    if args.decode:
        return decoding_vs_bandwidth(args.repeats)

    ours, ref = build_models()
    n_ours = sum(p.numel() for p in ours.parameters())
    n_ref = sum(p.numel() for p in ref.parameters())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; config {CONFIG}")
    print(f"parameters: ours {n_ours:,}, torch {n_ref:,} (nn.Transformer adds two final LayerNorms)")
    batch = make_batch()

    if args.profile:
        profile(ours, batch, "ours")
        profile(ref, batch, "torch.nn.Transformer")
        return 0

    train = compare("train step  ", train_step_fn(ours, batch), train_step_fn(ref, batch),
                    args.repeats, args.rounds)
    evals = compare("eval forward", eval_forward_fn(ours, batch), eval_forward_fn(ref, batch),
                    args.repeats, args.rounds)
    print()
    for name, (wall, cpu) in (("train step", train), ("eval forward", evals)):
        for clock, ratios in (("wall", wall), ("cpu", cpu)):
            print(f"{name:12s} {clock:4s} ratio ours/torch: median {statistics.median(ratios):.3f}, "
                  f"spread {min(ratios):.3f}..{max(ratios):.3f} over {len(ratios)} rounds")
    for name, ratios, target in (("train step", train[1], 0.95), ("eval forward", evals[1], 0.90)):
        met = statistics.median(ratios) <= target
        print(f"target {name} <= {target}x (CPU-time median): {'met' if met else 'NOT met'}")
    print(f"load after: {os.getloadavg()[0]:.1f}")
    return 0


def model_flops_utilisation(repeats: int) -> int:
    """One training step of the paper's base model on 4096 target tokens vs the GEMM peak."""
    torch.manual_seed(0)
    config = dict(PAPER_CONFIGS["base"], dropout=0.1)
    model = Transformer(1000, 1000, **config, max_len=65)
    batch = random_batch(64, 64, 64, 1000)
    step = train_step_fn(model, batch)
    flops = train_step_flops(model, 64, 64, 64)
    step()  # warm-up
    peak = gemm_flops_per_second(2048)
    times = [cpu_seconds(step) for _ in range(max(1, repeats // 3))]
    peak = max(peak, gemm_flops_per_second(2048))  # measured before and after the steps
    best = min(times)
    print(f"paper base, 64 x 64 tokens: {flops / 1e12:.2f} TFLOP per step, "
          f"{best:.2f} CPU s (fastest of {len(times)}) -> {flops / best / 1e9:.1f} GFLOP/s")
    print(f"fp32 GEMM peak (2048^3): {peak / 1e9:.1f} GFLOP per CPU second")
    print(f"MFU {flops / best / peak:.1%} (target >= 55%); load {os.getloadavg()[0]:.1f}")
    return 0


def decoding_vs_bandwidth(repeats: int) -> int:
    """Cached greedy decoding at the paper's base decoder vs the memory-bandwidth bound."""
    torch.manual_seed(0)
    config = dict(PAPER_CONFIGS["base"], num_encoder_layers=1, dropout=0.0)
    model = Transformer(1000, 1000, **config, max_len=160).eval()
    per_token = bytes_per_token(model)
    bandwidth = bandwidth_bytes_per_second(per_token)
    new_tokens = 128
    for batch in (1, 16):
        src = torch.randint(1, 1000, (batch, 20))
        greedy_decode(model, src, 1, None, max_new_tokens=8)  # warm-up
        def decode(src=src):
            greedy_decode(model, src, 1, None, max_new_tokens=new_tokens)

        seconds = min(cpu_seconds(decode) for _ in range(max(1, repeats // 3)))
        tokens = batch * new_tokens / seconds
        bound = batch * bandwidth / per_token  # weights read once per step for the whole batch
        print(f"batch {batch:2d}: {tokens:7.0f} tokens/s ({seconds / new_tokens * 1e3:.1f} ms/step), "
              f"bandwidth bound {bound:7.0f} tokens/s: {tokens / bound:.0%}")
    print(f"{per_token / 1e6:.1f} MB of weights per step, bandwidth {bandwidth / 1e9:.1f} GB/s "
          f"(CPU time); load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
