"""Pieces the native computer-use providers share: the latest exchange, the screen, the record.

Stateless APIs (Anthropic's Messages, Gemini's generateContent) need the
model's own previous turn resent with the answers to its calls; the
provider keeps that turn as JSON in `Continuation.native` and, on the next
request, renders the older history as neutral messages, then the native
turn, then a user turn answering each call with the latest screenshot.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any, Final, TypeGuard, TypeVar

from adapters.contract import ModelRequest
from adapters.errors import ConfigurationError, ResponseDecodeError, UnsupportedComputerAction
from adapters.providers.computer_use import MAX_GESTURES, ScreenMap
from osharm_core import Continuation, ImagePart, Message
from osharm_core.observation import png_size as header_size

#: The screen of an OSWorld virtual machine, used when no PNG screenshot gives the size.
DEFAULT_DISPLAY: Final = (1920, 1080)
#: The action spaces native computer-use calls are converted into.
ACTION_SPACES: Final = ("pyautogui", "computer_13")


def png_size(data: str) -> tuple[int, int] | None:
    """Width and height of a base64 PNG, read from its IHDR chunk (only the first 32 characters are decoded).

    >>> png_size("iVBORw0KGgoAAAANSUhEUgAAB4AAAAQ4CAIAAABnsVYUAAAA")
    (1920, 1080)
    """
    try:
        return header_size(base64.b64decode(data[:32], validate=True))
    except (binascii.Error, ValueError):
        return None


def check_action_space(request: ModelRequest, protocol: str) -> None:
    """Refuse, before any call, an action space native calls cannot be converted into."""
    if request.action_space not in ACTION_SPACES:
        raise ConfigurationError(
            f"{protocol} converts actions into {' or '.join(ACTION_SPACES)}, "
            f"not {request.action_space!r}"
        )


def latest_screenshot(messages: Sequence[Message]) -> ImagePart | None:
    """The last image of the conversation (the screenshot the model sees now)."""
    return next((m.images[-1] for m in reversed(messages) if m.images), None)


def display_size(messages: Sequence[Message], default: tuple[int, int]) -> tuple[int, int]:
    """The size of the latest screenshot, `default` when there is none (or it is not a PNG)."""
    screenshot = latest_screenshot(messages)
    return (png_size(screenshot.data) if screenshot else None) or default


def pixel_screen(messages: Sequence[Message], default: tuple[int, int]) -> ScreenMap:
    """The screen map of a pixel protocol that saw the latest screenshot unscaled."""
    return ScreenMap.pixels(display_size(messages, default))


def split_latest(messages: Sequence[Message]) -> tuple[list[Message], Message | None]:
    """The history before the model's last turn, and the latest user message.

    The assistant message just before the latest user message is the model's
    previous reply as converted text; a stateless native provider replaces it
    with its own record of that turn.
    """
    items = list(messages)
    latest = None
    if items and items[-1].role == "user":
        latest = items.pop()
    if items and items[-1].role == "assistant":
        items.pop()
    return items, latest


def answering(continuation: Continuation | None) -> TypeGuard[Continuation]:
    """Whether the next request answers native calls (it has calls and their record)."""
    return continuation is not None and bool(continuation.call_ids) and bool(continuation.native)


def native_turn(continuation: Continuation, provider: str) -> Any:
    """The provider's record of its previous turn, decoded; a clear error when it is corrupt."""
    try:
        return json.loads(continuation.native)
    except RecursionError:  # a record from a state file may nest past the parser's stack
        problem = "it nests too deeply"
    except ValueError as exc:
        problem = str(exc)
    raise ConfigurationError(
        f"{provider}: the continuation's native record is not JSON ({problem}); "
        "start a new chain (no continuation)"
    )


def answer_screenshot(latest: Message | None, protocol: str) -> ImagePart:
    """The screenshot that answers the pending calls, or a `ConfigurationError`."""
    screenshot = latest.images[-1] if latest is not None and latest.images else None
    if screenshot is None:
        raise ConfigurationError(
            f"{protocol} answers each call with a screenshot, but the latest user message has "
            "none (use a screenshot observation type)"
        )
    return screenshot


_T = TypeVar("_T")


def bounded(calls: Sequence[_T], what: str) -> Sequence[_T]:
    """The native calls of one reply, refused as hostile when there are more than `MAX_GESTURES`."""
    if len(calls) > MAX_GESTURES:
        raise UnsupportedComputerAction(
            f"{len(calls)} {what} in one reply (at most {MAX_GESTURES})"
        )
    return calls


@contextlib.contextmanager
def converting(what: str, provider: str, model: str) -> Iterator[None]:
    """Inside, a native call that cannot be converted (`UnsupportedComputerAction`) is the
    reply's `ResponseDecodeError`: the reply cannot be read, and no action of it runs."""
    try:
        yield
    except UnsupportedComputerAction as exc:
        raise ResponseDecodeError(
            f"cannot convert {what}: {exc}", provider=provider, model=model
        ) from exc


def safety_notes(checks: Sequence[tuple[str, str, str]]) -> list[str]:
    """One line per pending safety check for the reply's thought."""
    return [
        f"Pending safety check {code or check_id}: {message} (not acknowledged; "
        "the flagged action is not performed)"
        for check_id, code, message in checks
    ]


__all__ = [
    "ACTION_SPACES",
    "DEFAULT_DISPLAY",
    "answer_screenshot",
    "answering",
    "bounded",
    "check_action_space",
    "converting",
    "display_size",
    "latest_screenshot",
    "native_turn",
    "pixel_screen",
    "png_size",
    "safety_notes",
    "split_latest",
]
