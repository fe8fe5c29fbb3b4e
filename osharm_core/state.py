"""The agent's immutable memory: what it saw, did and said, turn by turn."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

#: One executable action: pyautogui code, a computer_13 dict, or WAIT / DONE / FAIL.
Action = str | dict[str, Any]
#: A set-of-marks box: left, top, width, height in screen pixels.
Mask = tuple[int, int, int, int]


@attrs.frozen
class ObservationRecord:
    """One turn's observation as it was sent, so history never recomputes it.

    `screenshot` is the base64 PNG (the tagged one for `som`);
    `accessibility_tree` is the linearized and trimmed tree (the element table
    for `som`). Either is `None` when the observation type does not use it.
    """

    screenshot: str | None = None
    accessibility_tree: str | None = None


@attrs.frozen
class Continuation:
    """Where a stateful provider conversation (the Responses API) left off.

    `response_id` is the id to send as `previous_response_id`; `call_ids` are
    the `computer_call`s that the next request answers with a screenshot;
    `safety_checks` are the pending safety checks the provider raised, kept
    so the caller can decide; they are never acknowledged automatically.
    """

    response_id: str
    call_ids: tuple[str, ...] = ()
    safety_checks: tuple[tuple[str, str, str], ...] = ()


def _records(value: Iterable[ObservationRecord]) -> tuple[ObservationRecord, ...]:
    return tuple(value)


def _actions(
    value: Iterable[Iterable[Action] | None],
) -> tuple[tuple[Action, ...] | None, ...]:
    return tuple(None if turn is None else tuple(turn) for turn in value)


def _thoughts(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _same_lengths(instance: AgentState, _: attrs.Attribute[Any], __: object) -> None:
    sizes = {len(instance.observations), len(instance.actions), len(instance.thoughts)}
    if len(sizes) != 1:
        raise ValueError(
            "AgentState: observations, actions and thoughts must have the same length; got "
            f"{len(instance.observations)}, {len(instance.actions)}, {len(instance.thoughts)}"
        )


@attrs.frozen
class AgentState:
    """The trajectory so far. `AgentState()` is the empty start of an episode.

    The three tuples always have the same length: turn `i` is
    `observations[i]`, `actions[i]` (`None` when the reply could not be parsed)
    and `thoughts[i]` (the raw reply, or `""` when it could not be parsed).

    >>> AgentState().observations
    ()
    """

    observations: tuple[ObservationRecord, ...] = attrs.field(default=(), converter=_records)
    actions: tuple[tuple[Action, ...] | None, ...] = attrs.field(default=(), converter=_actions)
    thoughts: tuple[str, ...] = attrs.field(
        default=(), converter=_thoughts, validator=_same_lengths
    )
    continuation: Continuation | None = None

    def __len__(self) -> int:
        return len(self.thoughts)
