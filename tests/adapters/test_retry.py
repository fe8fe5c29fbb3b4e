"""The retry policy: which errors are retried and the waits it asks for."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters._wire import retry_after_seconds
from adapters.engine.retry import (
    NO_RETRIES,
    RetryPolicy,
    is_retried,
    next_wait,
    parse_retry_after,
    retry_after_from_headers,
    stamina_arguments,
)
from adapters.errors import (
    AuthenticationError,
    BadRequestError,
    ContextLengthError,
    ModelCallError,
    QuotaExceededError,
    ResponseDecodeError,
    RetryableError,
)
from osharm_core.errors import ConfigError
from tests import strategies as s

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


def test_defaults_are_the_reference_constant_30s_and_10_tries() -> None:
    """RetryPolicy() waits 30 s between at most 10 tries, retries 400s and honours Retry-After."""
    policy = RetryPolicy()
    assert (policy.attempts, policy.wait, policy.retry_bad_request, policy.honour_retry_after) == (
        10,
        30.0,
        True,
        True,
    )
    assert NO_RETRIES.attempts == 1


@pytest.mark.parametrize("field", ["retry_bad_request", "honour_retry_after"])
@pytest.mark.parametrize("value", ["false", 0, 1, None])
def test_the_policys_switches_take_only_a_bool(field: str, value: object) -> None:
    """retry_bad_request="false" was truthy and kept retrying 400s; now a ConfigError naming it."""
    with pytest.raises(ConfigError, match=f"RetryPolicy.{field} must be true or false; got"):
        RetryPolicy(**{field: value})  # type: ignore[arg-type]


def test_stamina_gets_the_policy_deadline_not_its_own_45_s() -> None:
    """stamina's own 45 s default limit is replaced: ten 30 s waits fit in the 20 min deadline."""
    args = stamina_arguments(RetryPolicy())
    assert (args["attempts"], args["timeout"]) == (10, 1200.0)
    assert stamina_arguments(RetryPolicy(timeout=90.0))["timeout"] == 90.0
    assert stamina_arguments(RetryPolicy(timeout=None))["timeout"] is None


@pytest.mark.parametrize(
    "kw",
    [
        {"attempts": 0},
        {"attempts": True},
        {"wait": -1},
        {"wait": float("nan")},
        {"timeout": -3},
        {"timeout": 10**400},
        {"wait": 10**400},
    ],
)
def test_invalid_policies_are_rejected(kw: dict[str, object]) -> None:
    """Zero attempts, negative or NaN waits and negative time limits raise ValueError."""
    with pytest.raises(ValueError, match="RetryPolicy"):
        RetryPolicy(**kw)  # type: ignore[arg-type]


def error(cls: type[ModelCallError], **kw: object) -> ModelCallError:
    """An error of `cls` from a test provider."""
    return cls("boom", provider="test", **kw)


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (error(RetryableError), True),
        (error(BadRequestError), True),
        (error(ContextLengthError), False),
        (error(AuthenticationError), False),
        (error(QuotaExceededError), False),
        (error(ResponseDecodeError), False),
        (error(ModelCallError), False),
        (ValueError("not ours"), False),
    ],
)
def test_which_errors_are_retried(exc: BaseException, retried: bool) -> None:
    """Retryable errors and (by default) bad requests are retried; nothing else is."""
    assert is_retried(RetryPolicy(), exc) is retried
    assert (next_wait(RetryPolicy(), exc) is not None) is retried


def test_bad_requests_are_not_retried_when_switched_off() -> None:
    """retry_bad_request=False lets a 400 propagate at once."""
    assert next_wait(RetryPolicy(retry_bad_request=False), error(BadRequestError)) is None


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [(None, 30.0), (5.0, 30.0), (45.0, 45.0), (500.0, 120.0)],
    ids=["absent", "shorter", "longer", "capped"],
)
def test_retry_after_is_honoured_only_when_longer_and_capped(
    retry_after: float | None, expected: float
) -> None:
    """A longer Retry-After replaces the 30 s wait, up to max_retry_after; a shorter one is ignored."""
    assert next_wait(RetryPolicy(), error(RetryableError, retry_after=retry_after)) == expected


def test_retry_after_can_be_ignored() -> None:
    """honour_retry_after=False keeps the constant wait whatever the server asks."""
    policy = RetryPolicy(honour_retry_after=False)
    assert next_wait(policy, error(RetryableError, retry_after=90.0)) == 30.0


