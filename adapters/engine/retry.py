"""Retry policy: which failed model calls are tried again, and after how long.

The defaults are the reference agent's: a constant 30 s between tries, at most
10 tries, bad requests (HTTP 400) retried too. On top of that a `Retry-After`
the server sends is honoured when it asks for a longer wait (capped by
`max_retry_after`), and every call has a wall-clock deadline (`timeout`,
20 minutes by default) that its tries, waits and body reads share. The
decision is a pure function, `next_wait`; the client hands it to stamina as a
backoff hook, per call, with no global state.
"""

from __future__ import annotations

import email.utils
import functools
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from adapters._checks import flag_field
from adapters._wire import delta_seconds
from adapters.errors import BadRequestError, ModelCallError
from osharm_core.errors import ConfigError, is_finite_number, number_excerpt


def _positive_int(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"RetryPolicy.{attribute.name} must be an integer >= 1; got {number_excerpt(value)}"
        )


def _seconds(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None and attribute.name == "timeout":
        return
    if not is_finite_number(value) or value < 0:  # type: ignore[operator]
        raise ConfigError(
            f"RetryPolicy.{attribute.name} must be a finite number of seconds >= 0; "
            f"got {number_excerpt(value)}"
        )


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How a client retries: the reference's constant 30 s wait and 10 tries by default.

    `attempts` counts every HTTP try of one request (the first included);
    `retry_bad_request` retries HTTP 400 as the reference does;
    `honour_retry_after` waits as long as the server's `Retry-After` asks when
    that is longer than `wait`, but never more than `max_retry_after`;
    `timeout` is the wall-clock deadline of one call in seconds: every try,
    every wait and every body read together (no retry starts that would begin
    after it, a body still arriving when it passes is cut off with a
    `DeadlineExceededError`), counted from when a shared token budget admits the
    first try (see `adapters.engine.limits`). The default, 20 minutes, is never reached by
    the reference's own worst case of ten 30 s waits between normal replies;
    `None` removes the deadline (then only `attempts` bounds a call).

    >>> RetryPolicy()
    RetryPolicy(attempts=10, wait=30.0, retry_bad_request=True, honour_retry_after=True, max_retry_after=120.0, timeout=1200.0)
    """

    attempts: int = attrs.field(default=10, validator=_positive_int)
    wait: float = attrs.field(default=30.0, validator=_seconds)
    retry_bad_request: bool = attrs.field(default=True, validator=flag_field("RetryPolicy"))
    honour_retry_after: bool = attrs.field(default=True, validator=flag_field("RetryPolicy"))
    max_retry_after: float = attrs.field(default=120.0, validator=_seconds)
    timeout: float | None = attrs.field(default=1200.0, validator=_seconds)


#: One try only: every error propagates at once.
NO_RETRIES = RetryPolicy(attempts=1)


def is_retried(policy: RetryPolicy, error: BaseException) -> bool:
    """Whether `policy` tries again after `error`.

    >>> is_retried(RetryPolicy(retry_bad_request=False), BadRequestError("x", provider="p"))
    False
    """
    if isinstance(error, BadRequestError):
        return policy.retry_bad_request
    return isinstance(error, ModelCallError) and error.retryable


def next_wait(policy: RetryPolicy, error: BaseException) -> float | None:
    """Seconds to wait before the next try after `error`, or `None` when it is not retried.

    >>> from adapters.errors import RetryableError
    >>> next_wait(RetryPolicy(), RetryableError("busy", provider="p", retry_after=45.0))
    45.0
    >>> next_wait(RetryPolicy(), RetryableError("busy", provider="p", retry_after=5.0))
    30.0
    """
    if not is_retried(policy, error):
        return None
    wait = float(policy.wait)
    asked = getattr(error, "retry_after", None)
    if policy.honour_retry_after and asked is not None and asked > wait:
        wait = max(wait, min(float(asked), float(policy.max_retry_after)))
    return wait


def _backoff_hook(policy: RetryPolicy, deadline: float | None, error: Exception) -> bool | float:
    wait = next_wait(policy, error)
    if wait is None:
        return False
    if deadline is not None and time.monotonic() + wait >= deadline:
        if isinstance(error, ModelCallError):
            error.message += (
                f" (not retried: the wait would pass the call's {policy.timeout} s deadline)"
            )
            error.args = (error.message,)
        return False
    return wait


def stamina_arguments(policy: RetryPolicy, *, deadline: float | None = None) -> dict[str, Any]:
    """The keyword arguments for `stamina.retry_context` that apply `policy` to one call.

    The `on` hook returns the wait as a float, which stamina uses instead of
    its exponential backoff (and turns into 0 in its testing mode); it
    declines to retry when the wait would end past `deadline` (a
    `time.monotonic()` value).

    >>> from adapters.errors import RetryableError
    >>> args = stamina_arguments(RetryPolicy())
    >>> args["attempts"], args["timeout"], args["on"](RetryableError("x", provider="p"))
    (10, 1200.0, 30.0)
    """
    hook: Callable[[Exception], bool | float] = functools.partial(_backoff_hook, policy, deadline)
    return {"on": hook, "attempts": policy.attempts, "timeout": policy.timeout}


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds a `Retry-After` header value asks for (delta seconds or an HTTP date), else `None`.

    A date in the past gives 0; anything unreadable or out of range gives `None`.

    >>> parse_retry_after("7", datetime(2025, 1, 1, tzinfo=UTC))
    7.0
    >>> parse_retry_after("Wed, 01 Jan 2025 00:01:00 GMT", datetime(2025, 1, 1, tzinfo=UTC))
    60.0
    >>> parse_retry_after("soon", datetime(2025, 1, 1, tzinfo=UTC)) is None
    True
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    seconds = delta_seconds(text)
    if seconds is not None:
        return seconds
    when = _http_date(text)
    if when is None:
        return None
    try:
        return max(0.0, (when - now).total_seconds())
    except OverflowError:
        return None


def _http_date(text: str) -> datetime | None:
    """An HTTP date (UTC when it names no zone), or `None` when unreadable or out of range."""
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def reply_time(headers: Mapping[str, str], now: datetime) -> datetime:
    """When the server says it answered (the reply's `Date` header, lower-cased keys), else `now`:
    the clock a reply's own times (`Retry-After` dates, Anthropic's `-reset` times) are read by,
    so a skewed local clock does not matter."""
    server_date = headers.get("date")
    return (_http_date(server_date) if server_date else None) or now


def retry_after_from_headers(headers: Mapping[str, str], now: datetime) -> float | None:
    """The wait a reply's headers ask for: `retry-after-ms`, else `Retry-After`.

    An HTTP date is measured against the reply's own `Date` header when it has
    one (so a skewed local clock does not matter), else against `now`; the
    `Date` header is read only then. Unreadable or out-of-range values count
    as absent.

    >>> retry_after_from_headers({"retry-after-ms": "250"}, datetime(2025, 1, 1, tzinfo=UTC))
    0.25
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = parse_retry_after(lowered.get("retry-after-ms"), now)
    if millis is not None:
        return millis / 1000.0
    asked = lowered.get("retry-after")
    reference = now
    if asked is not None and _http_date(asked.strip()) is not None:
        reference = reply_time(lowered, now)
    return parse_retry_after(asked, reference)


__all__ = [
    "NO_RETRIES",
    "RetryPolicy",
    "is_retried",
    "next_wait",
    "parse_retry_after",
    "reply_time",
    "retry_after_from_headers",
    "stamina_arguments",
]
