"""Deeply nested values in a saved state or configuration are a typed error, never a
RecursionError; the deepest action a reply can parse to still round-trips."""

from __future__ import annotations

import json
from typing import Any

import pytest
from returns.result import Success

from osharm_core import (
    MAX_ACTION_DEPTH,
    AgentConfig,
    AgentState,
    ConfigError,
    FrozenAction,
    ObservationRecord,
    StateError,
    parse_actions_from_string,
)
from osharm_core.frames import CoordinateFrame

BASE = {"observations": [{"screenshot": None, "accessibility_tree": "t"}], "thoughts": ["x"]}


def _nested(levels: int) -> dict[str, Any]:
    return json.loads('{"a":' * levels + "1" + "}" * levels)


@pytest.mark.parametrize(
    "action",
    [
        _nested(400),
        {"action_type": "TYPING", "text": json.loads("[" * 500 + "]" * 500)},
        {"action_type": "TYPING", "text": _nested(MAX_ACTION_DEPTH + 1)},
    ],
    ids=["400 objects", "500 lists", "past the limit"],
)
def test_a_deeply_nested_action_is_a_state_error(action: dict[str, Any]) -> None:
    with pytest.raises(StateError, match=r"actions\[0\] holds an action nested more than 16"):
        AgentState.from_json({**BASE, "actions": [[action]]})
    with pytest.raises(StateError, match="nested more than"):
        AgentState([ObservationRecord(None, "t")], [[action]], ["x"])


def test_an_action_nesting_tuples_deeply_is_a_state_error() -> None:
    """Tuples, which no JSON holds but a caller may hand over, are refused as deep lists are."""
    deep: Any = 1
    for _ in range(100_000):
        deep = (deep,)
    with pytest.raises(StateError, match=r"actions\[0\] holds an action nested more than 16"):
        AgentState(
            [ObservationRecord(None, "t")], [[{"action_type": "TYPING", "text": deep}]], ["x"]
        )


@pytest.mark.parametrize(
    ("action", "problem"),
    [
        ({1: "x"}, "a key that is not a string (int 1)"),
        ({"action_type": "TYPING", "text": {"a", "b"}}, "which JSON cannot hold"),
        ({"action_type": "TYPING", "text": b"abc"}, "which JSON cannot hold"),
        ({"action_type": "CLICK", "x": [object()]}, "which JSON cannot hold"),
        ({"action_type": "CLICK", "x": float("nan")}, "which JSON cannot hold"),
        ({"action_type": "CLICK", "x": -float("inf")}, "which JSON cannot hold"),
        ({"action_type": "CLICK", "x": 10**5000}, "more digits than JSON readers take"),
    ],
)
def test_an_action_json_cannot_read_back_equal_is_a_state_error(
    action: dict[Any, Any], problem: str
) -> None:
    """A caller's action with a non-string key or a value JSON cannot hold was stored, and
    then to_json could not be written or read back equal; it is refused, naming the turn."""
    with pytest.raises(StateError, match=r"actions\[0\] holds an action") as caught:
        AgentState([ObservationRecord(None, "t")], [[action]], ["x"])
    assert problem in str(caught.value)


def test_any_mapping_is_an_action_and_any_iterable_a_turn() -> None:
    """Hand-built states may hold a MappingProxyType or UserDict action, and a turn may be any
    iterable of actions (not a string, which would be split into letters)."""
    from collections import UserDict
    from types import MappingProxyType

    click = {"action_type": "CLICK", "x": 1, "y": 2}
    for action in (MappingProxyType(click), UserDict(click)):
        state = AgentState([ObservationRecord(None, "t")], [iter([action])], ["x"])
        assert state.actions == ((FrozenAction(click),),)
    with pytest.raises(StateError, match=r"actions\[0\] must be null or a list"):
        AgentState([ObservationRecord(None, "t")], ["DONE"], ["x"])


def test_the_deepest_parsable_action_round_trips() -> None:
    """An action as deep as a reply may hold is stored, saved and read back."""
    inner: Any = 1
    for _ in range(MAX_ACTION_DEPTH - 1):
        inner = {"a": inner}
    action = {"action_type": "TYPING", "text": inner}
    parsed = parse_actions_from_string(f"```json\n{json.dumps(action)}\n```")
    assert parsed == Success([action])
    state = AgentState([ObservationRecord(None, "t")], [parsed.unwrap()], ["x"])
    assert AgentState.from_json(json.loads(json.dumps(state.to_json()))) == state


def test_a_deeply_nested_config_value_is_a_config_error() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ConfigError, match="nested too deeply"):
        AgentConfig.from_json({"model": deep})


@pytest.mark.parametrize("field", ["screen_width", "grid"])
def test_a_deeply_nested_frame_value_is_a_config_error(field: str) -> None:
    """CoordinateFrame.from_json refuses a value too deep to quote as AgentConfig.from_json does."""
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    frame = {"screen_width": 1, "screen_height": 1, "image_width": 1, "image_height": 1}
    with pytest.raises(ConfigError, match="nested too deeply"):
        CoordinateFrame.from_json({**frame, field: deep})
