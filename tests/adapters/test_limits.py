"""The shared rate limiter: its decisions on a fake clock, hostile headers, and workers against a 429 server."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.contract import ModelRequest
from adapters.engine.client import HttpModelClient
from adapters.engine.limits import (
    ESTIMATE_WINDOW,
    HOLD_LIFETIME,
    TOKEN_SLICE,
    RateLimiter,
    parse_duration,
    parse_reset_time,
)
from adapters.engine.retry import NO_RETRIES, RetryPolicy
from adapters.errors import ModelCallError, RateLimitWaitError, RetryableError
from adapters.registry import REGISTRY
from osharm_core import ConfigError, Message, TextPart
from tests import strategies as s
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import TIMEOUT, call
from tests.adapters.loopback import LoopbackServer, Received, Reply, chat_completion, openai_error

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
REQUEST = ModelRequest(model="gpt-4o", messages=(Message("user", (TextPart("hi"),)),))


def loopback_client(model: str, base_url: str, **options: Any) -> HttpModelClient:
    """A client of the loopback server through the registry, which passes `limiter` on."""
    client = REGISTRY.client_for(
        model, base_url=base_url, api_key=FAKE_KEY, timeout=TIMEOUT, **options
    )
    assert isinstance(client, HttpModelClient)
    return client


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def limiter(clock: Clock, **kw: float) -> RateLimiter:
    return RateLimiter(clock=clock, now=lambda: NOW, **kw)


def test_turns_are_paced_at_the_configured_rate_after_a_burst() -> None:
    clock = Clock()
    rl = limiter(clock, requests_per_minute=120, burst=2)
    assert [rl.reserve() for _ in range(4)] == [0.0, 0.0, 0.5, 1.0]
    clock.t += 1.0
    assert rl.reserve() == 0.5
    assert rl.waits == 3


def admitted_after(rl: RateLimiter, clock: Clock, deadline: float | None = None) -> float:
    """Seconds a caller asking `admit` again after each wait it is told (a slice at most)
    spends before it is admitted; the clock moves with it."""
    start = clock.t
    for _ in range(100_000):
        wait = rl.admit(deadline=deadline)
        if wait == 0:
            return clock.t - start
        assert 0 < wait <= TOKEN_SLICE
        clock.t += wait
    raise AssertionError("never admitted")


def test_tokens_per_minute_hold_calls_while_the_budget_is_in_debt() -> None:
    clock = Clock()
    rl = limiter(clock, tokens_per_minute=600)  # 10 tokens a second, 10 at once
    assert rl.admit() == 0.0
    rl.observe(200, {}, tokens=30)  # 20 in debt
    assert rl.admit() == TOKEN_SLICE  # asked again after a slice, not told to sleep 2 s
    assert admitted_after(rl, clock) == pytest.approx(2.0)
    assert rl.reserve() == 0.0  # the turn itself does not wait for tokens


def test_a_429_pauses_every_caller_until_the_reset_it_names() -> None:
    clock = Clock()
    rl = limiter(clock)
    assert rl.reserve() == 0.0
    rl.observe(429, {"retry-after": "7"})
    assert rl.hold() == 7.0
    assert rl.reserve() == 7.0
    clock.t += 7.0
    assert (rl.hold(), rl.reserve()) == (0.0, 0.0)


def test_openai_budget_headers_at_zero_pause_until_the_reset_duration() -> None:
    clock = Clock()
    rl = limiter(clock)
    rl.observe(200, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m30s"})
    assert rl.hold() == 90.0
    rl2 = limiter(clock)
    rl2.observe(200, {"x-ratelimit-remaining-requests": "12", "x-ratelimit-reset-requests": "6m0s"})
    assert rl2.hold() == 0.0


def test_anthropic_budget_headers_pause_until_the_rfc3339_reset() -> None:
    clock = Clock()
    rl = limiter(clock)
    rl.observe(
        429,
        {
            "anthropic-ratelimit-tokens-remaining": "0",
            "anthropic-ratelimit-tokens-reset": "2025-06-01T12:00:45Z",
            "anthropic-ratelimit-requests-remaining": "50",
        },
    )
    assert rl.hold() == 45.0


@pytest.mark.parametrize("skew", [-300.0, 0.0, 300.0])
def test_anthropic_reset_times_are_read_by_the_replys_own_clock(skew: float) -> None:
    """A local clock 5 minutes off the server's neither stretches a 10 s reset to the cap nor
    ignores an exhausted budget: the reply's `Date` is the reference, as for Retry-After."""
    clock = Clock()
    local = NOW.timestamp() + skew
    rl = RateLimiter(clock=clock, now=lambda: datetime.fromtimestamp(local, UTC))
    rl.observe(
        200,
        {
            "date": "Sun, 01 Jun 2025 12:00:00 GMT",
            "anthropic-ratelimit-tokens-remaining": "0",
            "anthropic-ratelimit-tokens-reset": "2025-06-01T12:00:10Z",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "2025-06-01T12:00:10Z",
        },
    )
    assert rl.hold() == 10.0
    assert rl.reserve() == 10.0


def test_honest_usage_from_many_workers_is_all_charged() -> None:
    """Concurrent replies' usage adds up past `max_pause` (a bound on the total debt let ten
    workers run at 2.4x the configured rate, and `max_pause=0` switched the budget off)."""
    for max_pause in (120.0, 0.0):
        clock = Clock()
        rl = limiter(clock, tokens_per_minute=60_000, max_pause=max_pause)
        for _ in range(10):
            rl.observe(200, {}, tokens=30_000)
        assert admitted_after(rl, clock) == pytest.approx(5 * 60 - 1, abs=1.0)


