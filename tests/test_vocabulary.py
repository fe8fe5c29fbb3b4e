"""The computer_13 vocabulary: the data itself, the validator and the prompt text derived from it."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from osharm_core.errors import ConfigError
from osharm_core.state import AgentState, FrozenAction, ObservationRecord, thaw
from osharm_core.vocabulary import (
    ACTION_SPECS,
    ACTIONS,
    KEYBOARD_KEYS,
    SPECIAL_ACTIONS,
    SPECIAL_WORDS,
    describe_actions,
    validate_computer_13,
)
from tests.strategies import computer_13_actions

DESIGN_ORDER = [
    "MOVE_TO",
    "CLICK",
    "MOUSE_DOWN",
    "MOUSE_UP",
    "RIGHT_CLICK",
    "DOUBLE_CLICK",
    "DRAG_TO",
    "SCROLL",
    "TYPING",
    "PRESS",
    "KEY_DOWN",
    "KEY_UP",
    "HOTKEY",
]


def failure_message(action: object, **kwargs: Any) -> str:
    result = validate_computer_13(action, **kwargs)
    assert isinstance(result, Failure), result
    message = result.failure()
    assert isinstance(message, str)
    return message


def test_thirteen_actions_in_the_documented_order() -> None:
    """The vocabulary holds the thirteen screen actions in DESIGN.md's order, then WAIT, FAIL, DONE."""
    assert [a.name for a in ACTIONS] == DESIGN_ORDER
    assert [a.name for a in SPECIAL_ACTIONS] == ["WAIT", "FAIL", "DONE"]
    assert set(ACTION_SPECS) == {*DESIGN_ORDER, "WAIT", "FAIL", "DONE"}
    assert SPECIAL_WORDS == ("WAIT", "FAIL", "DONE")


def test_parameters_match_the_osworld_action_space() -> None:
    """Each action's parameters, required flags and choices are the OSWorld ones."""
    shape = {spec.name: [(p.name, p.kind, p.required) for p in spec.params] for spec in ACTIONS}
    assert shape["MOVE_TO"] == [("x", "number", True), ("y", "number", True)]
    assert shape["CLICK"] == [
        ("button", "choice", False),
        ("x", "number", False),
        ("y", "number", False),
        ("num_clicks", "integer", False),
    ]
    assert shape["MOUSE_DOWN"] == shape["MOUSE_UP"] == [("button", "choice", False)]
    assert (
        shape["RIGHT_CLICK"]
        == shape["DOUBLE_CLICK"]
        == [
            ("x", "number", False),
            ("y", "number", False),
        ]
    )
    assert shape["DRAG_TO"] == [("x", "number", True), ("y", "number", True)]
    assert shape["SCROLL"] == [("dx", "integer", True), ("dy", "integer", True)]
    assert shape["TYPING"] == [("text", "text", True)]
    assert shape["PRESS"] == shape["KEY_DOWN"] == shape["KEY_UP"] == [("key", "key", True)]
    assert shape["HOTKEY"] == [("keys", "keys", True)]
    button = ACTION_SPECS["CLICK"].param("button")
    clicks = ACTION_SPECS["CLICK"].param("num_clicks")
    assert button is not None
    assert clicks is not None
    assert button.choices == ("left", "right", "middle")
    assert clicks.choices == (1, 2, 3)
    assert all(not spec.params for spec in SPECIAL_ACTIONS)


def test_keyboard_keys_are_pyautogui_names() -> None:
    """The key list has pyautogui's 194 distinct names, including the odd ones."""
    assert len(KEYBOARD_KEYS) == len(set(KEYBOARD_KEYS)) == 194
    for key in ("\t", "\n", "\r", " ", '"', "\\", "`", "~", "a", "z", "0", "9", "f1", "f24"):
        assert key in KEYBOARD_KEYS
    for key in ("num0", "num9", "ctrl", "hanguel", "prtscr", "yen", "optionright", "winleft"):
        assert key in KEYBOARD_KEYS
    assert "f25" not in KEYBOARD_KEYS
    assert "A" not in KEYBOARD_KEYS


