"""The agent's immutable memory: what it saw, did and said, turn by turn.

Everything in an `AgentState` is immutable and hashable, down to the computer_13
actions: they are stored as `FrozenAction`s (read-only mappings whose lists are
`FrozenList`s), which compare equal to the plain dicts and lists they were made
from. `freeze` and `thaw` convert between the two.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs

from osharm_core.errors import ConfigError, StateError
from osharm_core.frames import CoordinateFrame
from osharm_core.limits import Degradation

#: One executable action: pyautogui code, a computer_13 dict, or WAIT / DONE / FAIL.
Action = str | dict[str, Any]
#: A set-of-marks box: left, top, width, height in screen pixels.
Mask = tuple[int, int, int, int]


class FrozenList(tuple[Any, ...]):
    """A list inside a stored action: a tuple that also compares equal to the same list.

    >>> FrozenList((1, 2)) == [1, 2], hash(FrozenList((1, 2))) == hash((1, 2))
    (True, True)
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return repr(list(self))


class FrozenAction(Mapping[str, Any]):
    """A computer_13 action as stored in the state: read-only, hashable, equal to its dict.

    >>> action = FrozenAction({"action_type": "HOTKEY", "keys": ["ctrl", "c"]})
    >>> action == {"action_type": "HOTKEY", "keys": ["ctrl", "c"]}, action["keys"][1]
    (True, 'c')
    >>> action["x"] = 1
    Traceback (most recent call last):
    ...
    TypeError: 'FrozenAction' object does not support item assignment
    """

    __slots__ = ("_hash", "_items")
    _items: dict[str, Any]
    _hash: int | None

    def __init__(self, items: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_items", {key: freeze(value) for key, value in items.items()})
        object.__setattr__(self, "_hash", None)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            value = hash(frozenset(self._items.items()))
            object.__setattr__(self, "_hash", value)
            return value
        return self._hash

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"FrozenAction is read-only; cannot set {name!r}")

    def __repr__(self) -> str:
        return f"FrozenAction({self._items!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenAction, (self._items,))


#: An action as an `AgentState` stores it: code or a special word, or a `FrozenAction`.
StoredAction = str | FrozenAction


def freeze(value: Any) -> Any:
    """`value` with every dict made a `FrozenAction` and every list a `FrozenList`, recursively.

    Strings, numbers, booleans and None (and values already frozen) come back as they are.

    >>> freeze([{"x": 1}])
    [FrozenAction({'x': 1})]
    """
    if isinstance(value, FrozenAction | FrozenList):
        return value
    if isinstance(value, Mapping):
        return FrozenAction(value)
    if isinstance(value, list | tuple):
        return FrozenList(freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """A fresh plain copy of a frozen value: dicts and lists the caller may change freely.

    >>> thaw(FrozenAction({"keys": ["a"]}))
    {'keys': ['a']}
    """
    if isinstance(value, Mapping):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, FrozenList | list):
        return [thaw(item) for item in value]
    return value