def test_a_429_that_says_nothing_pauses_the_fallback() -> None:
    clock = Clock()
    rl = limiter(clock, fallback_pause=2.5)
    rl.observe(429, {"retry-after": "garbage"})
    assert rl.hold() == 2.5


def test_pauses_are_capped() -> None:
    clock = Clock()
    rl = limiter(clock, max_pause=30)
    rl.observe(429, {"retry-after": "1e300", "x-ratelimit-reset-requests": "9999h"})
    assert rl.hold() == 30.0


def test_a_wait_past_the_deadline_is_a_typed_error_and_gives_the_turn_back() -> None:
    clock = Clock()
    rl = limiter(clock, requests_per_minute=60)
    assert rl.reserve() == 0.0
    with pytest.raises(RateLimitWaitError, match="past the call's deadline"):
        rl.reserve(deadline=clock.t + 0.5)
    assert rl.reserve(deadline=clock.t + 1.5) == 1.0


def test_durations_and_reset_times() -> None:
    assert parse_duration("1h2m3.5s") == 3723.5
    assert parse_duration("250ms") == 0.25
    for bad in ("", "-1", "nan", "inf", "6x", "s", "1e999", "ms"):
        assert parse_duration(bad) is None, bad
    assert parse_reset_time("2025-06-01T11:00:00+00:00", NOW) == 0.0
    assert parse_reset_time("0001-01-01T00:00:00", NOW) == 0.0
    assert parse_reset_time("9999-12-31T23:59:59Z", NOW) is not None


def test_bad_settings_are_config_errors() -> None:
    for kw in (
        {"requests_per_minute": 0},
        {"tokens_per_minute": -5},
        {"requests_per_minute": math.inf},
        {"max_pause": math.nan},
        {"burst": -1},
        {"requests_per_minute": 10**400},
        {"tokens_per_minute": 10**400},
        {"max_pause": 10**400},
    ):
        with pytest.raises(ConfigError):
            RateLimiter(**kw)  # type: ignore[arg-type]


@given(
    status=st.sampled_from([200, 429, 500]),
    headers=s.rate_limit_headers(),
    tokens=st.one_of(st.none(), st.integers(-(10**12), 10**12), s.hostile_token_counts),
)
def test_hostile_headers_never_raise_and_never_pause_past_the_cap(
    status: int, headers: dict[str, str], tokens: int | None
) -> None:
    clock = Clock()
    rl = limiter(clock, requests_per_minute=600, tokens_per_minute=6000, max_pause=60)
    rl.observe(status, headers, tokens)
    assert 0.0 <= rl.hold() <= 60.0
    wait = rl.reserve()
    assert math.isfinite(wait)
    assert wait >= 0.0


# --- workers against a server that answers 429 above a set rate ---------------------------


class RateLimitedRoute:
    """A chat route that allows `rate` requests a second (bursts of `burst`), else 429.

    Each reply carries OpenAI's budget headers as the server sees them (the
    reset is when the budget is full again, as OpenAI documents it).
    """

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.level, self.at = burst, time.monotonic()
        self.lock = threading.Lock()
        self.accepted = self.refused = 0

    def __call__(self, received: Received) -> Reply:
        with self.lock:
            now = time.monotonic()
            self.level = min(self.burst, self.level + (now - self.at) * self.rate)
            self.at = now
            ok = self.level >= 1
            if ok:
                self.level -= 1
                self.accepted += 1
            else:
                self.refused += 1
            reset = f"{(self.burst - self.level) / self.rate * 1000:.0f}ms"
            headers = {
                "x-ratelimit-remaining-requests": str(int(self.level)),
                "x-ratelimit-reset-requests": reset,
            }
        if ok:
            return Reply(200, chat_completion("ok"), headers=headers)
        reply = openai_error(429, "Rate limit reached for requests", code="rate_limit_exceeded")
        return Reply(429, reply.body, headers={**reply.headers, **headers})


@pytest.fixture
def limited() -> Iterator[tuple[LoopbackServer, RateLimitedRoute]]:
    route = RateLimitedRoute(rate=60.0, burst=6.0)
    with LoopbackServer() as server:
        server.route("POST", r".*/chat/completions", route)
        yield server, route


def _workers(base_url: str, limiter: RateLimiter | None, workers: int, calls: int) -> None:
    policy = RetryPolicy(attempts=200, wait=0.01, timeout=30.0)
    client = loopback_client("compat/m", base_url + "/v1", retry=policy, limiter=limiter)

    async def worker() -> None:
        for _ in range(calls):
            assert (await client.acomplete(REQUEST)).text == "ok"

    async def main() -> None:
        try:
            await asyncio.gather(*(worker() for _ in range(workers)))
        finally:
            await client.aclose()

    asyncio.run(main())


def test_without_a_limiter_concurrent_workers_hit_many_429s(
    limited: tuple[LoopbackServer, RateLimitedRoute],
) -> None:
    server, route = limited
    _workers(server.base_url, None, workers=12, calls=5)
    assert route.accepted == 60
    assert route.refused > 30


