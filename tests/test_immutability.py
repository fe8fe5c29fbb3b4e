"""States are values all the way down: they hash and compare by value, and nothing handed out changes them."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from osharm_core import (
    AgentConfig,
    AgentState,
    Continuation,
    FrozenAction,
    FrozenList,
    Mask,
    Message,
    ObservationRecord,
    StateError,
    StepRequest,
    TextPart,
    complete_step,
    freeze,
    thaw,
)
from tests import strategies as s


def _states(turns: list[list[Any] | None]) -> AgentState:
    records = [ObservationRecord(None, f"tree {n}") for n in range(len(turns))]
    return AgentState(records, turns, ["thought"] * len(turns))


def _vandalise(value: Any) -> None:
    """Change everything changeable inside `value`, recursively."""
    if isinstance(value, dict):
        for key in list(value):
            _vandalise(value[key])
            value[key] = "changed"
        value["added"] = 1
    elif isinstance(value, list):
        for item in value:
            _vandalise(item)
        value.append("added")


@given(st.lists(s.turn_actions, max_size=5))
def test_states_hash_and_compare_by_value(turns: list[list[Any] | None]) -> None:
    state = _states(turns)
    again = _states(copy.deepcopy(turns))
    assert state == again
    assert hash(state) == hash(again)
    assert pickle.loads(pickle.dumps(state)) == state
    assert hash(copy.deepcopy(state)) == hash(state)


@given(s.agent_states())
def test_every_generated_state_hashes(state: AgentState) -> None:
    assert hash(state) == hash(attrs.evolve(state))


@given(st.lists(s.turn_actions, max_size=5))
def test_what_built_a_state_can_be_changed_without_changing_it(
    turns: list[list[Any] | None],
) -> None:
    state = _states(turns)
    before = json.dumps(thaw(list(state.actions)), sort_keys=True, default=repr)
    for turn in turns:
        _vandalise(turn)
    assert json.dumps(thaw(list(state.actions)), sort_keys=True, default=repr) == before


@given(s.json_actions)
def test_stored_actions_refuse_every_change(action: dict[str, Any]) -> None:
    stored = _states([[action]]).actions[0]
    assert stored is not None
    frozen = stored[0]
    assert isinstance(frozen, FrozenAction)
    assert frozen == action
    with pytest.raises(TypeError):
        frozen["action_type"] = "FAIL"  # type: ignore[index]
    with pytest.raises(AttributeError):
        frozen.update({"x": 1})  # type: ignore[attr-defined]
    for value in frozen.values():
        if isinstance(value, FrozenList):
            with pytest.raises(AttributeError):
                value.append(1)  # type: ignore[attr-defined]


@given(s.json_actions)
def test_thaw_gives_fresh_plain_values_equal_to_the_original(action: dict[str, Any]) -> None:
    frozen = freeze(action)
    plain = thaw(frozen)
    assert plain == action
    assert json.loads(json.dumps(plain)) == json.loads(json.dumps(action))
    _vandalise(plain)
    assert frozen == action


_REPLIES = st.one_of(
    s.computer_13_actions.map(lambda a: "```json\n" + json.dumps(a) + "\n```"),
    s.json_actions.map(lambda a: "```json\n" + json.dumps(a) + "\n```"),
    s.fenced_replies(),
)


@given(s.agent_configs(), _REPLIES)
def test_complete_step_hands_out_nothing_that_reaches_the_state(
    config: AgentConfig, reply: str
) -> None:
    request = StepRequest(messages=(), observation=ObservationRecord(None, "tree"), masks=None)
    state, actions = complete_step(config, AgentState(), request, reply)
    before, before_hash = copy.deepcopy(state), hash(state)
    if actions is not None:
        _vandalise(actions)
    assert state == before
    assert hash(state) == before_hash


def _first_bad(values: list[Any], good: Any) -> int | None:
    return next((index for index, value in enumerate(values) if not good(value)), None)


def _good_turn(turn: object) -> bool:
    return turn is None or (
        isinstance(turn, list | tuple) and all(isinstance(a, str | dict) for a in turn)
    )


@given(st.lists(st.tuples(s.loose_records, s.loose_turns, s.loose_thoughts), max_size=6))
def test_a_state_takes_only_records_action_lists_and_text(
    turns: list[tuple[Any, Any, Any]],
) -> None:
    """A state of good turns round-trips through JSON and hashes; any other element is a
    StateError naming the first bad one (a string turn is never split into characters)."""
    records, actions, thoughts = ([turn[n] for turn in turns] for n in range(3))
    for name, values, good in (
        ("observations", records, lambda r: isinstance(r, ObservationRecord)),
        ("actions", actions, _good_turn),
        ("thoughts", thoughts, lambda t: isinstance(t, str)),
    ):
        index = _first_bad(values, good)
        if index is not None:
            with pytest.raises(StateError, match=rf"AgentState: {name}\[{index}\] must be"):
                AgentState(records, actions, thoughts)
            return
    state = AgentState(records, actions, thoughts)
    assert AgentState.from_json(json.loads(json.dumps(state.to_json()))) == state
    hash(state)


@pytest.mark.parametrize(
    ("field", "value"),
    [("observations", "tree"), ("actions", 5), ("thoughts", "abc"), ("continuation", {})],
)
def test_a_state_field_of_the_wrong_shape_is_a_state_error(field: str, value: object) -> None:
    """A string is not a sequence of turns, nor a dict a continuation."""
    turns: dict[str, Any] = {"observations": [], "actions": [], "thoughts": []}
    with pytest.raises(StateError, match=rf"AgentState(: |\.){field} must be"):
        AgentState(**{**turns, field: value})


@given(st.text(max_size=5), s.loose_call_ids, s.loose_safety_checks, st.text(max_size=5))
def test_a_continuation_keeps_tuples_of_strings(
    response_id: str, call_ids: Any, checks: Any, native: str
) -> None:
    """Lists become tuples: the continuation hashes, round-trips through JSON inside a state,
    and the caller's lists cannot change it; a non-string is a StateError naming where."""
    bad_id = _first_bad(call_ids, lambda c: isinstance(c, str))
    bad_check = _first_bad(checks, lambda c: len(c) == 3 and all(isinstance(x, str) for x in c))
    if bad_id is not None or bad_check is not None:
        where = "call_ids" if bad_id is not None else "safety_checks"
        with pytest.raises(StateError, match=rf"Continuation\.{where} must be .*; got "):
            Continuation(response_id, call_ids, checks, native)
        return
    continuation = Continuation(response_id, call_ids, checks, native)
    state = AgentState(continuation=continuation)
    assert AgentState.from_json(json.loads(json.dumps(state.to_json()))) == state
    assert hash(state) == hash(AgentState(continuation=copy.deepcopy(continuation)))
    expected = (tuple(call_ids), tuple(map(tuple, checks)))
    _vandalise(call_ids)
    _vandalise(checks)
    assert (continuation.call_ids, continuation.safety_checks) == expected


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((None,), "response_id must be a string; got None$"),
        (("r", "call_1"), "call_ids must be a list or tuple of strings; got 'call_1'$"),
        (("r", (), {"id": "x"}), "safety_checks must be a list or tuple .*; got {'id': 'x'}$"),
        (("r", (), (), b"{}"), "native must be a string; got b'{}'$"),
    ],
)
def test_continuation_fields_of_the_wrong_type_are_state_errors(
    arguments: tuple[Any, ...], message: str
) -> None:
    """Each field is checked by type, and the error names it."""
    with pytest.raises(StateError, match=message):
        Continuation(*arguments)


