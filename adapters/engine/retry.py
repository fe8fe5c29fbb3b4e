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
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import attrs

from adapters._wire import delta_seconds
from adapters.errors import BadRequestError, ModelCallError, ServerUnreachableError
from osharm_core.errors import is_finite_number, refusing, strict_int, true_or_false


def _finite(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not is_finite_number(value):
        raise ValueError(attribute.name)


_COUNT: Final = refusing("an integer >= 1", strict_int, attrs.validators.ge(1))
_SECONDS: Final = refusing("a finite number of seconds >= 0", _finite, attrs.validators.ge(0))
_SOME_SECONDS: Final = refusing(
    "a finite number of seconds >= 0 (or None)",
    attrs.validators.optional([_finite, attrs.validators.ge(0)]),
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

    attempts: int = attrs.field(default=10, validator=_COUNT)
    wait: float = attrs.field(default=30.0, validator=_SECONDS)
    retry_bad_request: bool = attrs.field(default=True, validator=true_or_false)
    honour_retry_after: bool = attrs.field(default=True, validator=true_or_false)
    max_retry_after: float = attrs.field(default=120.0, validator=_SECONDS)
    timeout: float | None = attrs.field(default=1200.0, validator=_SOME_SECONDS)


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


#: Connection refused, or a host name that does not resolve (`ServerUnreachableError`): tried
#: again at most this many times per request, `UNREACHABLE_WAIT` seconds apart (or the policy's
#: `wait`, when shorter), so a wrong port or host in a base URL fails within about a second.
UNREACHABLE_RETRIES: Final = 2
UNREACHABLE_WAIT: Final = 0.5


def next_wait(policy: RetryPolicy, error: BaseException) -> float | None:
    """Seconds to wait before the next try after `error`, or `None` when it is not retried.

    >>> from adapters.errors import RetryableError
    >>> next_wait(RetryPolicy(), RetryableError("busy", provider="p", retry_after=45.0))
    45.0
    >>> next_wait(RetryPolicy(), RetryableError("busy", provider="p", retry_after=5.0))
    30.0
    >>> next_wait(RetryPolicy(), ServerUnreachableError("refused", provider="p"))
    0.5
    """
    if not is_retried(policy, error):
        return None
    wait = float(policy.wait)
    if isinstance(error, ServerUnreachableError):
        return min(wait, UNREACHABLE_WAIT)
    asked = getattr(error, "retry_after", None)
    if policy.honour_retry_after and asked is not None and asked > wait:
        wait = max(wait, min(float(asked), float(policy.max_retry_after)))
    return wait


class _Backoff:
    """stamina's `on` hook for one request: `next_wait` as long as the wait ends before
    `deadline` (a `time.monotonic()` value), and an unreachable server retried at most
    `UNREACHABLE_RETRIES` times."""

    def __init__(self, policy: RetryPolicy, deadline: float | None) -> None:
        self.policy = policy
        self.deadline = deadline
        self.unreachable = 0

    def __call__(self, error: Exception) -> bool | float:
        wait = next_wait(self.policy, error)
        if wait is None or not isinstance(error, ModelCallError):
            return False
        if isinstance(error, ServerUnreachableError):
            self.unreachable += 1
            if self.unreachable > UNREACHABLE_RETRIES:
                return False
        if self.deadline is not None and time.monotonic() + wait >= self.deadline:
            error.message += (
                f" (not retried: the wait would pass the call's {self.policy.timeout} s deadline)"
            )
            error.args = (error.message,)
            return False
        return wait


def stamina_arguments(policy: RetryPolicy, *, deadline: float | None = None) -> dict[str, Any]:
    """The keyword arguments for `stamina.retry_context` that apply `policy` to one request.

    The `on` hook returns the wait as a float, which stamina uses instead of
    its exponential backoff (and turns into 0 in its testing mode); it
    declines to retry when the wait would end past `deadline` (a
    `time.monotonic()` value), and after `UNREACHABLE_RETRIES` retries of a
    server that is not there.

    >>> from adapters.errors import RetryableError
    >>> args = stamina_arguments(RetryPolicy())
    >>> args["attempts"], args["timeout"], args["on"](RetryableError("x", provider="p"))
    (10, 1200.0, 30.0)
    """
    hook: Callable[[Exception], bool | float] = _Backoff(policy, deadline)
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
    "UNREACHABLE_RETRIES",
    "UNREACHABLE_WAIT",
    "RetryPolicy",
    "is_retried",
    "next_wait",
    "parse_retry_after",
    "reply_time",
    "retry_after_from_headers",
    "stamina_arguments",
]
