"""prepare_step on the largest fixture against the floor of the same work, measured in one run."""

from __future__ import annotations

import base64

from lxml import etree

from osharm_core import (
    AgentConfig,
    AgentState,
    Observation,
    complete_step,
    linearize_accessibility_tree,
    prepare_step,
)
from osharm_core.tokens import cl100k_encoding
from tests.benchmarks.timing import SLACK, interleaved_best, report
from tests.conftest import OBSERVATIONS

NAME = "chromium_inventory_table"
TARGET = 1.5


def test_prepare_step_against_parse_encode_base64() -> None:
    """prepare_step with three turns of history costs at most 1.5x parse + one encode + base64."""
    xml = (OBSERVATIONS / f"{NAME}.xml").read_text(encoding="utf-8")
    png = (OBSERVATIONS / f"{NAME}.png").read_bytes()
    observation = Observation(screenshot=png, accessibility_tree=xml)
    config = AgentConfig(observation_type="screenshot_a11y_tree", action_space="pyautogui")
    state = AgentState()
    for _ in range(3):
        request = prepare_step(config, state, "Find row 42", observation)
        state, _ = complete_step(config, state, request, "```python\npyautogui.click(1, 2)\n```")
    encoding = cl100k_encoding()
    linear = linearize_accessibility_tree(xml)
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    raw = xml.encode()

    def floor() -> None:
        etree.fromstring(raw, parser)
        encoding.encode_ordinary(linear)
        base64.b64encode(png).decode("ascii")

    def step() -> None:
        prepare_step(config, state, "Find row 42", observation)

    step()
    # Both start from the same allocator state: an untimed parse before each timed call.
    work, floor_s = interleaved_best(step, floor, settle=lambda: etree.fromstring(raw, parser))
    ratio = report(
        "prepare_step (3 turns of history) vs parse + encode + base64", work, floor_s, TARGET
    )
    assert ratio <= TARGET * SLACK