def test_with_a_shared_limiter_concurrent_workers_get_almost_no_429s(
    limited: tuple[LoopbackServer, RateLimitedRoute],
) -> None:
    server, route = limited
    # Half the server's rate: a stalled event loop that then sends a bunch (at most the
    # limiter's burst of 5) still finds the server's bucket refilled, on a busy machine too.
    shared = RateLimiter(requests_per_minute=0.5 * 60 * 60, burst=5)
    _workers(server.base_url, shared, workers=12, calls=5)
    assert route.accepted == 60
    assert route.refused <= 2
    assert shared.waits > 0


def test_headers_alone_make_workers_back_off_together(
    limited: tuple[LoopbackServer, RateLimitedRoute],
) -> None:
    """No configured rate: the server's budget headers and 429s pause everyone."""
    server, route = limited
    _workers(server.base_url, None, workers=12, calls=5)
    unlimited = route.refused
    route.accepted = route.refused = 0
    time.sleep(0.2)  # let the server's bucket refill
    shared = RateLimiter()
    _workers(server.base_url, shared, workers=12, calls=5)
    assert route.accepted == 60
    # Fewer 429s than without it. Not "half": without a rate to space them, workers a pause
    # held go together when it ends, and the baseline itself falls on a loaded machine
    # (measured 68-220 without, 39-57 with).
    assert route.refused < unlimited
    assert shared.pauses > 0


def test_the_sync_shell_waits_for_its_turn_and_learns_from_429s(server: LoopbackServer) -> None:
    server.enqueue(
        Reply(429, openai_error(429, "slow down").body, headers={"retry-after-ms": "30"}),
        Reply(200, chat_completion("ok")),
    )
    shared = RateLimiter(requests_per_minute=6000)
    policy = RetryPolicy(attempts=3, wait=0.0, timeout=10.0)
    with loopback_client("compat/m", server.base_url + "/v1", retry=policy, limiter=shared) as c:
        assert c.complete(REQUEST).text == "ok"
    assert shared.pauses == 1
    assert len(server.requests) == 2


def test_a_pause_past_the_deadline_is_not_sent(server: LoopbackServer) -> None:
    shared = RateLimiter()
    shared.observe(429, {"retry-after": "60"})
    policy = RetryPolicy(attempts=3, wait=0.0, timeout=5.0)
    with (
        loopback_client("compat/m", server.base_url + "/v1", retry=policy, limiter=shared) as c,
        pytest.raises(RateLimitWaitError, match="deadline"),
    ):
        c.complete(REQUEST)
    assert server.requests == []


GEMINI_429 = {
    "error": {
        "code": 429,
        "status": "RESOURCE_EXHAUSTED",
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"},
        ],
    }
}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_wait_named_in_the_body_pauses_the_other_workers(
    server: LoopbackServer, mode: str
) -> None:
    """Gemini's 429 names its wait in the body (RetryInfo.retryDelay), not a header: the shared
    limiter pauses every worker that long, not the 1 s fallback."""
    server.enqueue(Reply(429, GEMINI_429))
    clock = Clock()
    shared = limiter(clock)
    client = loopback_client("gemini-2.5-flash", server.base_url, retry=NO_RETRIES, limiter=shared)
    with pytest.raises(RetryableError) as caught:
        call(client, ModelRequest(model="gemini-2.5-flash", messages=REQUEST.messages), mode)
    assert caught.value.retry_after == 37.0
    assert shared.reserve() == pytest.approx(37.0)


def test_a_header_wait_still_wins_over_the_body(server: LoopbackServer) -> None:
    """When the headers name a wait, the limiter follows them as before."""
    server.enqueue(Reply(429, GEMINI_429, headers={"retry-after": "5"}))
    clock = Clock()
    shared = limiter(clock)
    client = loopback_client("gemini-2.5-flash", server.base_url, retry=NO_RETRIES, limiter=shared)
    with pytest.raises(RetryableError):
        call(client, ModelRequest(model="gemini-2.5-flash", messages=REQUEST.messages), "sync")
    assert shared.reserve() == pytest.approx(5.0)


def test_a_huge_wait_named_in_the_body_pauses_the_other_workers_the_longest_allowed(
    server: LoopbackServer,
) -> None:
    """A finite body wait whose milliseconds would overflow (1e306 s) pauses the limiter its
    longest, as the same wait in a header does, not the 1 s fallback."""
    huge = {"error": {**GEMINI_429["error"], "details": [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1" + "0" * 306 + "s"},
    ]}}  # fmt: skip
    server.enqueue(Reply(429, huge))
    shared = limiter(Clock(), max_pause=120)
    client = loopback_client("gemini-2.5-flash", server.base_url, retry=NO_RETRIES, limiter=shared)
    with pytest.raises(RetryableError):
        call(client, ModelRequest(model="gemini-2.5-flash", messages=REQUEST.messages), "sync")
    assert shared.reserve() == pytest.approx(120.0)


# --- dates out of range (review finding 1) ---------------------------------------------


@given(retry_after=s.hostile_http_dates, date=s.hostile_http_dates)
def test_a_429_with_out_of_range_dates_pauses_the_fallback(retry_after: str, date: str) -> None:
    clock = Clock()
    rl = limiter(clock, fallback_pause=3.0, max_pause=60)
    rl.observe(429, {"retry-after": retry_after, "date": date})
    assert 0.0 <= rl.hold() <= 60.0


