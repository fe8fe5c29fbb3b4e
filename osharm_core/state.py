"""The agent's immutable memory: what it saw, did and said, turn by turn.

Everything in an `AgentState` is immutable and hashable, down to the computer_13
actions: they are stored as `FrozenAction`s (read-only mappings whose lists are
`FrozenList`s), which compare equal to the plain dicts and lists they were made
from. `freeze` and `thaw` convert between the two.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import attrs

from osharm_core.errors import ConfigError, StateError, excerpt
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
        if not isinstance(items, Mapping):
            raise TypeError(
                f"FrozenAction needs a mapping (a computer_13 action); got {type(items).__name__}"
            )
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


def _quoted(value: object) -> str:
    """A bad value as an error quotes it: its type and an excerpt (or how deep it nests)."""
    try:
        return f"{type(value).__name__} {excerpt(value)}"
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply to quote"


def _tupled(value: object) -> object:
    """A list or tuple as a tuple; anything else as given, for the validator to refuse."""
    return tuple(value) if isinstance(value, list | tuple) else value


def _checks_tupled(value: object) -> object:
    """A list or tuple of checks as a tuple of tuples (the checks as lists too, as JSON has them)."""
    if not isinstance(value, list | tuple):
        return value
    return tuple(tuple(check) if isinstance(check, list | tuple) else check for check in value)


def _text_field(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise StateError(
            f"{type(instance).__name__}.{attribute.name} must be a string; got {_quoted(value)}"
        )


def _call_ids(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple):
        raise StateError(
            f"Continuation.call_ids must be a list or tuple of strings; got {_quoted(value)}"
        )
    for index, call_id in enumerate(value):
        if not isinstance(call_id, str):
            raise StateError(
                f"Continuation.call_ids[{index}] must be a string; got {_quoted(call_id)}"
            )


def _safety_checks(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple):
        raise StateError(
            "Continuation.safety_checks must be a list or tuple of (id, code, message) "
            f"triples; got {_quoted(value)}"
        )
    for index, check in enumerate(value):
        if not (
            isinstance(check, tuple) and len(check) == 3 and all(isinstance(x, str) for x in check)
        ):
            raise StateError(
                f"Continuation.safety_checks[{index}] must be an (id, code, message) triple "
                f"of strings; got {_quoted(check)}"
            )


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

    Lists are stored as tuples, so a continuation hashes and the caller's
    lists cannot change it; a field of the wrong type is a `StateError`.

    >>> Continuation("resp_1", ["call_a"], [["sc_1", "code", "message"]]).safety_checks
    (('sc_1', 'code', 'message'),)
    """

    response_id: str = attrs.field(validator=_text_field)
    call_ids: tuple[str, ...] = attrs.field(default=(), converter=_tupled, validator=_call_ids)
    safety_checks: tuple[tuple[str, str, str], ...] = attrs.field(
        default=(), converter=_checks_tupled, validator=_safety_checks
    )
    native: str = attrs.field(default="", validator=_text_field)


def _turns(value: object, name: str) -> tuple[Any, ...]:
    """`value` as a tuple, when it is a sequence of turns (a string or a mapping is not)."""
    if isinstance(value, tuple):
        return value
    if isinstance(value, list) or (
        isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping)
    ):
        return tuple(value)
    raise StateError(f"AgentState: {name} must be a list or tuple; got {_quoted(value)}")


def _records(value: Iterable[ObservationRecord]) -> tuple[ObservationRecord, ...]:
    records = _turns(value, "observations")
    if set(map(type, records)) - {ObservationRecord}:  # else all are plainly records
        for index, record in enumerate(records):
            if not isinstance(record, ObservationRecord):
                raise StateError(
                    f"AgentState: observations[{index}] must be an ObservationRecord; "
                    f"got {_quoted(record)}"
                )
    return records


def _bad_turn(index: int, problem: str) -> StateError:
    return StateError(
        f"AgentState: actions[{index}] must be null or a list of actions (code strings and "
        f"computer_13 objects); {problem}"
    )


