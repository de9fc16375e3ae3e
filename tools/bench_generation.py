"""Benchmark: greedy decoding with and without the KV cache (chapter 10).

    .venv/bin/python tools/bench_generation.py [--repeats 5] [--tokens 128] [--threads 2]

The paper's base decoder size (d_model 512, 8 heads, 6 layers, d_ff 2048) with
random weights, batch 1, a 16-token source and a 1000-word target vocabulary.
`eos_id=None` forces exactly --tokens new tokens. Each repeat times both variants
(order alternating, so that a busy machine hurts both alike) and checks that
their tokens are identical. It prints every repeat, then the median and the
spread (min..max) of the times and of the per-repeat speed-up, in wall time and
in this process's CPU time (on a shared machine the wall time also counts the
time other programs held the cores).

Not a test: timings depend on the machine and on what else runs on it. The
target (issue 5) is a speed-up of at least 3x with identical tokens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from transformer import Transformer
from transformer.generation import greedy_decode


def timed(model: Transformer, src: torch.Tensor, tokens: int,
          use_cache: bool) -> tuple[float, float, torch.Tensor]:
    """(wall seconds, CPU seconds of this process, tokens) of one greedy decode."""
    start, start_cpu = time.perf_counter(), time.process_time()
    out = greedy_decode(model, src, bos_id=1, eos_id=None, max_new_tokens=tokens, use_cache=use_cache)
    return time.perf_counter() - start, time.process_time() - start_cpu, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1000)
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Transformer(args.vocab, args.vocab, d_model=512, num_heads=8, num_encoder_layers=6,
                        num_decoder_layers=6, d_ff=2048, dropout=0.1, max_len=max(args.tokens + 1, 16))
    src = torch.randint(4, args.vocab, (1, 16))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; decoder d_model=512, "
          f"8 heads, 6 layers, d_ff=2048; batch 1, {args.tokens} new tokens, vocab {args.vocab}")
    timed(model, src, 4, True)  # warm-up: first calls allocate
    timed(model, src, 4, False)

    cached_times, plain_times, ratios, cpu_ratios = [], [], [], []
    identical = True
    for repeat in range(args.repeats):
        order = (True, False) if repeat % 2 == 0 else (False, True)
        results = {use_cache: timed(model, src, args.tokens, use_cache) for use_cache in order}
        (t_cache, cpu_cache, out_cache), (t_plain, cpu_plain, out_plain) = results[True], results[False]
        same = torch.equal(out_cache, out_plain)
        identical &= same
        cached_times.append(t_cache)
        plain_times.append(t_plain)
        ratios.append(t_plain / t_cache)
        cpu_ratios.append(cpu_plain / cpu_cache)
        print(f"repeat {repeat + 1}: without cache {t_plain:7.3f} s, with cache {t_cache:6.3f} s, "
              f"speed-up {t_plain / t_cache:5.2f}x (CPU time {cpu_plain:.1f} s / {cpu_cache:.1f} s "
              f"= {cpu_plain / cpu_cache:5.2f}x), identical tokens: {same}")

    def spread(xs: list[float], unit: str) -> str:
        return f"median {statistics.median(xs):.3f}{unit} (min {min(xs):.3f}, max {max(xs):.3f})"

    print(f"without cache: {spread(plain_times, ' s')}")
    print(f"with cache:    {spread(cached_times, ' s')}")
    print(f"speed-up:      {spread(ratios, 'x')}")
    print(f"CPU speed-up:  {spread(cpu_ratios, 'x')} (less sensitive to other programs)")
    print(f"tokens identical in every repeat: {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