HOSTILE_DATES = [
    {"retry-after": "Wed, 01 Jan 99999999999999999999 00:00:00 GMT"},
    {"retry-after": "Wed, 01 Jan 2025 00:00:00 +99999999999999999999"},
    {"retry-after": "0", "date": "Wed, 01 Jan 99999999999999999999 00:00:00 GMT"},
]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("headers", HOSTILE_DATES, ids=["year", "zone", "date-header"])
def test_a_reply_with_out_of_range_dates_is_retried_like_any_other(
    server: LoopbackServer, mode: str, status: int, headers: dict[str, str]
) -> None:
    """No OverflowError escapes the client or the shared limiter: the call retries and succeeds."""
    server.enqueue(
        Reply(status, openai_error(status, "busy").body, headers=headers),
        Reply(200, chat_completion("ok")),
    )
    shared = RateLimiter(fallback_pause=0.0)
    policy = RetryPolicy(attempts=3, wait=0.0, timeout=10.0)
    client = loopback_client("compat/m", server.base_url + "/v1", retry=policy, limiter=shared)
    assert call(client, REQUEST, mode).tries == 2


# --- after a pause or token debt (review finding 2) -----------------------------------------


def test_turns_taken_during_a_pause_are_spaced_after_it() -> None:
    clock = Clock()
    rl = limiter(clock, requests_per_minute=60)
    rl.observe(429, {"retry-after": "10"})
    assert [rl.reserve() for _ in range(5)] == [10.0, 11.0, 12.0, 13.0, 14.0]
    clock2 = Clock()
    bursty = limiter(clock2, requests_per_minute=60, burst=3)
    bursty.observe(429, {"retry-after": "10"})
    assert [bursty.reserve() for _ in range(5)] == [10.0, 10.0, 10.0, 11.0, 12.0]


def test_requests_admitted_by_the_token_budget_still_go_at_the_request_rate() -> None:
    """Token debt holds requests before they take a turn (one 10,000-token request at a time
    at 1,000 tokens a second); small requests the budget lets go together take their turns
    at the request rate."""
    clock = Clock()
    rl = limiter(clock, requests_per_minute=60, tokens_per_minute=60_000)
    assert (rl.admit(), rl.reserve()) == (0.0, 0.0)
    rl.observe(200, {}, tokens=10_000)  # 9 s of debt
    assert admitted_after(rl, clock) == pytest.approx(9.0)
    assert admitted_after(rl, clock) == pytest.approx(10.0)  # the first holds 10,000
    assert [rl.reserve(), rl.reserve()] == [0.0, 1.0]
    small = limiter(clock, requests_per_minute=60, tokens_per_minute=60_000)
    assert (small.admit(), small.reserve()) == (0.0, 0.0)
    small.observe(200, {}, tokens=100)  # 100-token requests: ten at once
    assert [admitted_after(small, clock) for _ in range(4)] == [0.0] * 4
    assert [small.reserve() for _ in range(4)] == [1.0, 2.0, 3.0, 4.0]


def test_turns_waiting_when_a_pause_begins_go_spaced_after_it() -> None:
    """Callers that reserved before a 429 and wake during its pause take new places after it."""
    clock = Clock()
    rl = limiter(clock, requests_per_minute=60)
    assert [rl.reserve() for _ in range(4)] == [0.0, 1.0, 2.0, 3.0]
    clock.t += 0.5
    rl.observe(429, {"retry-after": "10"})  # paused until +10.5
    woken = []
    for due in (1.0, 2.0, 3.0):
        clock.t = 100.0 + due
        woken.append(clock.t + rl.hold() - 100.0)
    assert woken == [10.5, 11.5, 12.5]
    clock.t = 110.5
    assert rl.hold() == 0.0
    assert rl.reserve() == 3.0  # after the three re-placed turns


@given(
    rpm=st.sampled_from([60.0, 120.0, 600.0]),
    burst=st.sampled_from([None, 1.0, 3.0]),
    steps=st.lists(
        st.tuples(
            st.floats(0.0, 3.0),
            st.sampled_from(["reserve", "reserve", "reserve", "429", "tokens"]),
            st.integers(0, 20),
        ),
        max_size=30,
    ),
)
def test_turns_stay_in_order_and_sends_within_the_rate_whatever_pauses_come(
    rpm: float, burst: float | None, steps: list[tuple[float, str, int]]
) -> None:
    """A simulation: callers sleep their turn, ask `hold` on waking, and send when it says 0.

    Turns are due in the order taken, and the sends in any window of w seconds
    never exceed the burst plus w seconds' worth, whatever pauses come (and token
    usage reported meanwhile: the token budget is waited for in `admit`, before a turn).
    """
    clock = Clock()
    extra: dict[str, float] = {} if burst is None else {"burst": burst}
    rl = limiter(clock, requests_per_minute=rpm, tokens_per_minute=6000, **extra)
    capacity, rate = max(1.0, burst if burst is not None else rpm / 60), rpm / 60
    sleeping: list[float] = []
    sent: list[float] = []
    dues: list[float] = []

    def wake_until(limit: float) -> None:
        while sleeping and min(sleeping) <= limit:
            due = min(sleeping)
            sleeping.remove(due)
            clock.t = due
            more = rl.hold()
            if more == 0:
                sent.append(due)
            else:
                sleeping.append(due + more)

    for dt, action, amount in steps:
        target = clock.t + dt
        wake_until(target)
        clock.t = target
        if action == "reserve":
            due = clock.t + rl.reserve()
            dues.append(due)
            sleeping.append(due)
        elif action == "429":
            rl.observe(429, {"retry-after": str(amount)})
        else:
            rl.observe(200, {}, tokens=amount * 100)
    wake_until(math.inf)
    assert dues == sorted(dues)
    assert len(sent) == len(dues)
    sent.sort()
    for i in range(len(sent)):
        for j in range(i, len(sent)):
            allowed = capacity + rate * (sent[j] - sent[i] + 0.005) + 1e-6
            assert j - i + 1 <= allowed, (sent, i, j)