@pytest.mark.parametrize("messages", ["abc", b"abc", Message("user", (TextPart("x"),)), ["abc"], 5])
def test_a_step_request_takes_only_a_sequence_of_messages(messages: Any) -> None:
    """A string is not split into one message per character: anything but Messages is refused."""
    with pytest.raises(TypeError, match=r"StepRequest\.messages must be a sequence of Message"):
        StepRequest(messages=messages, observation=ObservationRecord(None, "tree"))


@pytest.mark.parametrize("items", [None, "abc", 5, [("x", 1)]])
def test_a_frozen_action_needs_a_mapping(items: Any) -> None:
    """FrozenAction(None) is a TypeError saying a mapping is needed."""
    with pytest.raises(TypeError, match="FrozenAction needs a mapping"):
        FrozenAction(items)


def test_a_step_request_copies_the_lists_it_is_given() -> None:
    messages: list[Message] = [Message("user", (TextPart("look"),))]
    masks: list[Mask] = [(1, 2, 3, 4)]
    request = StepRequest(
        messages=messages, observation=ObservationRecord(None, "tree"), masks=masks
    )
    messages.clear()
    masks.append((5, 6, 7, 8))
    assert request.messages == (Message("user", (TextPart("look"),)),)
    assert request.masks == ((1, 2, 3, 4),)
    hash(request)