def _turn(turn: object, index: int) -> tuple[StoredAction, ...] | None:
    """One turn's actions stored frozen: the check both the constructor and `from_json` make."""
    if turn is None:
        return None
    if isinstance(turn, str | bytes | bytearray | Mapping) or not isinstance(turn, Iterable):
        raise _bad_turn(index, f"got {_quoted(turn)}")
    if type(turn) is tuple and set(map(type, turn)) <= _STORED_TYPES:
        return turn  # stored already (the history of an evolved state)
    stored: list[StoredAction] = []
    for action in turn:
        if isinstance(action, str | FrozenAction):
            stored.append(action)
            continue
        if not isinstance(action, Mapping):
            raise _bad_turn(index, f"one is {_quoted(action)}")
        problem = _not_json(action)
        if problem is not None:
            raise StateError(f"AgentState: actions[{index}] holds an action {problem}")
        stored.append(FrozenAction(action))
    return tuple(stored)


#: The most bits an integer in an action may have: fewer digits (about 4,214) than Python's JSON
#: reader takes (4,300), so a stored action always reads back. The reply parsers keep to it too.
MAX_INT_BITS: Final = 14_000
#: Values an action may hold at its leaves: what JSON writes and reads back equal.
_JSON_LEAVES: Final = (str, int, float, bool, type(None))


def _not_json(action: Mapping[Any, Any]) -> str | None:
    """What keeps `action` from being JSON that reads back equal, if anything: a key that is
    not a string, a value JSON cannot hold (a set, bytes, an object), or nesting deeper than
    a parsed reply holds. Walked without recursion, tuples included."""
    from osharm_core.parsing import MAX_ACTION_DEPTH  # parsing imports this module

    stack: list[tuple[object, int]] = [(action, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"holding {_quoted(item)}, which JSON cannot hold"
        if isinstance(item, int) and item.bit_length() > MAX_INT_BITS:
            return "holding an integer of more digits than JSON readers take"
        if isinstance(item, _JSON_LEAVES):
            continue
        if isinstance(item, Mapping):
            bad_key = next((key for key in item if not isinstance(key, str)), _NO_KEY)
            if bad_key is not _NO_KEY:
                return f"with a key that is not a string ({_quoted(bad_key)})"
            children: Iterable[object] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            return f"holding {_quoted(item)}, which JSON cannot hold"
        if item and depth > MAX_ACTION_DEPTH:
            return (
                f"nested more than {MAX_ACTION_DEPTH} levels deep (the most a parsed reply holds)"
            )
        stack.extend((child, depth + 1) for child in children)
    return None


_NO_KEY: Final = object()


_STORED_TYPES: Final = frozenset({str, FrozenAction})


def _actions(
    value: Iterable[Iterable[Action | StoredAction] | None],
) -> tuple[tuple[StoredAction, ...] | None, ...]:
    return tuple([_turn(turn, index) for index, turn in enumerate(_turns(value, "actions"))])


def _thoughts(value: Iterable[str]) -> tuple[str, ...]:
    thoughts = _turns(value, "thoughts")
    if set(map(type, thoughts)) - {str}:
        for index, thought in enumerate(thoughts):
            if not isinstance(thought, str):
                raise StateError(
                    f"AgentState: thoughts[{index}] must be a string; got {_quoted(thought)}"
                )
    return thoughts


def _continuation(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Continuation):
        raise StateError(
            f"AgentState.continuation must be a Continuation or None; got {_quoted(value)}"
        )


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
    continuation: Continuation | None = attrs.field(default=None, validator=_continuation)

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
    observations, actions, thoughts = data["observations"], data["actions"], data["thoughts"]
    if not all(isinstance(turns, list) for turns in (observations, actions, thoughts)):
        raise StateError("AgentState.from_json: observations, actions and thoughts must be lists")
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
    continuation = data.get("continuation")
    resumed = None
    if continuation is not None:
        if not isinstance(continuation, dict) or not isinstance(
            continuation.get("response_id"), str
        ):
            raise StateError("AgentState.from_json: continuation needs a 'response_id' string")
        try:
            resumed = Continuation(
                continuation["response_id"],
                continuation.get("call_ids", []),
                continuation.get("safety_checks", []),
                continuation.get("native", ""),
            )
        except StateError as exc:
            raise StateError(f"AgentState.from_json: {exc}") from None
    return AgentState(records, actions, thoughts, resumed)
