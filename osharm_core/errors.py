"""The typed errors of osharm-core: one base class, a few precise kinds.

```
OsharmError
├── ConfigError (ValueError)          a setting or argument outside what it allows
├── ObservationError (ValueError)     an observation lacks what its type needs, or is malformed
│   ├── AccessibilityTreeError        not well-formed XML, or hostile (DTDs, entities, codecs)
│   └── ScreenshotError               not a PNG, truncated, or too many pixels
├── StateError (ValueError)           an AgentState whose turns do not line up
├── ActionParseError (ValueError)     a reply holds no readable action (carried in a Failure)
├── RankFileError (ValueError)        the tokenizer's rank file is not the published one
└── RequestBudgetError (ValueError)   a request cannot be made to fit its server's limits
```

Parse failures of model replies are values (`returns.result.Failure`), not
exceptions; `ActionParseError` is what those failures carry. The adapters add
their branches (model calls, safety, trajectories) under the same base; see
`adapters.errors` for the whole tree. Every class is a `ValueError` where the
reference raised one.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

import attrs


def excerpt(value: object, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters (ending in `...`): how an error message quotes
    a value it was given, however large or hostile.

    >>> excerpt("x" * 100, 10)
    "'xxxxxx..."
    """
    text = _repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def number_excerpt(value: object) -> str:
    """`repr(value)`, or its start and its length when over 40 characters: how an error
    message quotes a number it was given (a hostile one may have thousands of digits).

    >>> number_excerpt(12), number_excerpt(10**400)
    ('12', '10000000000000000000...(401 characters)')
    """
    text = _repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def quoted_keys(keys: Iterable[object], limit: int = 10) -> str:
    """Keys as an error message lists them, whatever their types: each quoted by `excerpt`,
    sorted by that quote, at most `limit` of them (then how many more).

    >>> quoted_keys({"b", 1, None})
    "'b', 1, None"
    """
    quoted = []
    for key in keys:
        try:
            quoted.append(excerpt(key, 40))
        except RecursionError:
            quoted.append(f"<a {type(key).__name__} nested too deeply to quote>")
    quoted.sort()
    more = len(quoted) - limit
    return ", ".join(quoted[:limit]) + (f" and {more} more" if more > 0 else "")


def is_finite_number(value: object) -> bool:
    """Whether `value` is an int or float a float can hold: not a bool, NaN, an infinity, or an
    int too large for a float (JSON and argparse take integers of hundreds of digits).

    >>> is_finite_number(3), is_finite_number(2.5), is_finite_number(float("nan"))
    (True, True, False)
    >>> is_finite_number(10**400), is_finite_number(True), is_finite_number("1")
    (False, False, False)
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_flag(name: str, value: object) -> bool:
    """`value` when it is `True` or `False`, else a `ConfigError` naming `name` and quoting
    the value: a flag read by truthiness would take the string "false" for true.

    >>> check_flag("overwrite", False)
    False
    >>> check_flag("overwrite", "false")
    Traceback (most recent call last):
    ...
    osharm_core.errors.ConfigError: overwrite must be true or false; got str 'false'
    """
    if not isinstance(value, bool):
        raise ConfigError(
            f"{name} must be true or false; got {type(value).__name__} {excerpt(value)}"
        )
    return value


def _count(value: object) -> bool:
    """Whether `value` is an integer >= 1 (numpy's too), not a bool."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return False
    return int(value) >= 1


def items_of(value: object) -> tuple[object, ...] | None:
    """`value`'s items when it is a sequence (a list, a tuple, a numpy array), else `None`
    (a string, bytes, a mapping, a scalar).

    >>> items_of([1, 2]), items_of("12"), items_of({"a": 1})
    ((1, 2), None, None)
    """
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        return None
    try:
        return tuple(value)
    except TypeError:  # iterable by type, not by value (a 0-d array)
        return None


def check_size(name: str, value: object) -> tuple[int, int]:
    """`value` as a `(width, height)` pair (a tuple, a list, an array) of integers >= 1
    (numpy's too, given back as ints), else a `ConfigError` naming `name` and quoting it.

    >>> check_size("screen_size", [1920, 1080])
    (1920, 1080)
    """
    pair = items_of(value) or ()
    if len(pair) != 2 or not all(_count(v) for v in pair):
        raise ConfigError(
            f"{name} must be a (width, height) pair of ints >= 1; got {excerpt(value)}"
        )
    return int(pair[0]), int(pair[1])  # type: ignore[call-overload]


def _repr(value: object) -> str:
    # Python refuses to write an int of more than 4,300 digits (about 14,284 bits) as text.
    if isinstance(value, int) and value.bit_length() > 14_000:
        return f"<an integer of {value.bit_length()} bits>"
    try:
        text = repr(value)
    except RecursionError:
        raise  # too deep to quote: callers say so in their own words
    except Exception:  # a caller's object whose __repr__ raises
        return f"<unprintable {type(value).__name__}>"
    return text if isinstance(text, str) else f"<unprintable {type(value).__name__}>"


class OsharmError(Exception):
    """Base class of every error raised by osharm-core."""


class ConfigError(OsharmError, ValueError):
    """An `AgentConfig` field, or an argument, holds a value outside what it allows."""


class ObservationError(OsharmError, ValueError):
    """An observation lacks what its observation type needs, or holds malformed data."""


class AccessibilityTreeError(ObservationError):
    """An accessibility tree is not well-formed XML, or is hostile (entities, DTDs)."""


class ScreenshotError(ObservationError):
    """A screenshot is not a PNG, is truncated, or claims more pixels than allowed."""


class StateError(OsharmError, ValueError):
    """An `AgentState` was built with observations, actions and thoughts of different lengths."""


class ActionParseError(OsharmError, ValueError):
    """A model reply holds no action that can be read (carried inside a `Failure`)."""


class RankFileError(OsharmError, ValueError):
    """The tokenizer rank file is not the expected one, or cannot be read."""


class RequestBudgetError(OsharmError, ValueError):
    """A request cannot be made to fit its server's limits, even after every degradation step.

    `limit` names the `ServerLimits` field broken (`max_bytes`, `max_images`,
    `max_input_tokens`), `value` what the smallest request still measured,
    `maximum` the limit.
    """

    def __init__(self, message: str, *, limit: str, value: int, maximum: int) -> None:
        self.limit = limit
        self.value = value
        self.maximum = maximum
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_budget_error, (str(self), self.limit, self.value, self.maximum))


