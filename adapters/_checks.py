"""The adapters' argument checks, one of each, for constructors and entry points to call at once.

A flag must be `True` or `False` (`check_flag`, shared with the core: the string
"false" is truthy), a count (a step limit, workers) an int >= 1, and a path one that names
a place (`Path("")` is the current directory, which `overwrite` would empty).
Each raises a `ConfigError` naming the parameter and quoting the value.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from osharm_core.errors import ConfigError, check_flag, excerpt


def flag_field(owner: str) -> Any:
    """An attrs validator: the field must be `True` or `False` (see `check_flag`)."""

    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        check_flag(f"{owner}.{attribute.name}", value)

    return check


def positive_int(name: str, value: object) -> int:
    """`value` when it is an int >= 1 (not a bool), else a `ConfigError` naming `name`.

    >>> positive_int("max_steps", 15)
    15
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1; got {excerpt(value)}")
    return value


def path_argument(name: str, value: object) -> Path:
    """`value` as a `Path` when it is a str or path object naming a place, else a `ConfigError`
    naming `name`: an empty or whitespace-only string would be taken as the current directory.

    >>> path_argument("directory", " ")
    Traceback (most recent call last):
    ...
    osharm_core.errors.ConfigError: directory needs a path; got the empty path ' '
    """
    if not isinstance(value, str | os.PathLike):
        raise ConfigError(
            f"{name} must be a path (a str or os.PathLike); got {type(value).__name__} "
            f"{excerpt(value)}"
        )
    text = os.fspath(value)
    if not isinstance(text, str):
        raise ConfigError(f"{name} must be a str path; got {type(text).__name__} {excerpt(text)}")
    if not text.strip():
        raise ConfigError(f"{name} needs a path; got the empty path {excerpt(text)}")
    return Path(text)
