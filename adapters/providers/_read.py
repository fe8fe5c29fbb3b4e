"""Readers for JSON that came off the wire: each answers with a value of the type asked for.

A provider's reply is untrusted JSON. Instead of testing every field's type
where it is used, a decoder reads it through these: a field of the wrong
type reads as absent (`None`, an empty mapping or list), and the decoder
refuses what it cannot do without, in its own words.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})


def obj(value: object) -> Mapping[str, Any]:
    """`value` if it is a JSON object, else an empty one.

    >>> obj({"a": 1})["a"], dict(obj([1]))
    (1, {})
    """
    return value if isinstance(value, Mapping) else _EMPTY


def items(value: object) -> list[Any]:
    """`value` if it is a JSON array, else an empty one.

    >>> items([1, 2]), items("12")
    ([1, 2], [])
    """
    return value if isinstance(value, list) else []


def objects(value: object) -> list[Mapping[str, Any]]:
    """The JSON objects of an array (other elements skipped; not an array: none).

    >>> objects([{"a": 1}, 2, None])
    [{'a': 1}]
    """
    return [item for item in items(value) if isinstance(item, Mapping)]


def text(value: object) -> str | None:
    """`value` if it is a non-empty string, else `None`.

    >>> text("end_turn"), text(""), text(7)
    ('end_turn', None, None)
    """
    return value if isinstance(value, str) and value else None


def dig(value: object, *path: str | int) -> Any:
    """The value at `path` (object keys, array indexes) inside `value`; `None` where it breaks off.

    >>> dig({"candidates": [{"content": {"parts": [1]}}]}, "candidates", 0, "content", "parts")
    [1]
    >>> dig({"candidates": []}, "candidates", 0, "content") is None
    True
    """
    for step in path:
        if isinstance(step, int):
            array = items(value)
            value = array[step] if -len(array) <= step < len(array) else None
        else:
            value = obj(value).get(step)
    return value


__all__ = ["dig", "items", "obj", "objects", "text"]
