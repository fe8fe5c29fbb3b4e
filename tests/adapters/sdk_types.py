"""Strict conformance of a JSON value to a vendor SDK's request types (TypedDicts), for tests.

pydantic's `TypeAdapter` over the SDK's TypedDicts ignores keys they do not
declare and reads `Iterable` fields lazily, so a misspelt or extra field would
pass it. `problems` walks the type hints instead: every key must be declared,
every required key present, and every value of its declared type (a union
matching through any one member, a literal by value and type).
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any

import typing_extensions

_WRAPPERS = (typing_extensions.Required, typing_extensions.NotRequired, typing_extensions.ReadOnly)
_SCALARS: dict[Any, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    float: (int, float),
    bool: (bool,),
    type(None): (type(None),),
}
_ARRAYS = (list, collections.abc.Iterable, collections.abc.Sequence)
_OBJECTS = (dict, collections.abc.Mapping)


def problems(value: Any, annotation: Any, where: str = "body") -> list[str]:
    """What in `value` does not conform to `annotation` (empty when it all does)."""
    origin = typing_extensions.get_origin(annotation)
    args = typing_extensions.get_args(annotation)
    if annotation in (Any, object):
        return []
    if origin in _WRAPPERS or origin is typing_extensions.Annotated:
        return problems(value, args[0], where)
    if origin in (typing.Union, types.UnionType):
        return _union(value, args, where)
    if origin is typing_extensions.Literal or origin is typing.Literal:
        matched = any(value == a and type(value) is type(a) for a in args)
        return [] if matched else [f"{where}: {value!r} is not one of {args}"]
    if typing_extensions.is_typeddict(annotation):
        return _typed_dict(value, annotation, where)
    if origin in _ARRAYS:
        if not isinstance(value, list):
            return [f"{where}: expected an array, got {type(value).__name__}"]
        return [p for i, item in enumerate(value) for p in problems(item, args[0], f"{where}[{i}]")]
    if origin in _OBJECTS or annotation in (dict, typing.Dict):  # noqa: UP006
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {type(value).__name__}"]
        inner = args[1] if args else Any
        return [p for k, v in value.items() for p in problems(v, inner, f"{where}.{k}")]
    if annotation in _SCALARS:
        kinds = _SCALARS[annotation]
        ok = isinstance(value, kinds) and (annotation is bool or not isinstance(value, bool))
        return [] if ok else [f"{where}: expected {annotation.__name__}, got {value!r}"]
    return (
        []
        if isinstance(origin or annotation, type) and isinstance(value, origin or annotation)
        else [f"{where}: cannot check {annotation!r} against {value!r}"]
    )


def _union(value: Any, members: tuple[Any, ...], where: str) -> list[str]:
    found = [problems(value, member, where) for member in members]
    if any(not p for p in found):
        return []
    kind = value.get("type") if isinstance(value, dict) else None
    typed = [
        p
        for member, p in zip(members, found, strict=True)
        if typing_extensions.is_typeddict(member) and kind in _literal_types(member)
    ]
    return min(typed or found, key=len)


def _literal_types(typed_dict: Any) -> tuple[Any, ...]:
    hint = typing_extensions.get_type_hints(typed_dict).get("type")
    return typing_extensions.get_args(hint) if hint is not None else ()


def _typed_dict(value: Any, annotation: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected an object ({annotation.__name__}), got {value!r}"]
    hints = typing_extensions.get_type_hints(annotation, include_extras=True)
    found = [f"{where}: {annotation.__name__} has no field {k!r}" for k in value if k not in hints]
    found += [
        f"{where}: {annotation.__name__} needs {k!r}"
        for k in sorted(annotation.__required_keys__ - set(value))
    ]
    for key, item in value.items():
        if key in hints:
            found += problems(item, hints[key], f"{where}.{key}")
    return found


__all__ = ["problems"]