@given(
    wait=st.floats(0, 100),
    cap=st.floats(0, 500),
    asked=st.none() | st.floats(0, 1e6),
)
def test_waits_stay_between_the_wait_and_the_cap(
    wait: float, cap: float, asked: float | None
) -> None:
    """The wait is never shorter than the policy's and never longer than max(wait, cap)."""
    policy = RetryPolicy(wait=wait, max_retry_after=cap)
    got = next_wait(policy, error(RetryableError, retry_after=asked))
    assert got is not None
    assert wait <= got <= max(wait, cap)


def test_stamina_hook_returns_the_wait_or_false() -> None:
    """The `on` hook given to stamina returns the computed wait, or False to stop."""
    hook = stamina_arguments(RetryPolicy(wait=2.5))["on"]
    assert hook(error(RetryableError)) == 2.5
    assert hook(error(AuthenticationError)) is False


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("12", 12.0),
        (" 0 ", 0.0),
        ("1.5", 1.5),
        ("-4", 0.0),
        ("Sun, 01 Jun 2025 12:00:30 GMT", 30.0),
        ("Sun, 01 Jun 2025 11:00:00 GMT", 0.0),
        ("", None),
        ("later", None),
        ("inf", None),
        (None, None),
    ],
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    """Retry-After is delta seconds or an HTTP date; the past is 0, junk is None."""
    assert parse_retry_after(value, NOW) == expected


@given(s.retry_after_values)
def test_parse_retry_after_never_raises(value: str) -> None:
    """Any header value gives a non-negative number of seconds or None."""
    got = parse_retry_after(value, NOW)
    assert got is None or got >= 0


def test_retry_after_dates_are_measured_from_the_servers_date() -> None:
    """An HTTP-date Retry-After is relative to the reply's Date header, not the local clock."""
    server_now = NOW + timedelta(hours=3)
    headers = {
        "Date": "Sun, 01 Jun 2025 15:00:00 GMT",
        "Retry-After": "Sun, 01 Jun 2025 15:00:20 GMT",
    }
    assert server_now.hour == 15
    assert retry_after_from_headers(headers, NOW) == 20.0


def test_retry_after_ms_wins_over_retry_after() -> None:
    """OpenAI's retry-after-ms header is read first, in milliseconds."""
    assert retry_after_from_headers({"retry-after-ms": "1500", "retry-after": "9"}, NOW) == 1.5
    assert retry_after_from_headers({"Retry-After": "9"}, NOW) == 9.0
    assert retry_after_from_headers({}, NOW) is None


# --- dates out of range (review finding 1) ---------------------------------------------

HUGE_YEAR = "Wed, 01 Jan 99999999999999999999 00:00:00 GMT"
HUGE_ZONE = "Wed, 01 Jan 2025 00:00:00 +99999999999999999999"
HUGE_HOUR = "Wed, 01 Jan 2025 99999999999999999999:00:00 GMT"


@pytest.mark.parametrize("value", [HUGE_YEAR, HUGE_ZONE, HUGE_HOUR])
def test_an_out_of_range_http_date_is_unreadable_not_an_overflow(value: str) -> None:
    assert parse_retry_after(value, NOW) is None
    assert retry_after_from_headers({"Retry-After": value}, NOW) is None
    assert retry_after_from_headers({"Retry-After": value, "Date": value}, NOW) is None


@pytest.mark.parametrize("date", [HUGE_YEAR, HUGE_ZONE, "not a date"])
def test_the_date_header_is_read_only_for_an_http_date_retry_after(date: str) -> None:
    """Delta seconds ignore the Date header; an unreadable Date falls back to the local clock."""
    assert retry_after_from_headers({"Date": date, "Retry-After": "5"}, NOW) == 5.0
    later = "Sun, 01 Jun 2025 12:00:30 GMT"
    assert retry_after_from_headers({"Date": date, "Retry-After": later}, NOW) == 30.0


@given(retry_after=s.hostile_http_dates | s.retry_after_values, date=s.hostile_http_dates)
def test_headers_with_any_dates_never_raise(retry_after: str, date: str) -> None:
    got = retry_after_from_headers({"Retry-After": retry_after, "Date": date}, NOW)
    assert got is None or got >= 0


@given(value=s.hostile_delta_seconds)
def test_providers_and_the_engine_read_delta_seconds_alike(value: str) -> None:
    """The wait a provider reads from `Retry-After` (Anthropic, Gemini) is the engine's reading:
    a finite number of seconds >= 0, or None for anything unreadable (inf, 1e999, nan), never a
    wait the 120 s cap has to catch."""
    seconds = retry_after_seconds({"Retry-After": value})
    assert seconds is None or (math.isfinite(seconds) and seconds >= 0)
    if seconds is not None:
        assert seconds == parse_retry_after(value, NOW)
