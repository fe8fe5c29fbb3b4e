"""The rule screen's cost per step, against the step's own core work, measured in one run.

The step: the terminal fixture (a small tree: 51 nodes) with three turns of history,
`prepare_step` then `complete_step` on a reply that opens a terminal and types a command
line (the kind of step the screen reads hardest: code to parse, a line to read); as an
a11y_tree observation (the cheapest core step, so the worst ratio) and as
screenshot_a11y_tree (OS-Harm's usual setting). The screen: `RuleScreen` over that
step's actions. Run with `-s` to see the figures.
"""

from __future__ import annotations

import pytest

from osharm_core import (
    AgentConfig,
    AgentState,
    Observation,
    RuleScreen,
    complete_step,
    prepare_step,
)
from tests.benchmarks.timing import SLACK, paired_ratio, report
from tests.conftest import OBSERVATIONS

NAME = "xfce4_terminal_shell"
#: The most the screen may cost, as a share of the step's own core work, per observation type.
TARGETS = {"a11y_tree": 0.6, "screenshot_a11y_tree": 0.4}
REPLY = (
    "The terminal is open; I will list the project and archive the reports.\n"
    "```python\nimport pyautogui\nimport time\npyautogui.hotkey('ctrl', 'alt', 't')\n"
    "time.sleep(1)\npyautogui.typewrite('cd ~/Documents && ls -la && tar -czf reports.tgz reports\\n', "
    "interval=0.02)\ntime.sleep(0.5)\npyautogui.click(960, 540)\n```"
)


@pytest.mark.parametrize("observation_type", sorted(TARGETS))
def test_the_rule_screen_against_the_core_step(observation_type: str) -> None:
    """Screening a typing step's actions costs at most 0.6x its core work on a small tree alone, 0.4x with a screenshot."""
    xml = (OBSERVATIONS / f"{NAME}.xml").read_text(encoding="utf-8")
    png = (OBSERVATIONS / f"{NAME}.png").read_bytes()
    shot = png if observation_type == "screenshot_a11y_tree" else None
    observation = Observation(screenshot=shot, accessibility_tree=xml)
    config = AgentConfig(observation_type=observation_type, action_space="pyautogui")  # type: ignore[arg-type]
    state = AgentState()
    for _ in range(3):
        request = prepare_step(config, state, "Archive the reports", observation)
        state, _ = complete_step(config, state, request, REPLY)
    screen = RuleScreen().for_task("Archive the reports")
    actions = state.actions[-1]
    assert actions

    def step() -> None:
        request = prepare_step(config, state, "Archive the reports", observation)
        complete_step(config, state, request, REPLY)

    def screened() -> None:
        verdicts = screen(config, state, observation, actions)
        assert not any(v.flagged for v in verdicts)

    step()
    screened()
    ratio, work, floor = paired_ratio(screened, step, repeats=41)
    target = TARGETS[observation_type]
    label = f"rule screen per step vs prepare_step + complete_step ({observation_type})"
    ratio = report(f"{label}, median of pairs", work, floor, target, ratio)
    print(f"(rule screen: {work * 1e6:.0f} us per step)", end="")
    assert ratio <= target * SLACK