def _budget_error(message: str, limit: str, value: int, maximum: int) -> RequestBudgetError:
    return RequestBudgetError(message, limit=limit, value=value, maximum=maximum)


Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]
_Built = TypeVar("_Built")


def refusing(
    requirement: str, *validators: Validator, error: type[OsharmError] = ConfigError
) -> Validator:
    """An attrs validator composed of `validators` (from `attrs.validators`, or any callable
    of that shape) whose every refusal is an `error` (a `ConfigError` unless told) saying
    `Owner.field must be {requirement}` and quoting the value by `excerpt` (an int by
    `number_excerpt`, which gives its length): attrs' own
    messages quote the whole `repr`, which a hostile value can make huge (or, for an int of
    5,000 digits, raise).

    >>> @attrs.frozen
    ... class Limits:
    ...     steps: int = attrs.field(validator=refusing("an int >= 1", strict_int, attrs.validators.ge(1)))
    >>> Limits(0)
    Traceback (most recent call last):
    ...
    osharm_core.errors.ConfigError: Limits.steps must be an int >= 1; got 0
    """
    composed = attrs.validators.and_(*validators)

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        try:
            composed(instance, attribute, value)
        except (TypeError, ValueError):
            owner = f"{type(instance).__name__}.{attribute.name}"
            got = number_excerpt(value) if type(value) is int else excerpt(value)
            raise error(f"{owner} must be {requirement}; got {got}") from None

    return check


def one_of(allowed: tuple[str, ...]) -> Validator:
    """An attrs validator refusing (see `refusing`) any value but those `allowed`."""
    return refusing(f"one of {', '.join(allowed)}", attrs.validators.in_(allowed))


def strict_int(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: an `int` that is not a `bool` (`True` is an int to Python)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(attribute.name)


def strict_bool(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: `True` or `False`, not a truthy string such as "false"."""
    if not isinstance(value, bool):
        raise TypeError(attribute.name)


#: An attrs validator: `True` or `False`, refused as a `ConfigError` naming the field.
true_or_false: Final[Validator] = refusing("true or false", strict_bool)

#: An attrs validator: a real number (an int or a float), not a `bool`.
strict_number: Final[Validator] = attrs.validators.and_(
    attrs.validators.instance_of((int, float)),
    attrs.validators.not_(attrs.validators.instance_of(bool)),
)


def from_fields(cls: type[_Built], data: object) -> _Built:
    """`cls(**data)` for an attrs class and a mapping of its fields (a JSON object); a
    `ConfigError` says what is wrong: not a mapping, unknown or missing fields, a bad value
    nested too deeply to quote (the class's own validators name any other bad value).

    >>> @attrs.frozen
    ... class Limits:
    ...     steps: int
    >>> from_fields(Limits, {"steps": 2, "pace": 1})
    Traceback (most recent call last):
    ...
    osharm_core.errors.ConfigError: Limits.from_json: unknown field(s) 'pace'
    """
    name = f"{cls.__name__}.from_json"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{name} expects an object; got {type(data).__name__}")
    unknown = set(data) - {field.name for field in attrs.fields(cls)}  # type: ignore[arg-type]
    if unknown:
        raise ConfigError(f"{name}: unknown field(s) {quoted_keys(unknown)}")
    try:
        return cls(**data)
    except RecursionError:  # quoting a deeply nested bad value
        raise ConfigError(f"{name}: a field's value is nested too deeply") from None
    except TypeError as exc:  # a required field missing
        raise ConfigError(f"{name}: {exc}") from None
