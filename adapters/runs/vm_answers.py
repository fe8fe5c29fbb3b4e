"""What an OSWorld VM's server answers, read and checked: screenshots, trees, `/execute`.

Everything here comes off the wire from a desktop that may be hostile, so
each reader refuses what is not what OSWorld's server sends (a body that is
no PNG, a screen of impossible size, JSON that is not JSON, nesting too deep
to write back) with an `EnvironmentFailure` saying which call answered what.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, TypeGuard

from adapters._strict_json import _NotFinite, strict_loads
from adapters.errors import EnvironmentFailure
from adapters.runs.vm_http import VmUnanswered
from osharm_core import ConfigError
from osharm_core.errors import excerpt

#: The largest screen side accepted (pixels), given or read from a screenshot.
MAX_SCREEN_SIDE: Final = 16384
#: The deepest nesting of lists and objects kept from an `/execute` answer (OSWorld's is flat).
MAX_ANSWER_DEPTH: Final = 32
#: The most characters of an `/execute` answer's field a step's info keeps (64 Ki), and the
#: most fields: traj.jsonl stays small whatever a command prints.
MAX_INFO_TEXT: Final = 64 * 1024
MAX_INFO_FIELDS: Final = 8


class NotOk(EnvironmentFailure):
    """The VM's server answered with a status other than 200."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (NotOk, (str(self), self.status))


#: Statuses that say a command was not run: the server (or a proxy before it) is busy.
_BUSY: Final = frozenset({429, 503})


def any_failure(exc: Exception) -> bool:
    """Reading the desktop runs nothing on it: any failure may be tried again (as OSWorld does)."""
    return isinstance(exc, EnvironmentFailure)


def unrun(exc: Exception) -> bool:
    """A command is sent again only when it cannot have run: the request never reached the
    server, or the server said it is busy (503, 429). OSWorld's server answers 500 also when
    the command ran and failed after, so a 500 is not tried again (OSWorld's controller does)."""
    if isinstance(exc, NotOk):
        return exc.status in _BUSY
    return isinstance(exc, VmUnanswered) and not exc.sent


def read_png(body: bytes) -> bytes:
    """`GET /screenshot`'s body when it is a PNG."""
    if not body.startswith(b"\x89PNG\r\n\x1a\n"):
        raise EnvironmentFailure("GET /screenshot did not return a PNG")
    return body


def is_screen(size: object) -> TypeGuard[tuple[int, int]]:
    """Whether `size` is a (width, height) tuple of whole pixels in 1..`MAX_SCREEN_SIDE`."""
    return (
        isinstance(size, tuple)
        and len(size) == 2
        and all(type(n) is int and 1 <= n <= MAX_SCREEN_SIDE for n in size)
    )


def given_screen(size: tuple[int, int]) -> tuple[int, int]:
    """A `screen_size` argument, when `is_screen`; else a `ConfigError`."""
    if not is_screen(size):
        raise ConfigError(
            f"screen_size must be two ints in 1..{MAX_SCREEN_SIDE}; got {excerpt(size)}"
        )
    return size


def png_size(body: bytes) -> tuple[int, int]:
    """The width and height a PNG's header (its IHDR chunk) declares, when `is_screen`."""
    png = read_png(body)
    size = (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big"))
    if len(png) < 24 or png[12:16] != b"IHDR":
        raise EnvironmentFailure("GET /screenshot: the PNG has no IHDR header")
    if not is_screen(size):
        raise EnvironmentFailure(f"GET /screenshot: the screen would be {size!r} pixels")
    return size


def json_object(body: bytes) -> dict[str, Any] | None:
    """`body` read as a JSON object, else `None`."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return answer if isinstance(answer, dict) else None


def read_tree(body: bytes) -> str | None:
    """The accessibility tree in `GET /accessibility`'s `{"AT": xml}` (null when none)."""
    tree = (json_object(body) or {}).get("AT", False)
    if not isinstance(tree, str | None):
        raise EnvironmentFailure('GET /accessibility did not return {"AT": ...}')
    return tree


def nested_past(value: object, limit: int) -> bool:
    """Whether `value` nests lists (tuples) or dicts more than `limit` deep (or is cyclic)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def read_execute_answer(body: bytes) -> dict[str, Any]:
    """`/execute`'s answer as the step's info will hold it (traj.jsonl is strict JSON):
    numbers JSON cannot carry, and nesting past `MAX_ANSWER_DEPTH` (which writing it, from
    deeper in the stack, might not take), are refused like text that is not JSON."""
    try:
        answer = strict_loads(body)
    except (ValueError, RecursionError) as exc:  # _NotFinite too: it says which number
        why = f": {exc.reason}" if isinstance(exc, _NotFinite) else ""
        raise EnvironmentFailure(f"POST /execute did not return JSON{why}") from None
    if nested_past(answer, MAX_ANSWER_DEPTH):
        raise EnvironmentFailure(f"POST /execute: nested more than {MAX_ANSWER_DEPTH} levels")
    return answer if isinstance(answer, dict) else {"output": answer}


def kept_answer(answer: Mapping[str, Any]) -> dict[str, Any]:
    """An `/execute` answer as a step's info keeps it, small whatever the command printed.

    Each field (text, or another value's JSON) past `MAX_INFO_TEXT` characters keeps its
    head as text, its full length in `NAME_chars`; at most `MAX_INFO_FIELDS` fields are
    kept, names of at most 128 characters, and `fields_left_out` counts the rest.

    >>> kept_answer({"output": "x" * 70000, "returncode": 0})["output_chars"]
    70000
    """
    kept: dict[str, Any] = {}
    fields = left_out = 0
    for name, value in answer.items():
        if fields >= MAX_INFO_FIELDS or len(name) > 128:
            left_out += 1
            continue
        fields += 1
        text = value if isinstance(value, str) else json.dumps(value, allow_nan=False)
        if len(text) > MAX_INFO_TEXT:
            kept[f"{name}_chars"] = len(text)
            value = text[:MAX_INFO_TEXT]
        kept[name] = value
    if left_out:
        kept["fields_left_out"] = left_out
    return kept


__all__ = [
    "MAX_ANSWER_DEPTH",
    "MAX_INFO_FIELDS",
    "MAX_INFO_TEXT",
    "MAX_SCREEN_SIDE",
    "NotOk",
    "any_failure",
    "given_screen",
    "is_screen",
    "json_object",
    "kept_answer",
    "nested_past",
    "png_size",
    "read_execute_answer",
    "read_png",
    "read_tree",
    "unrun",
]
