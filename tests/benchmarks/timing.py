"""Timing helpers shared by the ratio benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

REPEATS = 9
#: The targets of the issues, with a little slack for a busy shared machine.
SLACK = 1.1


def _timed_turns(
    callables: tuple[Callable[[], object], ...],
    settle: Callable[[], object] | None,
    repeats: int,
) -> list[list[float]]:
    """Each callable's times over `repeats` turns, the callables timed one after the other
    in every turn (`settle` untimed before each call)."""
    times: list[list[float]] = [[] for _ in callables]
    for _ in range(repeats):
        for i, call in enumerate(callables):
            if settle is not None:
                settle()
            start = time.perf_counter()
            call()
            times[i].append(time.perf_counter() - start)
    return times


def interleaved_best(
    *callables: Callable[[], object],
    settle: Callable[[], object] | None = None,
    repeats: int = REPEATS,
) -> list[float]:
    """The best time of each callable, measured in turns so machine load hits all alike.

    `settle`, when given, runs untimed before every timed call, so each call starts
    from the same state whatever ran before it. `repeats` turns are timed.
    """
    return [min(times) for times in _timed_turns(callables, settle, repeats)]


def paired_ratio(
    work: Callable[[], object],
    floor: Callable[[], object],
    *,
    settle: Callable[[], object] | None = None,
    repeats: int = 15,
) -> tuple[float, float, float]:
    """The median of `work`'s time over `floor`'s, each pair timed back to back, and the
    median time of each.

    For work that allocates a lot (megabytes of XML, images), a shared VM's memory and
    scheduling noise comes in bursts longer than one call: the best of each side may then
    come from different moments, and their ratio swung from 1.4x to 2.2x between runs
    where the median of adjacent pairs stays within a tenth. `settle` runs untimed before
    every timed call.
    """
    works, floors = _timed_turns((work, floor), settle, repeats)
    ratio = statistics.median(w / f for w, f in zip(works, floors, strict=True))
    return ratio, statistics.median(works), statistics.median(floors)


def report(
    label: str, work: float, floor: float, target: float | None, ratio: float | None = None
) -> float:
    """Print one figure line and return the ratio (`work / floor` unless given)."""
    ratio = work / floor if ratio is None else ratio
    goal = f" (target <= {target}x)" if target else ""
    print(f"\n{label}: {work * 1e3:.1f} ms vs floor {floor * 1e3:.1f} ms = {ratio:.2f}x{goal}")
    return ratio