# --- turns given back (review: cancelled waiters kept their turns; the next call waited 18.6 s) ---


def test_a_turn_given_back_goes_to_the_next_caller() -> None:
    clock = Clock()
    rl = limiter(clock, requests_per_minute=60)
    assert [rl.reserve() for _ in range(4)] == [0.0, 1.0, 2.0, 3.0]
    clock.t += 0.5
    rl.unreserve(due=101.0)  # the second caller stopped waiting
    rl.unreserve(due=103.0)  # and the last
    rl.unreserve(due=clock.t)  # due already: nothing to give back
    rl.unreserve(due=150.0)  # no turn is due then
    assert rl.reserve() == 0.5  # the second's place
    assert rl.reserve() == 2.5  # the last's
    assert rl.reserve() == 3.5  # then at the rate, as before


def test_a_turn_given_back_counts_the_providers_request_budget_up_again() -> None:
    clock = Clock()
    rl = limiter(clock, requests_per_minute=60)
    rl.observe(200, {"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "30s"})
    assert [rl.reserve() for _ in range(3)] == [0.0, 1.0, 2.0]
    clock.t += 0.5
    rl.unreserve(due=101.0)
    assert rl.reserve() == 0.5  # not held until the reset, 29.5 s away


@given(
    rpm=st.sampled_from([60.0, 120.0, 600.0]),
    burst=st.sampled_from([None, 1.0, 3.0]),
    steps=st.lists(
        st.tuples(
            st.floats(0.0, 3.0),
            st.sampled_from(["reserve", "reserve", "reserve", "cancel", "cancel", "429"]),
            st.integers(0, 20),
        ),
        max_size=40,
    ),
)
def test_sends_stay_within_the_rate_whatever_turns_are_given_back(
    rpm: float, burst: float | None, steps: list[tuple[float, str, int]]
) -> None:
    """A simulation as above, where callers also stop waiting (`cancel`) before their turn is
    due and give it back: the sends in any window of w seconds still never exceed the burst
    plus w seconds' worth, and a turn given back is not lost: the caller after gets it."""
    clock = Clock()
    extra: dict[str, float] = {} if burst is None else {"burst": burst}
    rl = limiter(clock, requests_per_minute=rpm, **extra)
    capacity, rate = max(1.0, burst if burst is not None else rpm / 60), rpm / 60
    sleeping: list[float] = []
    sent: list[float] = []
    paused_until = clock.t

    def wake_until(limit: float) -> None:
        while sleeping and min(sleeping) <= limit:
            due = min(sleeping)
            sleeping.remove(due)
            clock.t = due
            more = rl.hold()
            if more == 0:
                sent.append(due)
            else:
                sleeping.append(due + more)

    for dt, action, amount in steps:
        target = clock.t + dt
        wake_until(target)
        clock.t = target
        if action == "reserve":
            sleeping.append(clock.t + rl.reserve())
        elif action == "cancel":
            waiting = sorted(due for due in sleeping if due > clock.t + 0.01)  # (not due yet)
            if waiting:
                due = waiting[amount % len(waiting)]
                sleeping.remove(due)
                others = list(sleeping)
                rl.unreserve(due=due)
                taken = clock.t + rl.reserve()  # the next caller
                if clock.t >= paused_until:  # (a place within a pause is gone with it)
                    assert taken <= max([due, *others]) + 1e-9  # the place given back, or sooner
                sleeping.append(taken)
        else:
            rl.observe(429, {"retry-after": str(amount)})
            paused_until = max(paused_until, clock.t + (amount or 1.0))
    wake_until(math.inf)
    sent.sort()
    for i in range(len(sent)):
        for j in range(i, len(sent)):
            allowed = capacity + rate * (sent[j] - sent[i] + 0.005) + 1e-6
            assert j - i + 1 <= allowed, (sent, i, j)


def test_callers_cancelled_while_waiting_give_their_turns_back(server: LoopbackServer) -> None:
    """At 60 requests a minute, five of six callers cut off at 0.5 s while waiting for their
    turns: a call a second later goes within a second, not after the five turns they held."""
    shared = RateLimiter(requests_per_minute=60)
    client = loopback_client("compat/m", server.base_url + "/v1", limiter=shared)

    async def main() -> float:
        async def one() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(client.acomplete(REQUEST), 0.5)

        try:
            await asyncio.gather(*(one() for _ in range(6)))
            await asyncio.sleep(1.0)
            started = time.monotonic()
            await client.acomplete(REQUEST)
            return time.monotonic() - started
        finally:
            await client.aclose()

    assert asyncio.run(main()) < 1.0
    assert len(server.requests) == 2


class PausingLimiter:
    """A `Limiter` whose first turn, or the pause after it, is `long` seconds away."""

    def __init__(self, first: float, pause: float) -> None:
        self.first, self.pause = first, pause
        self.given_back: list[float] = []

    def admit(self, *, deadline: float | None = None) -> float:
        return 0.0

    def release(self) -> None:
        pass

    def reserve(self, *, deadline: float | None = None, provider: str = "") -> float:
        return self.first

    def hold(self) -> float:
        return self.pause

    def unreserve(self, *, due: float) -> None:
        self.given_back.append(due - time.monotonic())

    def observe(self, status: int, headers: Any, tokens: int | None = None) -> None:
        pass


@pytest.mark.parametrize(("first", "pause"), [(100.0, 0.0), (0.1, 100.0)])
def test_a_turn_past_the_calls_deadline_is_given_back(
    server: LoopbackServer, first: float, pause: float
) -> None:
    """A turn taken whose wait (or a pause after it) would pass the call's deadline ends in
    `RateLimitWaitError`, and the turn is given back."""
    shared = PausingLimiter(first, pause)
    policy = RetryPolicy(attempts=1, timeout=5.0)
    client = loopback_client("compat/m", server.base_url + "/v1", retry=policy, limiter=shared)
    with client, pytest.raises(RateLimitWaitError):
        client.complete(REQUEST)
    assert len(shared.given_back) == 1
    assert shared.given_back[0] == pytest.approx(99.9, abs=0.5)
    assert server.requests == []


# --- requests in flight count against the token budget (review: a burst, then every call failed) ---


@dataclass
class Sent:
    """One simulated request: when it was admitted, its usage, what the limiter held for it,
    and by how much the requests in flight then outgrew their own holds."""

    at: float
    tokens: int
    held: float
    overshoot_out: float


def simulate(
    rl: RateLimiter,
    clock: Clock,
    steps: list[list[int]],
    latency: float,
    call_deadline: float = 1200.0,
    max_events: int = 200_000,
) -> list[Sent]:
    """Workers as `HttpModelClient` drives them on `clock`: each sends its steps (their token
    usage) one after another, asking `admit` again after each wait it is told, then taking a
    turn (`reserve`, `hold` on waking), sending, and reporting the reply `latency` s later.

    A call's deadline, `call_deadline` (longer than `latency`: the client cuts a try off at
    it), runs from its admission; `reserve` must never raise for it (nothing here is a
    provider's pause). Returns the requests in the order admitted.
    (A reply is charged at most a minute of the budget: keep the steps within it.)
    """
    events: list[tuple[float, int, int, str]] = []
    seq = 0

    def push(at: float, worker: int, kind: str) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, worker, kind))

    next_step = [0] * len(steps)
    flying: dict[int, Sent] = {}
    sent: list[Sent] = []
    # Replies' (time, usage), for what the limiter holds: the largest in the
    # ESTIMATE_WINDOW seconds up to the latest reply.
    reported: list[tuple[float, float]] = []

    def estimate() -> float:
        if not reported:
            return 0.0
        latest = reported[-1][0]
        return max(used for when, used in reported if when > latest - ESTIMATE_WINDOW)

    for worker, own in enumerate(steps):
        if own:
            push(0.0, worker, "admit")
    for _ in range(max_events):
        if not events:
            return sent
        at, _, worker, kind = heapq.heappop(events)
        clock.t = at
        if kind == "admit":
            wait = rl.admit(deadline=at + call_deadline)
            assert 0.0 <= wait <= TOKEN_SLICE
            if wait:
                push(at + wait, worker, "admit")
                continue
            deadline = at + call_deadline
            tokens = steps[worker][next_step[worker]]
            held = estimate()
            out = sum(max(0.0, f.tokens - f.held) for f in flying.values())
            flying[worker] = Sent(at, tokens, held, out)
            sent.append(flying[worker])
            wait = rl.reserve(deadline=deadline)  # never past the deadline: no pause here
            push(at + wait, worker, "turn" if wait else "send")
        elif kind == "turn":
            wait = rl.hold()
            push(at + wait, worker, "turn" if wait else "send")
        elif kind == "send":
            push(at + latency, worker, "reply")
        else:
            done = flying.pop(worker)
            rl.observe(200, {}, tokens=done.tokens)
            reported.append((at, float(done.tokens)))
            next_step[worker] += 1
            if next_step[worker] < len(steps[worker]):
                push(at, worker, "admit")
    raise AssertionError("the workers never finished")


