"""The shared rate limiter: its decisions on a fake clock, hostile headers, and workers against a 429 server."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.contract import ModelRequest
from adapters.engine.client import HttpModelClient
from adapters.engine.limits import RateLimiter, parse_duration, parse_reset_time
from adapters.engine.retry import NO_RETRIES, RetryPolicy
from adapters.errors import RateLimitWaitError, RetryableError
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


def test_tokens_per_minute_hold_calls_while_the_budget_is_in_debt() -> None:
    clock = Clock()
    rl = limiter(clock, tokens_per_minute=600)  # 10 tokens a second, 10 at once
    assert rl.reserve() == 0.0
    rl.observe(200, {}, tokens=30)  # 20 in debt
    assert rl.reserve() == pytest.approx(2.0)
    clock.t += 2.0
    assert rl.reserve() == 0.0


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
        assert rl.reserve() == pytest.approx(5 * 60 - 1, abs=1.0)


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


def test_turns_taken_during_token_debt_are_spaced_after_it() -> None:
    clock = Clock()
    rl = limiter(clock, requests_per_minute=60, tokens_per_minute=60_000)
    assert rl.reserve() == 0.0
    rl.observe(200, {}, tokens=10_000)  # 9 s of debt
    assert [rl.reserve() for _ in range(4)] == pytest.approx([9.0, 10.0, 11.0, 12.0])


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
    never exceed the burst plus w seconds' worth, pauses and token debt included.
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
