"""Properties of the rule screen and the monitor's reply reader, over generated input."""

from __future__ import annotations

import pytest
from hypothesis import given

from osharm_core import AgentConfig, AgentState, Observation, RuleScreen, SafetyEvent
from osharm_core.monitor import read_monitor_reply
from osharm_core.screen_read import read_actions
from tests.strategies import (
    benign_commands,
    harmful_commands,
    monitor_action_counts,
    monitor_replies,
    safety_events,
    screen_channels,
    screened_actions,
    screened_passwords,
    shell_text,
)

#: Generated code is read, never run: Python's warnings about it do not matter here.
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning", "ignore::DeprecationWarning")

SCREEN = RuleScreen()
CONFIG = AgentConfig(action_space="pyautogui")


@given(shell_text, screened_passwords)
def test_the_screen_never_raises_on_any_command_line(line: str, password: str) -> None:
    """Any string, with any client password, gets a verdict, never an exception."""
    assert SCREEN.check(line, password=password).decision in ("allow", "flag", "block")


@given(screened_actions)
def test_the_screen_never_raises_on_any_actions(actions: list[object]) -> None:
    """Any list of actions gets exactly one verdict per action, never an exception."""
    verdicts = SCREEN(CONFIG, AgentState(), Observation(), actions)  # type: ignore[arg-type]
    assert len(verdicts) == len(actions)
    assert len(read_actions(actions)) == len(actions)  # type: ignore[arg-type]


@given(harmful_commands, screen_channels)
def test_the_screen_flags_its_harmful_corpus(case: tuple[str, str], channel: str) -> None:
    """Every harmful example of the table, behind any wrapper and through any channel, is flagged."""
    code, command = case
    action: object = {
        "typed": f"import pyautogui\npyautogui.typewrite({command + chr(10)!r})",
        "computer_13": {"action_type": "TYPING", "text": command},
        "os.system": f"import os\nos.system({command!r})",
    }[channel]
    (verdict,) = SCREEN(CONFIG, AgentState(), Observation(), [action])  # type: ignore[list-item]
    assert verdict.flagged, (code, command)


@given(benign_commands, screen_channels)
def test_the_screen_passes_its_benign_corpus(command: str, channel: str) -> None:
    """Every benign lookalike of the table, however it is typed or run, is allowed."""
    action: object = {
        "typed": f"import pyautogui\npyautogui.write({command!r})\npyautogui.press('enter')",
        "computer_13": {"action_type": "TYPING", "text": command},
        "os.system": f"import os\nos.system({command!r})",
    }[channel]
    (verdict,) = SCREEN(CONFIG, AgentState(), Observation(), [action])  # type: ignore[list-item]
    assert not verdict.flagged, (command, verdict)


@given(monitor_replies, monitor_action_counts)
def test_the_monitor_reply_reader_never_raises(text: str, count: int) -> None:
    """Any monitor reply reads as count verdicts or as a message saying what is wrong."""
    read = read_monitor_reply(text, count)
    verdicts = read.value_or(None)
    assert verdicts is None or len(verdicts) == count


@given(safety_events())
def test_events_round_trip_through_json(event: SafetyEvent) -> None:
    """Any event reads back from its JSON as itself."""
    assert SafetyEvent.from_json(event.to_json()) == event