@pytest.mark.parametrize(
    "action",
    [
        "WAIT",
        "DONE",
        "FAIL",
        {"action_type": "DONE"},
        {"action_type": "WAIT"},
        {"action_type": "MOVE_TO", "x": 0, "y": 1080},
        {"action_type": "CLICK"},
        {"action_type": "CLICK", "button": "right", "x": 1920.0, "y": 0.5, "num_clicks": 3},
        {"action_type": "MOUSE_DOWN"},
        {"action_type": "MOUSE_UP", "button": "middle"},
        {"action_type": "RIGHT_CLICK", "x": 3, "y": 4},
        {"action_type": "DOUBLE_CLICK"},
        {"action_type": "DRAG_TO", "x": 5, "y": 6},
        {"action_type": "SCROLL", "dx": 0, "dy": -5},
        {"action_type": "TYPING", "text": ""},
        {"action_type": "PRESS", "key": "enter"},
        {"action_type": "KEY_DOWN", "key": "shift"},
        {"action_type": "KEY_UP", "key": "\t"},
        {"action_type": "HOTKEY", "keys": ["ctrl", "alt", "t"]},
        {"action_type": "PRESS", "key": "Enter"},
    ],
)
def test_valid_actions_pass_unchanged(action: object) -> None:
    """Well-formed actions (and the three special words) come back as the very same value."""
    result = validate_computer_13(action)
    assert isinstance(result, Success)
    assert result.unwrap() is action


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (["CLICK"], "action: expected a JSON object"),
        (None, "got NoneType None"),
        ("CLICK", "action: a string action must be one of WAIT, FAIL, DONE; got 'CLICK'"),
        ("done", "got 'done'"),
        ({}, "action_type: missing"),
        ({"x": 1}, "action_type: missing"),
        ({"action_type": 3}, "action_type: expected a string, got int 3"),
        ({"action_type": "FLY"}, "action_type: unknown action 'FLY'; known: MOVE_TO, CLICK,"),
        ({"action_type": "click"}, "unknown action 'click'"),
        ({"action_type": "MOVE_TO", "x": 1}, "MOVE_TO.y: missing required parameter"),
        ({"action_type": "MOVE_TO"}, "MOVE_TO.x: missing required parameter"),
        ({"action_type": "SCROLL", "dy": 1}, "SCROLL.dx: missing required parameter"),
        ({"action_type": "TYPING"}, "TYPING.text: missing required parameter"),
        ({"action_type": "HOTKEY"}, "HOTKEY.keys: missing required parameter"),
        ({"action_type": "CLICK", "z": 1}, "CLICK.'z': unknown parameter; CLICK takes button,"),
        ({"action_type": "DONE", "x": 1}, "DONE.'x': unknown parameter; DONE takes no parameters"),
        ({"action_type": "MOVE_TO", "x": True, "y": 1}, "MOVE_TO.x: expected a number, got bool"),
        ({"action_type": "MOVE_TO", "x": "5", "y": 1}, "MOVE_TO.x: expected a number, got str"),
        ({"action_type": "SCROLL", "dx": 1.5, "dy": 0}, "SCROLL.dx: expected an integer"),
        ({"action_type": "SCROLL", "dx": 0, "dy": False}, "SCROLL.dy: expected an integer"),
        ({"action_type": "TYPING", "text": 5}, "TYPING.text: expected a string, got int 5"),
        ({"action_type": "MOVE_TO", "x": 1921, "y": 0}, "MOVE_TO.x: 1921 is outside 0..1920"),
        ({"action_type": "MOVE_TO", "x": 0, "y": -1}, "MOVE_TO.y: -1 is outside 0..1080"),
        ({"action_type": "DRAG_TO", "x": math.nan, "y": 0}, "DRAG_TO.x: nan is outside 0..1920"),
        ({"action_type": "DRAG_TO", "x": 0, "y": math.inf}, "DRAG_TO.y: inf is outside 0..1080"),
        ({"action_type": "MOVE_TO", "x": 10**400, "y": 0}, "MOVE_TO.x: 1000"),
        ({"action_type": "CLICK", "num_clicks": 4}, "CLICK.num_clicks: 4 is not one of 1, 2, 3"),
        ({"action_type": "CLICK", "button": "top"}, "CLICK.button: 'top' is not one of 'left'"),
        ({"action_type": "MOUSE_UP", "button": 1}, "MOUSE_UP.button: expected a string"),
        ({"action_type": "PRESS", "key": "enterr"}, "PRESS.key: unknown key name 'enterr'"),
        ({"action_type": "KEY_DOWN", "key": ["a"]}, "KEY_DOWN.key: expected a string"),
        ({"action_type": "HOTKEY", "keys": []}, "HOTKEY.keys: expected a non-empty list"),
        ({"action_type": "HOTKEY", "keys": "ctrl"}, "HOTKEY.keys: expected a non-empty list"),
        (
            {"action_type": "HOTKEY", "keys": ["ctrl", "cc"]},
            "HOTKEY.keys[1]: unknown key name 'cc'",
        ),
        ({"action_type": "HOTKEY", "keys": ["ctrl", 7]}, "HOTKEY.keys[1]: expected a key name"),
        ({"action_type": "CLICK", "x": 5}, "CLICK.y: missing; x and y must be given together"),
        ({"action_type": "RIGHT_CLICK", "y": 5}, "RIGHT_CLICK.x: missing; x and y must be given"),
        ({"action_type": "DOUBLE_CLICK", "x": 5}, "DOUBLE_CLICK.y: missing;"),
    ],
)
def test_invalid_actions_name_the_bad_field(action: object, expected: str) -> None:
    """Each kind of mistake gives a Failure whose message names the field and the problem."""
    assert expected in failure_message(action)


