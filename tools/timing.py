"""Timing two functions against each other, as the benchmark tools do (bench_model.py,
bench_peers.py): interleaved calls, medians per round, wall clock and process CPU time.

Not torch.utils.benchmark.Timer: it times one statement at a time on the wall clock, and
these tools need the two sides interleaved call by call (so that a neighbour's load hits
both alike) and the process's CPU time beside the wall clock (less disturbed on a shared
machine).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall-clock seconds, process CPU seconds) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


@dataclass
class Round:
    """Median seconds per call of each side in one round."""

    wall_ours: float
    wall_theirs: float
    cpu_ours: float
    cpu_theirs: float

    @property
    def wall(self) -> float:
        """ours / theirs on the wall clock."""
        return self.wall_ours / self.wall_theirs

    @property
    def cpu(self) -> float:
        """ours / theirs in CPU time."""
        return self.cpu_ours / self.cpu_theirs


def interleaved_rounds(ours: Callable[[], object], theirs: Callable[[], object], repeats: int,
                       rounds: int, warmup: int = 2,
                       report: Callable[[int, Round], None] | None = None) -> list[Round]:
    """`rounds` rounds of `repeats` calls of each side, alternating, after `warmup` untimed
    calls of each (allocator, kernels, optimiser state); `report(r, round)` after each
    round (progress, for runs of minutes)."""
    for _ in range(warmup):
        ours()
        theirs()
    found = []
    for _ in range(rounds):
        times = [(timed(ours), timed(theirs)) for _ in range(repeats)]
        found.append(Round(*(statistics.median(t[side][clock] for t in times)
                             for clock in (0, 1) for side in (0, 1))))
        if report is not None:
            report(len(found), found[-1])
    return found
