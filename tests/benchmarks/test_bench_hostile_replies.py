"""Every reply parser grows at most linearly on adversarial replies of 10 KB, 100 KB and 1 MB.

For each shape and parser the best of a few runs is taken at each size, the sizes
measured in turns (`interleaved_best`) so a machine slowing down part-way moves them
alike; the time ratio from 10 KB to 1 MB must stay within 2x of the size ratio
(100x: a quadratic parser would show 100x more, an n log n one 1.5x), and a 1 MB
hostile reply must parse in under a second. The shapes that make many small
objects (a statement per `a();`, a word per line) run 1.2-1.45x of linear at 1 MB
with a warm cache: their objects no longer fit in it. (Until 2026-11 a full garbage
collection of the test run's heap before every call cooled the cache for the small
sizes too, which read as 0.1-1.0x and took most of this file's 90 s.)
The end-to-end ratio is used because a single 10x step of a sub-millisecond
parse is at the mercy of a busy shared machine; a shape over the bound is measured
once more before it fails.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest

from osharm_core import (
    AgentConfig,
    CoordinateFrame,
    parse_actions_from_string,
    parse_code_from_som_string,
    parse_code_from_string,
)
from osharm_core.parsing import split_statements
from osharm_core.step import parse_reply
from tests.benchmarks.timing import interleaved_best

SIZES = (10_000, 100_000, 1_000_000)
GROWTH_SLACK = 2.0
#: Timed turns per shape: each size is parsed this often (the 1 MB one dominates the time),
#: and the smaller sizes `SMALL_REPEATS` times more.
REPEATS = 3
SMALL_REPEATS = 4
MASKS = tuple((i % 1900, i % 1000, 20, 10) for i in range(1000))


def _repeat(unit: str) -> Callable[[int], str]:
    return lambda size: (unit * (size // len(unit) + 1))[:size]


SHAPES: dict[str, Callable[[int], str]] = {
    "strings chained over lines": lambda n: "```\nx = '''\n" + _repeat("''';'''\n")(n),
    "triple quotes": _repeat("```\n'''\n"),
    "many tiny blocks": _repeat("```\npyautogui.click(*tag_1)\n```\n"),
    "unclosed fences": _repeat("```python\nx = 1; y = '\n"),
    "bare fences": _repeat("```\n"),
    "semicolons": _repeat("a();"),
    "quotes and escapes": _repeat('{"a": "\\\\\\"'),
    "objects in prose": _repeat('say {"action_type": "CLICK", "x": 1, "y": 2} then '),
    "open objects": _repeat('{"action_type": "CLICK", "x": '),
    "nested objects": lambda n: (
        '{"action_type": "CLICK", "a": ' + '{"b": ' * (n // 7) + "}" * (n // 7)
    ),
    "special words": _repeat("WAIT\n"),
    "braces beside the key": lambda n: '"action_type" ' + _repeat("{" * 17 + "}" * 17)(n),
    "braces with prose": lambda n: '"action_type" ' + _repeat("{x}")(n),
}


PARSERS: dict[str, Callable[[str], object]] = {
    "parse_code_from_string": parse_code_from_string,
    "parse_code_from_som_string": lambda text: parse_code_from_som_string(text, MASKS),
    "parse_actions_from_string": parse_actions_from_string,
    "split_statements": split_statements,
}


@pytest.fixture(autouse=True)
def _frozen_heap() -> Iterator[None]:
    """The heap the test starts with moved out of the collector's sight: each `gc.collect`
    between timed calls then looks only at what the parsers made (with the test run's whole
    heap in view, the collections took most of this file's time)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _without_gc(parse: Callable[[str], object], text: str) -> Callable[[], object]:
    """`parse(text)` with the cyclic GC paused (its full passes scale with the heap, not with
    the parser's work); `interleaved_best` collects the heap before each call."""

    def call() -> object:
        gc.disable()
        try:
            return parse(text)
        finally:
            gc.enable()

    return call


@pytest.mark.parametrize("parser", list(PARSERS))
def test_parsers_grow_linearly_on_hostile_replies(parser: str) -> None:
    """Each parser's time grows no faster than 2x the size on every adversarial shape; 1 MB < 1 s."""
    parse = PARSERS[parser]
    worst_growth, slowest = 0.0, 0.0
    for shape, make in SHAPES.items():
        texts = [make(size) for size in SIZES]
        for _attempt in range(2):
            # In turns, all sizes alike: a machine slowing down part-way moves them together;
            # then more turns of the smaller sizes (7 runs each in all), which are quick.
            calls = [_without_gc(parse, text) for text in texts]
            times = interleaved_best(*calls, settle=gc.collect, repeats=REPEATS)
            more = interleaved_best(*calls[:-1], settle=gc.collect, repeats=SMALL_REPEATS)
            times = [min(pair) for pair in zip(times, [*more, times[-1]], strict=True)]
            # Below ~0.2 ms fixed costs and timer noise dominate; measure growth from there up.
            floor = [max(t, 2e-4) for t in times]
            growth = (floor[2] / floor[0]) / (SIZES[2] / SIZES[0])
            if growth <= GROWTH_SLACK:
                break
        worst_growth, slowest = max(worst_growth, growth), max(slowest, times[2])
        print(
            f"\n{parser} / {shape}: "
            + ", ".join(
                f"{s // 1000} KB {t * 1e3:.1f} ms" for s, t in zip(SIZES, times, strict=True)
            )
            + f" (growth {growth:.2f}x linear)"
        )
        assert growth <= GROWTH_SLACK, f"{shape}: grows {growth:.2f}x faster than linear"
        assert times[2] < 1.0, f"{shape}: 1 MB took {times[2]:.2f} s"
    print(
        f"\n{parser}: worst growth {worst_growth:.2f}x linear, slowest 1 MB {slowest * 1e3:.0f} ms"
    )


#: A scaled step's reply: its literal coordinates are mapped from the model's grid to the
#: screen (`osharm_core.reframe`), which parses the code with `ast` and edits each literal.
SCALED = AgentConfig(observation_type="screenshot", action_space="pyautogui", scaling="claude")
CLAUDE_FRAME = CoordinateFrame(
    screen_width=1920, screen_height=1080, image_width=1429, image_height=804
)


@pytest.mark.parametrize(
    "line",
    ["pyautogui.click(100, 200)\n", "x = 1if 1else 2; pyautogui.click(100, 200)\n"],
    ids=["clicks", "numbers-glued-to-keywords"],
)
def test_mapping_a_scaled_reply_grows_linearly(line: str) -> None:
    """One code block of clicks, every literal mapped: linear (it was quadratic, 12 s a MB;
    numbers glued to keywords, which get a space before parsing, were quadratic too).

    `ast.parse` alone takes about half the time, so the bound here is 2 s a MB, not 1 s.
    """
    texts = ["```python\n" + line * (size // len(line)) + "```" for size in SIZES]
    calls = [_without_gc(lambda t: parse_reply(SCALED, t, None, CLAUDE_FRAME), t) for t in texts]
    for _attempt in range(2):
        times = interleaved_best(*calls, settle=gc.collect, repeats=REPEATS)
        growth = (max(times[2], 2e-4) / max(times[0], 2e-4)) / (SIZES[2] / SIZES[0])
        if growth <= GROWTH_SLACK:
            break
    print(
        "\nparse_reply, scaled / clicks in one block: "
        + ", ".join(f"{s // 1000} KB {t * 1e3:.1f} ms" for s, t in zip(SIZES, times, strict=True))
        + f" (growth {growth:.2f}x linear)"
    )
    assert growth <= GROWTH_SLACK, f"grows {growth:.2f}x faster than linear"
    assert times[2] < 2.0, f"1 MB took {times[2]:.2f} s"