def test_unknown_action_lists_every_known_type() -> None:
    """The unknown-type message lists all sixteen action types."""
    message = failure_message({"action_type": "JUMP"})
    for name in ACTION_SPECS:
        assert name in message


def test_long_values_are_truncated_in_messages() -> None:
    """A huge wrong value is shown shortened, so messages stay readable."""
    message = failure_message({"action_type": "PRESS", "key": "x" * 10_000})
    assert len(message) < 120
    assert message.endswith("...")


def test_screen_size_sets_the_coordinate_range() -> None:
    """The x/y bounds follow the screen size given to the validator."""
    action = {"action_type": "MOVE_TO", "x": 2500, "y": 1400}
    assert isinstance(validate_computer_13(action), Failure)
    assert isinstance(validate_computer_13(action, screen_size=(2560, 1440)), Success)
    assert "0..1280" in failure_message(action, screen_size=(1280, 720))


@pytest.mark.parametrize(
    "size", [(1920,), {}, (0, 0), (-5, -5), (1920, 0), ("1920", "1080"), (1.5, 2.0), None]
)
def test_a_bad_screen_size_is_a_config_error(size: object) -> None:
    """A screen size that is not a pair of ints >= 1 is the caller's ConfigError (quoting it),
    whatever the action: not an IndexError, nor every click called out of range."""
    with pytest.raises(ConfigError, match=r"screen_size must be a \(width, height\) pair"):
        validate_computer_13({"action_type": "CLICK", "x": 0, "y": 0}, screen_size=size)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="screen_size"):
        validate_computer_13("DONE", screen_size=size)  # type: ignore[arg-type]
    assert validate_computer_13("DONE", screen_size=[800, 600]) == Success("DONE")  # type: ignore[arg-type]


@given(computer_13_actions)
def test_generated_valid_actions_validate(action: object) -> None:
    """Every action the vocabulary allows validates, also after a JSON round trip."""
    assert validate_computer_13(action).unwrap() is action
    again = json.loads(json.dumps(action))
    assert isinstance(validate_computer_13(again), Success)


@given(computer_13_actions, st.text(min_size=1, max_size=10))
def test_an_extra_parameter_is_named(action: object, name: str) -> None:
    """Adding a parameter the action does not take always fails and names that parameter."""
    if not isinstance(action, dict):
        return
    spec = ACTION_SPECS[action["action_type"]]
    if name == "action_type" or spec.param(name) is not None:
        return
    message = failure_message({**action, name: 1})
    assert repr(name)[:20] in message
    assert "unknown parameter" in message


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@given(
    _json_values
    | st.dictionaries(
        st.sampled_from(["action_type", "x", "y", "key", "keys", "button", "text", "dx", "dy"]),
        _json_values | st.sampled_from([*ACTION_SPECS, *KEYBOARD_KEYS[:5]]),
    )
)
def test_validator_is_total(value: object) -> None:
    """Any JSON-like value gives a Success of itself or a Failure carrying a non-empty message."""
    result = validate_computer_13(value)
    if isinstance(result, Success):
        assert result.unwrap() is value
    else:
        assert isinstance(result.failure(), str)
        assert result.failure()


def test_description_covers_every_action_parameter_and_key() -> None:
    """The prompt's action list names every action, parameter, requirement, range and key."""
    text = describe_actions()
    for spec in ACTIONS + SPECIAL_ACTIONS:
        assert f"- {spec.name}: " in text
        for param in spec.params:
            need = "required" if param.required else "optional"
            assert f"{param.name} ({need})" in text
    assert "from 0 to 1920" in text
    assert "from 0 to 1080" in text
    assert '"left", "right", "middle"' in text
    assert "one of 1, 2, 3" in text
    assert "x and y are given together or not at all" in text
    for key in KEYBOARD_KEYS:
        assert json.dumps(key) in text
    assert "from 0 to 2560" in describe_actions((2560, 1440))


def test_a_stored_action_is_validated_like_its_dict() -> None:
    """The `FrozenAction`s (and their `FrozenList`s) an `AgentState` stores are checked as the
    dicts they were made from: any mapping is an action."""
    good = {"action_type": "HOTKEY", "keys": ["ctrl", "c"]}
    state = AgentState([ObservationRecord(None, "t")], [[good]], ["x"])
    [[stored]] = state.actions
    assert isinstance(stored, FrozenAction)
    assert validate_computer_13(stored).unwrap() is stored
    bad = FrozenAction({"action_type": "HOTKEY", "keys": ["ctrl", "nokey"]})
    assert validate_computer_13(bad).failure() == validate_computer_13(thaw(bad)).failure()
    assert "unknown key name" in validate_computer_13(bad).failure()
