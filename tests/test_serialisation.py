"""AgentConfig and AgentState round-trip through JSON (what a runner ships to its workers)."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import attrs
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from osharm_core import (
    AgentConfig,
    AgentState,
    ConfigError,
    Continuation,
    ObservationRecord,
    ServerLimits,
    StateError,
)
from osharm_core.errors import excerpt
from osharm_core.frames import CoordinateFrame
from osharm_core.limits import server_limits
from tests import strategies as s


@given(s.agent_configs())
def test_configs_round_trip_through_json(config: AgentConfig) -> None:
    assert AgentConfig.from_json(json.loads(json.dumps(config.to_json()))) == config


_continuations = st.none() | st.builds(
    Continuation,
    st.text(max_size=10),
    st.lists(st.text(max_size=5), max_size=3).map(tuple),
    st.lists(
        st.tuples(st.text(max_size=3), st.text(max_size=3), st.text(max_size=8)), max_size=2
    ).map(tuple),
)


@st.composite
def _states(draw: st.DrawFn) -> AgentState:
    turns = draw(st.lists(s.turn_actions, max_size=5))
    records = [
        ObservationRecord(draw(st.none() | st.text(max_size=8)), draw(st.none() | st.text()))
        for _ in turns
    ]
    thoughts = [draw(st.text(max_size=20)) for _ in turns]
    return AgentState(records, turns, thoughts, draw(_continuations))


@given(_states() | s.agent_states())
def test_states_round_trip_through_json(state: AgentState) -> None:
    again = AgentState.from_json(json.loads(json.dumps(state.to_json())))
    assert again == state
    assert hash(again) == hash(state)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expects an object"),
        ({"observations": [], "actions": []}, "malformed state"),
        ({"observations": [{}], "actions": [None, None], "thoughts": [""]}, "same length"),
        ({"observations": [7], "actions": [None], "thoughts": [""]}, r"observations\[0\]"),
        ({"observations": [{}], "actions": [[3]], "thoughts": [""]}, r"actions\[0\]"),
        ({"observations": [], "actions": [], "thoughts": [], "continuation": {}}, "response_id"),
    ],
)
def test_malformed_states_are_refused_with_where(data: Any, message: str) -> None:
    with pytest.raises(StateError, match=message):
        AgentState.from_json(data)


def test_unknown_or_bad_config_fields_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown field"):
        AgentConfig.from_json({"model": "gpt-4o", "colour": "blue"})
    with pytest.raises(ConfigError, match="top_p"):
        AgentConfig.from_json({"top_p": 7})
    with pytest.raises(ConfigError, match="expects an object"):
        AgentConfig.from_json("gpt-4o")


_KEYED_READERS: dict[str, tuple[Callable[[dict[Any, Any]], object], type]] = {
    "AgentConfig.from_json": (AgentConfig.from_json, AgentConfig),
    "CoordinateFrame.from_json": (CoordinateFrame.from_json, CoordinateFrame),
    "AgentConfig(server_profile=...)": (lambda d: AgentConfig(server_profile=d), ServerLimits),
    "server_limits": (server_limits, ServerLimits),
}


@pytest.mark.parametrize("reader", list(_KEYED_READERS))
@given(keys=st.lists(s.hostile_keys, min_size=1, max_size=12, unique=True))
def test_unknown_keys_of_any_type_are_named_in_a_config_error(reader: str, keys: list[Any]) -> None:
    """An object whose keys are not all known strings (ints, None, tuples, mixed) is a
    ConfigError quoting the unknown keys, never a TypeError from joining or sorting them."""
    read, kind = _KEYED_READERS[reader]
    data = dict.fromkeys(keys, 1)
    unknown = [key for key in data if key not in {f.name for f in attrs.fields(kind)}]
    assume(unknown)
    with pytest.raises(ConfigError, match="unknown") as caught:
        read(data)
    if len(unknown) <= 10:
        assert all(excerpt(key, 40) in str(caught.value) for key in unknown)
    else:
        assert f"and {len(unknown) - 10} more" in str(caught.value)


def test_server_limits_in_any_mapping_are_stored_as_server_limits() -> None:
    """A read-only mapping of limits is converted as a dict is: the config hashes, writes JSON,
    and the caller's later change to the mapping's dict does not reach it."""
    limits = {"max_bytes": 1000}
    config = AgentConfig(server_profile=MappingProxyType(limits))
    limits["max_bytes"] = 10**9
    assert config.server_profile == ServerLimits(max_bytes=1000)
    assert config == AgentConfig(server_profile={"max_bytes": 1000})
    hash(config)
    assert AgentConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
