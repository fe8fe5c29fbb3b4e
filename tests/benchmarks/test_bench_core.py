"""Linearization, set-of-marks and trimming on the largest fixture, as ratios to the floor of the same work.

Each ratio is measured in one run: the work and its floor alternate, and the
minimum of the repeats of each is compared. Run with `-s` to see the figures.
"""

from __future__ import annotations

import io
import time

import pytest
from lxml import etree
from PIL import Image

from osharm_core import marks
from osharm_core.accessibility import linearize_accessibility_tree, parse_accessibility_tree
from osharm_core.marks import tag_screenshot
from osharm_core.tokens import cl100k_encoding, trim_accessibility_tree
from tests.benchmarks.timing import SLACK, interleaved_best, report
from tests.conftest import OBSERVATIONS

NAME = "chromium_inventory_table"


@pytest.mark.benchmark_ratio
@pytest.mark.parametrize("form", ["str", "bytes"])
def test_linearize_against_lxml_parse(form: str) -> None:
    """Linearizing the largest tree costs at most 2x lxml's own parse of the same str or bytes."""
    text = (OBSERVATIONS / f"{NAME}.xml").read_text(encoding="utf-8")
    xml: str | bytes = text if form == "str" else text.encode()
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    linearize_accessibility_tree(xml)
    # A parse right after another parse-and-free runs measurably faster here than
    # one after other work (allocator and cache state), so every timed call is
    # preceded by the same untimed parse; floor and work then start alike.
    work, floor, parse = interleaved_best(
        lambda: linearize_accessibility_tree(xml),
        lambda: etree.fromstring(xml, parser),
        lambda: parse_accessibility_tree(xml),
        settle=lambda: etree.fromstring(xml, parser),
    )
    print(f"\n(of which the safe parse alone: {parse * 1e3:.1f} ms)", end="")
    assert report(f"linearize vs lxml parse ({form})", work, floor, 2.0) <= 2.0 * SLACK


@pytest.mark.benchmark_ratio
def test_tag_screenshot_against_png_decode_encode() -> None:
    """Tagging the largest screen costs at most 2x decoding and re-encoding its PNG."""
    xml = (OBSERVATIONS / f"{NAME}.xml").read_text(encoding="utf-8")
    screenshot = (OBSERVATIONS / f"{NAME}.png").read_bytes()

    def floor() -> None:
        image = Image.open(io.BytesIO(screenshot))
        image.load()
        image.save(io.BytesIO(), format="PNG")

    marks._label_stamp.cache_clear()
    start = time.perf_counter()
    tag_screenshot(screenshot, xml)
    first = time.perf_counter() - start
    work, best_floor = interleaved_best(lambda: tag_screenshot(screenshot, xml), floor)
    print(f"\ntag_screenshot first call (labels not yet cached): {first * 1e3:.1f} ms")
    assert report("tag_screenshot vs PNG decode + encode", work, best_floor, 2.0) <= 2.0 * SLACK


@pytest.mark.benchmark_ratio
def test_trim_against_one_encode() -> None:
    """Trimming the linearized largest tree to 10000 tokens costs about one plain encode."""
    text = linearize_accessibility_tree((OBSERVATIONS / f"{NAME}.xml").read_text(encoding="utf-8"))
    encoding = cl100k_encoding()
    work, floor = interleaved_best(
        lambda: trim_accessibility_tree(text, 10000), lambda: encoding.encode_ordinary(text)
    )
    ratio = report(
        f"trim to 10000 of {len(encoding.encode_ordinary(text))} tokens vs one encode",
        work,
        floor,
        None,
    )
    assert ratio <= 1.5