def assert_within_budget(sent: list[Sent], tokens_per_minute: float) -> None:
    """By each request's admission, the tokens of all requests admitted so far are at most
    one second's worth (the bucket), the budget since the start, that request itself, and how
    far the requests then in flight outgrow what was held for them."""
    rate = tokens_per_minute / 60
    total = 0
    for request in sent:
        total += request.tokens
        allowed = rate + rate * request.at + request.tokens + request.overshoot_out
        assert total <= allowed + 1e-6 * allowed + rate * 0.005, (request.at, total, allowed)


def test_a_token_budget_spaces_concurrent_workers_instead_of_letting_them_all_go() -> None:
    """32 workers, 20,000-token steps, 30,000 tokens a minute, 1200 s call deadlines: all 32
    used to go at once (21 minutes of budget), then every call failed at once with a wait of
    1279 s past its deadline. Now the first goes alone, the others follow 40 s apart, each
    told at most a slice at a time; no call raises, and the budget holds with one step's slack."""
    clock = Clock()
    clock.t = 0.0
    rl = limiter(clock, tokens_per_minute=30_000)
    assert [rl.admit(deadline=1200.0) for _ in range(3)] == [0.0, TOKEN_SLICE, TOKEN_SLICE]
    rl.release()
    clock.t = 0.0
    sent = simulate(rl, clock, [[20_000] * 3 for _ in range(32)], latency=10.0)
    assert len(sent) == 96
    assert_within_budget(sent, 30_000)
    gaps = [b.at - a.at for a, b in itertools.pairwise(sent)]
    assert gaps[0] == pytest.approx(10.0 + 20_000 / 500 - 1, abs=0.01)  # after the first reply
    assert all(gap == pytest.approx(40.0, abs=0.01) for gap in gaps[1:])
    assert sent[-1].at == pytest.approx(sent[1].at + 94 * 40.0, abs=1.0)  # the budget, no less