@attrs.frozen
class ObservationRecord:
    """One turn's observation as it was sent, so history never recomputes it.

    `screenshot` is the base64 PNG (the tagged one for `som`);
    `accessibility_tree` is the linearized and trimmed tree (the element table
    for `som`). Either is `None` when the observation type does not use it.
    `frame` is how the screenshot sent relates to the screen (`None`: the
    identity, nothing scaled); `degradation` what was left out of this step's
    request to fit the server's limits (`None`: nothing).

    `text_tokens` is a cache, not part of the value (not compared, hashed,
    shown or saved): the cl100k tokens of the user text that shows this
    record's tree, by observation type, kept by the request budget so a
    history text is counted once however many steps it is sent in.
    """

    screenshot: str | None = None
    accessibility_tree: str | None = None
    frame: CoordinateFrame | None = None
    degradation: Degradation | None = None
    text_tokens: dict[str, int] = attrs.field(factory=dict, init=False, eq=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready object; `frame` and `degradation` only when set."""
        data: dict[str, Any] = {
            "screenshot": self.screenshot,
            "accessibility_tree": self.accessibility_tree,
        }
        if self.frame is not None:
            data["frame"] = self.frame.to_json()
        if self.degradation is not None:
            data["degradation"] = self.degradation.to_json()
        return data


@attrs.frozen
class Continuation:
    """Where a stateful provider conversation (the Responses API) left off.

    `response_id` is the id to send as `previous_response_id`; `call_ids` are
    the `computer_call`s that the next request answers with a screenshot;
    `safety_checks` are the pending safety checks the provider raised, kept
    so the caller can decide; they are never acknowledged automatically.
    `native` is the provider's own JSON record of its last reply's calls
    (native computer-use protocols: kept in the record, and resent by the
    stateless APIs that need it); empty where there is none.
    """

    response_id: str
    call_ids: tuple[str, ...] = ()
    safety_checks: tuple[tuple[str, str, str], ...] = ()
    native: str = ""


def _records(value: Iterable[ObservationRecord]) -> tuple[ObservationRecord, ...]:
    return tuple(value)


def _actions(
    value: Iterable[Iterable[Action | StoredAction] | None],
) -> tuple[tuple[StoredAction, ...] | None, ...]:
    from osharm_core.parsing import MAX_ACTION_DEPTH, _too_deep  # parsing imports this module

    turns: list[tuple[StoredAction, ...] | None] = []
    for index, turn in enumerate(value):
        if turn is None:
            turns.append(None)
            continue
        given = tuple(turn)
        if any(isinstance(action, dict) and _too_deep(action) for action in given):
            raise StateError(
                f"AgentState: actions[{index}] holds an action nested more than "
                f"{MAX_ACTION_DEPTH} levels deep (the most a parsed reply holds)"
            )
        turns.append(tuple(map(freeze, given)))
    return tuple(turns)


def _thoughts(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _same_lengths(instance: AgentState, _: attrs.Attribute[Any], __: object) -> None:
    sizes = {len(instance.observations), len(instance.actions), len(instance.thoughts)}
    if len(sizes) != 1:
        raise StateError(
            "AgentState: observations, actions and thoughts must have the same length; got "
            f"{len(instance.observations)}, {len(instance.actions)}, {len(instance.thoughts)}"
        )


@attrs.frozen
class AgentState:
    """The trajectory so far. `AgentState()` is the empty start of an episode.

    The three tuples always have the same length: turn `i` is
    `observations[i]`, `actions[i]` (`None` when the reply could not be parsed)
    and `thoughts[i]` (the raw reply, or `""` when it could not be parsed).
    Actions are stored frozen (see `FrozenAction`), so a state hashes and
    compares by value and nothing handed out can change it.

    >>> AgentState().observations
    ()
    """

    observations: tuple[ObservationRecord, ...] = attrs.field(default=(), converter=_records)
    actions: tuple[tuple[StoredAction, ...] | None, ...] = attrs.field(
        default=(), converter=_actions
    )
    thoughts: tuple[str, ...] = attrs.field(
        default=(), converter=_thoughts, validator=_same_lengths
    )
    continuation: Continuation | None = None

    def __len__(self) -> int:
        return len(self.thoughts)

    def to_json(self) -> dict[str, Any]:
        """The whole state as a JSON-ready object (`from_json` reads it back equal).

        >>> state = AgentState([ObservationRecord(None, "tree")], [[{"action_type": "WAIT"}]], ["t"])
        >>> AgentState.from_json(state.to_json()) == state
        True
        """
        continuation = self.continuation
        return {
            "observations": [record.to_json() for record in self.observations],
            "actions": [None if turn is None else thaw(list(turn)) for turn in self.actions],
            "thoughts": list(self.thoughts),
            "continuation": None
            if continuation is None
            else {
                "response_id": continuation.response_id,
                "call_ids": list(continuation.call_ids),
                "safety_checks": [list(check) for check in continuation.safety_checks],
                **({"native": continuation.native} if continuation.native else {}),
            },
        }

    @classmethod
    def from_json(cls, data: object) -> AgentState:
        """The state `to_json` wrote; a `StateError` says what is malformed and where."""
        try:
            return _state_from_json(data)
        except RecursionError:
            raise StateError("AgentState.from_json: a value is nested too deeply") from None
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, StateError):
                raise
            raise StateError(f"AgentState.from_json: malformed state ({exc})") from None


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise StateError(f"AgentState.from_json: {where} must be a list of strings")
    return tuple(value)


def _optional_text(value: object, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise StateError(f"AgentState.from_json: {where} must be a string or null")
    return value


def _frame(value: object, where: str) -> CoordinateFrame | None:
    if value is None:
        return None
    try:
        return CoordinateFrame.from_json(value)
    except ConfigError as exc:
        raise StateError(f"AgentState.from_json: {where}: {exc}") from None


def _degradation(value: object, where: str) -> Degradation | None:
    if value is None:
        return None
    try:
        return Degradation.from_json(value)
    except ValueError as exc:
        raise StateError(f"AgentState.from_json: {where}: {exc}") from None


def _state_from_json(data: object) -> AgentState:
    if not isinstance(data, dict):
        raise StateError(f"AgentState.from_json expects an object; got {type(data).__name__}")
    observations = data["observations"]
    actions = data["actions"]
    if not isinstance(observations, list) or not isinstance(actions, list):
        raise StateError("AgentState.from_json: observations and actions must be lists")
    records = []
    for index, record in enumerate(observations):
        if not isinstance(record, dict):
            raise StateError(f"AgentState.from_json: observations[{index}] must be an object")
        records.append(
            ObservationRecord(
                _optional_text(record.get("screenshot"), f"observations[{index}].screenshot"),
                _optional_text(
                    record.get("accessibility_tree"), f"observations[{index}].accessibility_tree"
                ),
                _frame(record.get("frame"), f"observations[{index}].frame"),
                _degradation(record.get("degradation"), f"observations[{index}].degradation"),
            )
        )
    for index, turn in enumerate(actions):
        if turn is not None and (
            not isinstance(turn, list) or not all(isinstance(a, str | dict) for a in turn)
        ):
            raise StateError(
                f"AgentState.from_json: actions[{index}] must be null or a list of "
                "strings and objects"
            )
    continuation = data.get("continuation")
    resumed = None
    if continuation is not None:
        if not isinstance(continuation, dict) or not isinstance(
            continuation.get("response_id"), str
        ):
            raise StateError("AgentState.from_json: continuation needs a 'response_id' string")
        checks = continuation.get("safety_checks", [])
        if not isinstance(checks, list) or not all(
            isinstance(c, list) and len(c) == 3 and all(isinstance(x, str) for x in c)
            for c in checks
        ):
            raise StateError(
                "AgentState.from_json: continuation.safety_checks must be [id, code, message] lists"
            )
        native = continuation.get("native", "")
        if not isinstance(native, str):
            raise StateError("AgentState.from_json: continuation.native must be a string")
        resumed = Continuation(
            continuation["response_id"],
            _strings(continuation.get("call_ids", []), "continuation.call_ids"),
            tuple((c[0], c[1], c[2]) for c in checks),
            native,
        )
    return AgentState(records, actions, _strings(data["thoughts"], "thoughts"), resumed)
