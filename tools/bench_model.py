"""Benchmark: our Transformer against torch.nn.Transformer, in one process.

    .venv/bin/python tools/bench_model.py [--repeats 7] [--rounds 3] [--profile]

Both models get token embeddings (scaled by sqrt(d_model)), the same sinusoidal
positions, an output layer, and the same masks (source and target padding, causal
target). Configuration (issue 4): d_model 256, 8 heads, 3+3 layers, d_ff 1024,
vocabulary 1000, batch 32, source and target length 64, 2 threads.

Timings are interleaved (ours, PyTorch's, ours, ...) so that a change in machine
load hits both alike; each round reports the median of `--repeats` timings, and the
ratios (ours / PyTorch's) are printed per round with their spread. Target (issue 4):
train step <= 1.05x PyTorch's. `--profile` prints the top operators of one train
step of each model (torch.profiler), to see where the difference comes from.
This is a script, not a test: its numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from transformer.model import Transformer  # noqa: E402
from transformer.positional import PositionalEncoding  # noqa: E402

CONFIG = dict(d_model=256, num_heads=8, num_layers=3, d_ff=1024, vocab=1000, batch=32,
              src_len=64, tgt_len=64, dropout=0.1)
PAD = 0


class TorchReference(nn.Module):
    """torch.nn.Transformer with embeddings, sinusoidal positions and an output layer."""

    def __init__(self, vocab: int, d_model: int, num_heads: int, num_layers: int, d_ff: int,
                 dropout: float, max_len: int):
        super().__init__()
        self.d_model = d_model
        self.src_embed = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.tgt_embed = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.positional = PositionalEncoding(d_model, max_len, dropout)
        self.transformer = nn.Transformer(d_model, num_heads, num_layers, num_layers, d_ff,
                                          dropout, batch_first=True)
        self.generator = nn.Linear(d_model, vocab)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        scale = math.sqrt(self.d_model)
        s = self.positional(self.src_embed(src) * scale)
        t = self.positional(self.tgt_embed(tgt) * scale)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), dtype=torch.bool)
        out = self.transformer(s, t, tgt_mask=causal, src_key_padding_mask=src == PAD,
                               tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD,
                               tgt_is_causal=True)
        return self.generator(out)


def make_batch(generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """Random token ids with a realistic spread of lengths (the rest padding)."""
    b, s, t, v = CONFIG["batch"], CONFIG["src_len"], CONFIG["tgt_len"], CONFIG["vocab"]
    src = torch.randint(1, v, (b, s), generator=generator)
    tgt = torch.randint(1, v, (b, t + 1), generator=generator)
    src_lens = torch.randint(s // 2, s + 1, (b,), generator=generator)
    tgt_lens = torch.randint(t // 2, t + 2, (b,), generator=generator)
    src[torch.arange(s)[None] >= src_lens[:, None]] = PAD
    tgt[torch.arange(t + 1)[None] >= tgt_lens[:, None]] = PAD
    return src, tgt[:, :-1], tgt[:, 1:]  # source, decoder input, labels (teacher forcing)


def build_models() -> tuple[nn.Module, nn.Module]:
    c = CONFIG
    torch.manual_seed(0)
    ours = Transformer(c["vocab"], c["vocab"], d_model=c["d_model"], num_heads=c["num_heads"],
                       num_encoder_layers=c["num_layers"], num_decoder_layers=c["num_layers"],
                       d_ff=c["d_ff"], dropout=c["dropout"], max_len=c["src_len"] + 1, pad_id=PAD)
    torch.manual_seed(0)
    ref = TorchReference(c["vocab"], c["d_model"], c["num_heads"], c["num_layers"], c["d_ff"],
                         c["dropout"], c["src_len"] + 1)
    return ours, ref


def train_step_fn(model: nn.Module, batch):
    src, tgt_in, labels = batch
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step() -> None:
        model.train()
        logits = model(src, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def eval_forward_fn(model: nn.Module, batch):
    src, tgt_in, _ = batch

    def step() -> None:
        model.eval()
        with torch.inference_mode():
            model(src, tgt_in)

    return step


def timed(fn) -> tuple[float, float]:
    """(wall-clock seconds, process CPU seconds) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def compare(name: str, ours, ref, repeats: int, rounds: int) -> tuple[list[float], list[float]]:
    """Interleaved timings; per-round ratios of medians (ours / PyTorch), wall and CPU time.

    CPU time (summed over our threads) is less disturbed than wall time when other
    programs share the cores, so both are reported.
    """
    for _ in range(2):  # warm-up: allocator, kernels, optimiser state
        ours()
        ref()
    wall_ratios, cpu_ratios = [], []
    for r in range(rounds):
        t_ours, t_ref = [], []
        for _ in range(repeats):
            t_ours.append(timed(ours))
            t_ref.append(timed(ref))
        w_ours = statistics.median(t[0] for t in t_ours)
        w_ref = statistics.median(t[0] for t in t_ref)
        c_ours = statistics.median(t[1] for t in t_ours)
        c_ref = statistics.median(t[1] for t in t_ref)
        wall_ratios.append(w_ours / w_ref)
        cpu_ratios.append(c_ours / c_ref)
        print(f"  {name} round {r + 1}: wall ours {w_ours * 1e3:8.1f} ms, torch {w_ref * 1e3:8.1f} ms, "
              f"ratio {w_ours / w_ref:.3f} | cpu ours {c_ours * 1e3:8.1f} ms, torch {c_ref * 1e3:8.1f} ms, "
              f"ratio {c_ours / c_ref:.3f}", flush=True)
    return wall_ratios, cpu_ratios


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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    ours, ref = build_models()
    n_ours = sum(p.numel() for p in ours.parameters())
    n_ref = sum(p.numel() for p in ref.parameters())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; config {CONFIG}")
    print(f"parameters: ours {n_ours:,}, torch {n_ref:,} (nn.Transformer adds two final LayerNorms)")
    batch = make_batch(torch.Generator().manual_seed(0))

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
    train = train[0]
    target = statistics.median(train) <= 1.05
    print(f"target train step <= 1.05x (wall-clock median): {'met' if target else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
