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
from attrs.validators import and_, deep_iterable, instance_of, max_len, min_len, optional

from osharm_core.errors import StateError, excerpt, refusing
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
            raise TypeError(f"FrozenAction needs a mapping (an action); got {type(items).__name__}")
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


_TEXT_OR_NONE: Final = refusing("a string or None", optional(instance_of(str)), error=StateError)


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

    screenshot: str | None = attrs.field(default=None, validator=_TEXT_OR_NONE)
    accessibility_tree: str | None = attrs.field(default=None, validator=_TEXT_OR_NONE)
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
    """A list or tuple as a tuple (its lists too, as JSON has them); else as given, for the
    validator to refuse."""
    if not isinstance(value, list | tuple):
        return value
    return tuple(tuple(item) if isinstance(item, list | tuple) else item for item in value)


def _refusing(requirement: str, *validators: Any) -> Any:
    return refusing(requirement, *validators, error=StateError)


_TEXT: Final = _refusing("a string", instance_of(str))
_STRINGS: Final = deep_iterable(instance_of(str), instance_of(tuple))


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

    response_id: str = attrs.field(validator=_TEXT)
    call_ids: tuple[str, ...] = attrs.field(
        default=(), converter=_tupled, validator=_refusing("a list or tuple of strings", _STRINGS)
    )
    safety_checks: tuple[tuple[str, str, str], ...] = attrs.field(
        default=(),
        converter=_tupled,
        validator=_refusing(
            "a list or tuple of (id, code, message) triples of strings",
            deep_iterable(and_(_STRINGS, min_len(3), max_len(3)), instance_of(tuple)),
        ),
    )
    native: str = attrs.field(default="", validator=_TEXT)


def _turns(value: object, name: str) -> tuple[Any, ...]:
    """`value` as a tuple, when it is a sequence of turns (a string or a mapping is not)."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise StateError(f"AgentState: {name} must be a list or tuple; got {_quoted(value)}")
    return tuple(value)


def _all_of(value: Iterable[Any], kind: type, name: str) -> tuple[Any, ...]:
    """`value` as a tuple of `kind`s, refusing anything else (naming the first bad turn)."""
    turns = _turns(value, name)
    bad = next((n for n, turn in enumerate(turns) if not isinstance(turn, kind)), None)
    if bad is not None:
        raise StateError(
            f"AgentState: {name}[{bad}] must be a {kind.__name__}; got {_quoted(turns[bad])}"
        )
    return turns


def _records(value: Iterable[ObservationRecord]) -> tuple[ObservationRecord, ...]:
    return _all_of(value, ObservationRecord, "observations")


def _thoughts(value: Iterable[str]) -> tuple[str, ...]:
    return _all_of(value, str, "thoughts")


def _turn(turn: object, index: int) -> tuple[StoredAction, ...] | None:
    """One turn's actions stored frozen: the check both the constructor and `from_json` make."""
    if turn is None:
        return None
    if type(turn) is tuple and set(map(type, turn)) <= _STORED_TYPES:
        return turn  # stored already (the history of an evolved state)
    where = f"AgentState: actions[{index}]"
    if isinstance(turn, str | bytes | bytearray | Mapping) or not isinstance(turn, Iterable):
        raise StateError(f"{where} must be null or a list of actions; got {_quoted(turn)}")
    stored = tuple(turn)
    problems = (_not_action(action) for action in stored)
    problem = next((p for p in problems if p is not None), None)
    if problem is not None:
        raise StateError(f"{where} {problem}")
    return tuple(a if isinstance(a, str | FrozenAction) else FrozenAction(a) for a in stored)


def _not_action(action: object) -> str | None:
    """What keeps `action` from being stored, if anything (see `_not_json`)."""
    if isinstance(action, str | FrozenAction):
        return None
    if isinstance(action, Mapping):
        return _not_json(action)
    return f"must be null or a list of actions (code and computer_13 objects); one is {_quoted(action)}"


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
            return f"holds an action holding {_quoted(item)}, which JSON cannot hold"
        if isinstance(item, int) and item.bit_length() > MAX_INT_BITS:
            return "holds an action holding an integer of more digits than JSON readers take"
        if isinstance(item, _JSON_LEAVES):
            continue
        if isinstance(item, Mapping):
            bad_key = next((key for key in item if not isinstance(key, str)), _NO_KEY)
            if bad_key is not _NO_KEY:
                return f"holds an action with a key that is not a string ({_quoted(bad_key)})"
            children: Iterable[object] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            return f"holds an action holding {_quoted(item)}, which JSON cannot hold"
        if item and depth > MAX_ACTION_DEPTH:
            return f"holds an action nested more than {MAX_ACTION_DEPTH} levels deep (as no reply does)"
        stack.extend((child, depth + 1) for child in children)
    return None


_NO_KEY: Final = object()


_STORED_TYPES: Final = frozenset({str, FrozenAction})


def _actions(
    value: Iterable[Iterable[Action | StoredAction] | None],
) -> tuple[tuple[StoredAction, ...] | None, ...]:
    return tuple([_turn(turn, index) for index, turn in enumerate(_turns(value, "actions"))])


def _same_lengths(instance: AgentState, _: attrs.Attribute[Any], __: object) -> None:
    sizes = (len(instance.observations), len(instance.actions), len(instance.thoughts))
    if len(set(sizes)) != 1:
        raise StateError(f"AgentState: {_TURNS} must have the same length; got {sizes}")


_TURNS: Final = "observations, actions and thoughts"


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
    continuation: Continuation | None = attrs.field(
        default=None,
        validator=_refusing("a Continuation or None", optional(instance_of(Continuation))),
    )

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


def _record(value: object, where: str) -> ObservationRecord:
    """One saved observation record; a `StateError` names `where` when it is malformed."""
    if not isinstance(value, dict):
        raise StateError(f"AgentState.from_json: {where} must be an object")
    fields = {key: value.get(key) for key in ("screenshot", "accessibility_tree")}
    for key, read in _RECORD_READERS:
        try:
            fields[key] = None if value.get(key) is None else read(value[key])
        except ValueError as exc:
            raise StateError(f"AgentState.from_json: {where}.{key}: {exc}") from None
    return ObservationRecord(**fields)


_RECORD_READERS: Final = (
    ("frame", CoordinateFrame.from_json),
    ("degradation", Degradation.from_json),
)


def _state_from_json(data: object) -> AgentState:
    if not isinstance(data, dict):
        raise StateError(f"AgentState.from_json expects an object; got {type(data).__name__}")
    records = [_record(r, f"observations[{n}]") for n, r in enumerate(data["observations"])]
    continuation = data.get("continuation")
    resumed = None if continuation is None else Continuation(**continuation)
    return AgentState(records, data["actions"], data["thoughts"], resumed)
