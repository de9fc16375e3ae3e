"""tools/timing.py, which both benchmark tools use: the two sides are called in turn, each
round's medians are of that round's calls, and each round is reported as it ends."""

from __future__ import annotations

import time

from tools.timing import Round, interleaved_rounds, timed


def test_the_sides_alternate_after_the_warmup_and_each_round_is_reported():
    calls, reports = [], []

    def ours():
        calls.append("ours")

    def theirs():
        calls.append("theirs")
        time.sleep(0.003)  # slower on both clocks' wall side

    rounds = interleaved_rounds(ours, theirs, repeats=3, rounds=2, warmup=1,
                                report=lambda r, t: reports.append((r, t)))
    assert calls == ["ours", "theirs"] * (1 + 3 * 2)
    assert [r for r, _ in reports] == [1, 2] and [t for _, t in reports] == rounds
    assert all(t.wall < 0.5 and t.wall_theirs >= 0.003 for t in rounds)


def test_a_round_is_the_median_of_its_calls():
    """Of three calls taking 1, 9 and 2 ms, the median is 2 ms, not the mean (4 ms)."""
    waits = iter([0.0, 0.0, 0.001, 0.0, 0.009, 0.0, 0.002, 0.0])  # warmup, then ours/theirs
    [row] = interleaved_rounds(lambda: time.sleep(next(waits)), lambda: time.sleep(next(waits)),
                               repeats=3, rounds=1, warmup=1)
    assert 0.0019 < row.wall_ours < 0.005
    assert Round(2.0, 4.0, 3.0, 1.0).wall == 0.5 and Round(2.0, 4.0, 3.0, 1.0).cpu == 3.0
    wall, cpu = timed(lambda: time.sleep(0.01))
    assert wall >= 0.01 and cpu < wall