@settings(deadline=None, max_examples=60)
@given(
    tokens_per_minute=st.sampled_from([600.0, 6_000.0, 30_000.0, 200_000.0]),
    sizes=st.lists(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4), min_size=1, max_size=12),
    latency=st.sampled_from([0.0, 0.5, 3.0, 30.0]),
)
def test_bursts_of_workers_never_fail_for_token_debt_and_keep_the_budget(
    tokens_per_minute: float, sizes: list[list[float]], latency: float
) -> None:
    """Whatever the workers, step sizes (up to a minute of the budget, what one reply can be
    charged) and budget: no `admit` or `reserve` raises (the calls' deadlines only a second
    past their replies), every step is sent, and the tokens sent stay within the budget plus
    one request and how much the requests in flight outgrow their holds."""
    clock = Clock()
    clock.t = 0.0
    rl = limiter(clock, tokens_per_minute=tokens_per_minute)
    steps = [[int(size * tokens_per_minute) for size in own] for own in sizes]
    sent = simulate(rl, clock, steps, latency=latency, call_deadline=latency + 1.0)
    assert len(sent) == sum(len(own) for own in steps)
    assert_within_budget(sent, tokens_per_minute)
    if len({size for own in steps for size in own}) == 1:  # one size: the slack is one request
        assert all(request.overshoot_out == 0 for request in sent[1:])


def test_a_request_that_gets_no_reply_gives_its_hold_back() -> None:
    clock = Clock()
    rl = limiter(clock, tokens_per_minute=600)  # 10 a second
    assert (rl.admit(), rl.admit()) == (0.0, TOKEN_SLICE)  # one at a time until a size is known
    rl.release()  # the first failed without a reply
    assert rl.admit() == 0.0
    rl.observe(429, {})  # a 429 used no tokens: its hold is given back as well
    assert rl.admit() == 0.0
    rl.observe(200, {}, tokens=20)  # now sizes are known: 20 tokens each
    assert admitted_after(rl, clock) == pytest.approx(1.0)  # 10 at once, 10 in debt
    rl.observe(200, {})  # answered without usage: its 20 stay charged
    assert admitted_after(rl, clock) == pytest.approx(2.0)
    rl.release()
    assert rl.admit() == 0.0  # the released 20 came back


def test_a_hold_whose_call_is_gone_lapses_after_its_deadline() -> None:
    """A worker that dies with a request in flight (its Ray actor killed) neither settles nor
    releases it: its hold is dropped after the call's deadline, so the others go on."""
    clock = Clock()
    rl = limiter(clock, tokens_per_minute=600)
    assert rl.admit(deadline=clock.t + 30) == 0.0  # the probe, then its worker is gone
    assert rl.admit() == TOKEN_SLICE
    clock.t += 30.0
    assert rl.admit() == TOKEN_SLICE  # its reply could still come
    clock.t += 5.1
    assert rl.admit() == 0.0  # a new probe, whose call has no deadline
    clock.t += HOLD_LIFETIME
    assert rl.admit() == TOKEN_SLICE
    clock.t += 5.1  # it lapses after HOLD_LIFETIME
    assert rl.admit() == 0.0


def test_a_reported_usage_and_its_hold_are_charged_at_most_a_minute_of_the_budget() -> None:
    clock = Clock()
    rl = limiter(clock, tokens_per_minute=600)
    assert rl.admit() == 0.0
    rl.observe(200, {}, tokens=10**400)
    assert admitted_after(rl, clock) == pytest.approx(59.0)
    assert admitted_after(rl, clock) == pytest.approx(60.0)  # it held 600, no more


def test_without_a_token_budget_admission_never_waits() -> None:
    rl = limiter(Clock(), requests_per_minute=60)
    assert [rl.admit() for _ in range(5)] == [0.0] * 5
    rl.release()
    rl.observe(200, {}, tokens=10**6)
    assert rl.admit() == 0.0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_try_that_gets_no_reply_releases_its_hold(mode: str) -> None:
    """A connection refused leaves nothing to settle the probe with: it is given back, so the
    next request need not wait for a reply that will never come."""
    with LoopbackServer() as gone:
        url = gone.base_url
    clock = Clock()
    shared = limiter(clock, tokens_per_minute=600)
    client = loopback_client("compat/m", url + "/v1", retry=NO_RETRIES, limiter=shared)
    with pytest.raises(ModelCallError):
        call(client, REQUEST, mode)
    assert shared.admit() == 0.0


def test_a_cancelled_call_releases_its_hold(server: LoopbackServer) -> None:
    server.enqueue(Reply(200, chat_completion("late"), delay=2.0))
    shared = limiter(Clock(), tokens_per_minute=600)
    client = loopback_client("compat/m", server.base_url + "/v1", limiter=shared)

    async def main() -> None:
        try:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(client.acomplete(REQUEST), 0.3)
        finally:
            await client.aclose()

    asyncio.run(main())
    assert shared.admit() == 0.0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_call_waits_for_room_however_long_and_its_deadline_starts_once_admitted(
    server: LoopbackServer, mode: str
) -> None:
    """Token debt longer than a call's deadline failed it at once ("the call was not sent"):
    the wait for room is a place in the budget's queue, so the call now waits (in slices)
    and its deadline runs from when it is admitted."""
    server.enqueue(Reply(200, chat_completion("ok")))
    shared = RateLimiter(tokens_per_minute=60 * 40)  # 40 tokens a second, 40 at once
    shared.observe(200, {}, tokens=76)  # 36 in debt: 0.9 s, past the 0.5 s deadline
    policy = RetryPolicy(attempts=1, timeout=0.5)
    client = loopback_client("compat/m", server.base_url + "/v1", retry=policy, limiter=shared)
    began = time.monotonic()
    assert call(client, REQUEST, mode).text == "ok"
    assert time.monotonic() - began >= 0.85


def test_a_retry_waits_for_room_within_the_calls_deadline() -> None:
    """A retry's wait for room counts against the call's deadline, as its other waits do."""
    shared = RateLimiter(tokens_per_minute=60 * 40)

    def busy(received: Received) -> Reply:
        shared.observe(200, {}, tokens=2_400)  # another worker's reply: a minute in debt
        return Reply(500, openai_error(500, "busy").body)

    policy = RetryPolicy(attempts=3, wait=0.0, timeout=2.0)
    with LoopbackServer() as server:
        server.route("POST", r".*/chat/completions", busy)
        client = loopback_client("compat/m", server.base_url + "/v1", retry=policy, limiter=shared)
        began = time.monotonic()
        with pytest.raises(RateLimitWaitError, match="no room for the retry"):
            call(client, REQUEST, "sync")
        assert 1.0 <= time.monotonic() - began <= 4.0  # waited in slices until the deadline (2 s)
        assert len(server.requests) == 1


class UsageRoute:
    """A chat route whose replies each report `tokens`, noting when each request came."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        self.arrivals: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, received: Received) -> Reply:
        with self.lock:
            self.arrivals.append(time.monotonic())
        body = chat_completion("ok", prompt_tokens=self.tokens - 10, completion_tokens=10)
        return Reply(200, body, delay=0.02)


def test_concurrent_workers_against_a_server_stay_within_the_token_budget() -> None:
    """16 workers, 400-token replies, 4,000 tokens a second: all 16 went at once (6,400
    tokens in the first instant, past the second's worth the budget holds); now the first
    goes alone, the next ten once its size is known, the rest as the budget refills, and
    none fails."""
    route = UsageRoute(tokens=400)
    shared = RateLimiter(tokens_per_minute=4_000 * 60)
    with LoopbackServer() as server:
        server.route("POST", r".*/chat/completions", route)
        _workers(server.base_url, shared, workers=16, calls=1)
    arrivals = sorted(route.arrivals)
    assert len(arrivals) == 16
    for j, at in enumerate(arrivals):
        # Sends come a little after their admission on a busy machine: 50 ms of slack.
        allowed = 4_000 + 4_000 * (at - arrivals[0] + 0.05) + 400
        assert 400 * (j + 1) <= allowed, (j, at - arrivals[0])


def test_one_huge_reply_spaces_requests_for_about_a_minute_not_for_the_rest_of_the_run() -> None:
    """Holds follow the largest usage of the last minute: a reply reporting a minute of the
    budget (a huge step, or a hostile server's count) no longer keeps every later request
    holding that much, one request at a time, for the whole run."""
    clock = Clock()
    rl = limiter(clock, tokens_per_minute=60_000)  # a bucket of 1,000

    def admitted_now() -> int:
        count = [rl.admit() for _ in range(32)].count(0.0)
        for _ in range(count):
            rl.release()
        return count

    assert rl.admit() == 0.0
    rl.observe(200, {}, tokens=10**12)  # charged as one minute of the budget
    clock.t += 61.0
    assert admitted_now() == 1  # no reply since: the huge one still counts
    assert rl.admit() == 0.0
    rl.observe(200, {}, tokens=500)
    clock.t += 2.0
    assert admitted_now() == 3  # holds of 500 again: the bucket's 1,000 and one into debt


def test_a_quiet_spell_keeps_what_requests_hold() -> None:
    """After a lull (every worker resetting its VM), the waiting workers are admitted as the
    last busy minute's replies say, not all at once on a last reply that reported little."""
    clock = Clock()
    rl = limiter(clock, tokens_per_minute=200_000)
    for _ in range(5):
        assert rl.admit() == 0.0
        rl.observe(200, {}, tokens=30_000)
        clock.t += 10.0
    assert rl.admit() == 0.0
    rl.observe(200, {}, tokens=0)  # a reply reporting nothing used
    clock.t += 600.0
    admitted = [rl.admit() for _ in range(32)].count(0.0)
    assert admitted == 1  # each holds 30,000: the bucket's 3,333 lets one in (was all 32)
