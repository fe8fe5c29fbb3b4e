"""A rate limiter shared by every client of one model, so concurrent workers back off together.

One `RateLimiter` per model (per key and model, as providers count): give the
same object to every `HttpModelClient` that calls that model (the
`limiter=` parameter). Before each HTTP try a client waits for room in the
token budget (`admit`), then `reserve`s a turn and sleeps the wait it is told;
after each reply it reports the status, the headers and the tokens used
(`observe`), and a try that got no reply gives its room back (`release`); a
caller that stops waiting for its turn before it is due (cancelled, an
episode's time limit, its deadline first) gives the turn back (`unreserve`),
for the next caller to take.
Limits come from two places:

* what you configure: `requests_per_minute` and `tokens_per_minute`, kept as
  token buckets holding one second's worth (so a burst never exceeds what
  the provider refills in a second). Requests in flight count against the
  token budget: each admitted one holds an estimate of its tokens (the
  largest usage reported in the minute up to the latest reply) until its
  reply's real usage replaces it, so concurrent workers are spaced instead of
  all going while the budget looks untouched; until a reply has reported usage, one request goes at a time;
* what the provider says, when it says it: OpenAI's
  `x-ratelimit-remaining-requests` / `-tokens` with
  `x-ratelimit-reset-requests` / `-tokens` durations (`"6m0s"`, `"12ms"`,
  `"1.5s"`), Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,
  output-tokens}-remaining` with `-reset` RFC 3339 times, and `retry-after`
  / `retry-after-ms`. A budget at 0, or any 429, pauses every caller until
  the reset (a 429 with no hint pauses `fallback_pause` seconds); a request
  budget above 0 is counted down by the turns taken until its reset, so
  callers do not all rush in on the last few requests left. With a
  configured request rate, the callers a pause held back go at that rate
  once it ends, not all at once.

Headers are hostile input: garbage, negative, infinite or far-future values
are ignored or capped at `max_pause`, so no reply can stall a run for long.
A turn whose wait would pass the caller's deadline raises `RateLimitWaitError`
instead of sleeping. The token budget never raises: a caller waits for room in
slices of at most `TOKEN_SLICE` seconds, asking again after each (the client
waits for its first try's room however long it takes, and starts the call's
deadline then; a retry's room it waits for within that deadline).
The limiter is thread-safe, never sleeps itself, and its clock is injectable
(`clock`, `now`) so its decisions are testable.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Final, NoReturn, Protocol, Self

from adapters.engine.retry import reply_time, retry_after_from_headers
from adapters.errors import ConfigurationError, RateLimitWaitError
from osharm_core.errors import ConfigError, is_finite_number, number_excerpt

#: The longest pause any header can impose (seconds), unless the limiter is built with another.
DEFAULT_MAX_PAUSE: Final = 120.0
#: The longest a caller waiting for room in the token budget sleeps before asking again (seconds).
TOKEN_SLICE: Final = 1.0
#: How long an admitted request's hold lasts when its call has no deadline (seconds); a hold
#: neither settled nor released by its call's deadline (its worker died) is dropped then.
HOLD_LIFETIME: Final = 1200.0
#: Seconds a reply's usage counts towards what admitted requests hold: one unusually large
#: reply spaces requests for about a minute, not for the rest of the run.
ESTIMATE_WINDOW: Final = 60.0
_HOLD_GRACE: Final = 5.0

_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_DURATION: Final = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|h|m|s))+")
_UNIT_SECONDS: Final = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
# A pause this close to its end is a sleeper woken a little early, not a new pause.
_EARLY_WAKE: Final = 0.005


def _not_sent(message: str, provider: str) -> RateLimitWaitError:
    """The error of a try a shared limit would hold past its call's deadline."""
    return RateLimitWaitError(message, provider=provider or "rate limiter")


class Limiter(Protocol):
    """What `HttpModelClient` asks of a limiter (a `RateLimiter`, or a proxy to a shared one)."""

    def admit(self, *, deadline: float | None = None) -> float:
        """Ask for room in the token budget: seconds to wait before asking again (0: admitted)."""
        ...

    def release(self) -> None:
        """Give back the room an admitted request held when it got no reply."""
        ...

    def reserve(self, *, deadline: float | None = None, provider: str = "") -> float:
        """Take a turn; the seconds to wait before sending (raise when past `deadline`)."""
        ...

    def hold(self) -> float:
        """Seconds still to wait because of a pause that began after the turn was taken."""
        ...

    def unreserve(self, *, due: float) -> None:
        """Give back the turn due at `due` (a value of the limiter's clock), not used: its caller
        stopped waiting before then."""
        ...

    def observe(self, status: int, headers: Mapping[str, str], tokens: int | None = None) -> None:
        """Learn from one reply (settling its request's room): its status, headers and tokens used."""
        ...


def parse_duration(text: str | None) -> float | None:
    """Seconds in an OpenAI reset duration (`"6m0s"`, `"12ms"`, `"1h2m3.5s"`, or plain seconds).

    `None` for anything else (negative, empty, garbage, not finite).

    >>> parse_duration("6m0s"), parse_duration("12ms"), parse_duration("1.5"), parse_duration("-3s")
    (360.0, 0.012, 1.5, None)
    """
    if text is None:
        return None
    value = text.strip().lower()
    if not value or len(value) > 64:
        return None
    if _DURATION.fullmatch(value):
        total = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(value))
        return total if math.isfinite(total) else None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def parse_reset_time(text: str | None, now: datetime) -> float | None:
    """Seconds from `now` until an RFC 3339 time (Anthropic's `-reset` headers); 0 if past.

    >>> parse_reset_time("2025-01-01T00:00:30Z", datetime(2025, 1, 1, tzinfo=UTC))
    30.0
    >>> parse_reset_time("tomorrow", datetime(2025, 1, 1, tzinfo=UTC)) is None
    True
    """
    if text is None or len(text) > 64:
        return None
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        return max(0.0, (when - now).total_seconds())
    except OverflowError:
        return None


def _count(text: str | None) -> int | None:
    """A non-negative integer header value, else `None`."""
    if text is None or len(text) > 32:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        try:
            number = float(text.strip())
        except ValueError:
            return None
        if not math.isfinite(number):
            return None
        value = int(number)
    return value if value >= 0 else None


def _setting(name: str, value: float, *, positive: bool = False) -> float:
    """A `RateLimiter` setting as a float: a finite number >= 0 (> 0 when `positive`), else a
    `ConfigError` naming it."""
    if is_finite_number(value) and (value > 0 or (value == 0 and not positive)):
        return float(value)
    least = "> 0" if positive else ">= 0"
    raise ConfigError(
        f"RateLimiter {name} must be a finite number {least}; got {number_excerpt(value)}"
    )


class _Bucket:
    """A token bucket: `rate` per second, holding at most `capacity`; its level may go negative."""

    def __init__(self, per_minute: float, at: float, capacity: float | None = None) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate if capacity is None else capacity)
        self.level = self.capacity
        self.at = at

    def refill(self, now: float) -> None:
        if now > self.at:
            self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
            self.at = now

    def wait_for(self, amount: float) -> float:
        """Seconds until the level reaches `amount` (it is refilled to `now` already)."""
        return 0.0 if self.level >= amount else (amount - self.level) / self.rate

    def due(self, earliest: float) -> float:
        """When one more unit may go, not before `earliest` (until then the bucket fills as usual)."""
        start = max(self.at, earliest)
        level = min(self.capacity, self.level + (start - self.at) * self.rate)
        return start + (0.0 if level >= 1.0 else (1.0 - level) / self.rate)

    def take(self, earliest: float) -> float:
        """Take one unit at `due(earliest)` and return that time; later units are spaced after it."""
        when = self.due(earliest)
        self.refill(max(self.at, earliest))
        self.level -= 1.0
        return when


class RateLimiter:
    """Requests and tokens per minute for one model, shared by all its clients and workers.

    `requests_per_minute` and `tokens_per_minute` are the budgets you know
    (either may be `None`: then only the provider's headers limit). A request
    is admitted (`admit`) while the token budget is not in debt, and then holds
    the largest usage reported in the minute up to the latest reply until its
    reply's usage is charged in its place (`observe`) or it is given back
    (`release`). `burst` is how many requests
    may go at once after a quiet spell (default: one second's worth, at least 1).
    `max_pause` caps any pause a header asks for (a reply's reported usage, and
    so a hold, is charged at most a minute of the token budget);
    `fallback_pause` is the pause after a 429 that says nothing about when to
    come back. `waits` counts the turns that had to wait, `pauses` the pauses
    the provider's replies caused. A limiter counts one process's calls: it
    does not pickle or copy (a `ConfigurationError` saying so).

    >>> limiter = RateLimiter(requests_per_minute=60, clock=lambda: 0.0)
    >>> limiter.reserve(), limiter.reserve()
    (0.0, 1.0)
    >>> tokens = RateLimiter(tokens_per_minute=600, clock=lambda: 0.0)
    >>> tokens.admit(), tokens.admit()  # the second waits until the first's size is known
    (0.0, 1.0)
    >>> tokens.observe(200, {}, tokens=15)  # 10 at once, 10 a second: 5 in debt
    >>> tokens.admit()
    0.5
    """

    def __init__(
        self,
        *,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        burst: float | None = None,
        max_pause: float = DEFAULT_MAX_PAUSE,
        fallback_pause: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.max_pause = _setting("max_pause", max_pause)
        self.fallback_pause = min(_setting("fallback_pause", fallback_pause), self.max_pause)
        burst = None if burst is None else _setting("burst", burst)
        rpm, tpm = requests_per_minute, tokens_per_minute
        rpm = None if rpm is None else _setting("requests_per_minute", rpm, positive=True)
        tpm = None if tpm is None else _setting("tokens_per_minute", tpm, positive=True)
        self.requests_per_minute, self.tokens_per_minute = rpm, tpm
        self._clock = clock
        self._now = now
        self._lock = threading.Lock()
        start = clock()
        self._requests = None if rpm is None else _Bucket(rpm, start, burst)
        self._tokens = None if tpm is None else _Bucket(tpm, start)
        self._paused_until = start
        # The provider's own request budget: how many are left until when (from headers).
        self._left: int | None = None
        self._left_until = start
        self._left_taken = 0  # the turns counted down from `_left` since a header set it
        # With a request rate: when the turns handed out and not due yet are due, and the
        # times of those given back unused (`unreserve`), for the next turns; both sorted.
        self._out: list[float] = []
        self._free: list[float] = []
        # What admitted requests not yet answered hold: (estimate, when it is dropped), oldest first.
        self._held: list[tuple[float, float]] = []
        # (when, usage) of replies in the ESTIMATE_WINDOW up to the latest one, each smaller
        # than every one before it (so the first is the window's largest, the last the latest
        # reply's); empty: no request answered yet.
        self._reported: deque[tuple[float, float]] = deque()
        self.waits = 0
        self.pauses = 0

    def __repr__(self) -> str:
        return (
            f"RateLimiter(requests_per_minute={self.requests_per_minute}, "
            f"tokens_per_minute={self.tokens_per_minute})"
        )

    def __reduce__(self) -> NoReturn:
        raise ConfigurationError(
            f"{self!r} does not pickle or copy: it counts the calls of the process it is in, "
            "so a copy in each worker would let every worker send the whole rate (an agent or "
            "client handed to a worker process holds one); build the limiter, and the clients "
            "sharing it, in the worker with that worker's share of the rate, or run on Ray, "
            "where one actor keeps the limits for the whole cluster"
        )

    def _pause(self, seconds: float | None, now: float) -> None:
        if seconds is None or not math.isfinite(seconds) or seconds <= 0:
            return
        until = now + min(seconds, self.max_pause)
        if until > self._paused_until:
            self._paused_until = until
            self.pauses += 1

    def reserve(self, *, deadline: float | None = None, provider: str = "") -> float:
        """Take the next request turn; returns the seconds to sleep before sending.

        Turns are handed out in order (a turn taken now is due after every turn
        taken before it), but for a turn given back (`unreserve`): the next caller
        gets its place. Turns taken during a pause are spaced after its end
        at the request rate, as after any quiet spell (at most `burst` at once),
        not all released together. When the wait would end past `deadline` (a
        value of the limiter's clock, `time.monotonic()` by default) the turn is
        given back and `RateLimitWaitError` raised. The token budget is not
        waited for here but in `admit`, before.
        """
        with self._lock:
            now = self._clock()
            ready = max(now, self._paused_until)
            counted = self._left is not None and now < self._left_until
            if counted and self._left is not None and self._left <= 0:
                ready = max(ready, self._left_until)
            freed = None
            if self._requests is not None:
                self._forget_past(now)
                due = self._requests.due(ready)
                at = bisect.bisect_left(self._free, ready)
                if at < len(self._free) and self._free[at] < due:
                    freed, due = at, self._free[at]
                ready = due
            wait = ready - now
            if deadline is not None and now + wait > deadline:
                left = max(0.0, deadline - now)
                why = f"asks for a wait of {wait:.1f} s, past the call's deadline (in {left:.1f} s)"
                raise _not_sent(f"the shared rate limit {why}; the call was not sent", provider)
            if self._requests is not None:
                if freed is None:
                    self._requests.take(ready)
                else:
                    del self._free[freed]
                bisect.insort(self._out, ready)
            if counted and self._left is not None:
                self._left -= 1
                self._left_taken += 1
            if wait > 0:
                self.waits += 1
            return wait

    def admit(self, *, deadline: float | None = None) -> float:
        """Ask for room in the token budget; the seconds to wait before asking again (0: admitted).

        A request is admitted while the budget is not in debt, and it then holds
        the largest usage reported in the `ESTIMATE_WINDOW` seconds up to the latest
        reply (at most a minute of the budget) until
        `observe` charges its reply's usage instead or `release` gives it back,
        so requests in flight count. Until a reply has reported usage, one
        request goes at a time. Otherwise the wait is until the debt is paid off,
        at most `TOKEN_SLICE` (answers may make room earlier); this never raises,
        so debt alone never fails a call that can wait. A hold not settled by
        `deadline` (its call's, a value of the limiter's clock; `HOLD_LIFETIME`
        from now without one) is dropped a little after it, its estimate spent.
        Without `tokens_per_minute`, always 0.
        """
        with self._lock:
            if self._tokens is None:
                return 0.0
            now = self._clock()
            self._drop_expired(now)
            if not self._reported and self._held:
                return TOKEN_SLICE  # a request of unknown size is out: wait for its reply
            self._tokens.refill(now)
            wait = self._tokens.wait_for(0.0)
            if wait > _EARLY_WAKE:  # (a waiter's clock lands a hair short of a refill it slept for)
                return min(wait, TOKEN_SLICE)
            estimate = self._estimate()
            self._tokens.level -= estimate
            until = now + HOLD_LIFETIME if deadline is None else max(now, deadline)
            self._held.append((estimate, until + _HOLD_GRACE))
            return 0.0

    def release(self) -> None:
        """Give back what an admitted request held (it failed without a reply, or was
        cancelled or never sent); the oldest hold when several are out."""
        with self._lock:
            if self._tokens is None:
                return
            now = self._clock()
            self._drop_expired(now)
            if not self._held:
                return
            self._tokens.refill(now)
            estimate, _ = self._held.pop(0)
            self._tokens.level = min(self._tokens.capacity, self._tokens.level + estimate)

    def hold(self) -> float:
        """Seconds left of a pause that began after a turn was reserved (0 when none).

        With a request rate, a turn caught by a longer pause takes a new place
        in line after it, so the turns that were waiting go spaced at the rate
        once the pause ends instead of all together.
        """
        with self._lock:
            now = self._clock()
            left = self._paused_until - now
            if left <= 0:
                return 0.0
            if self._requests is None or left < _EARLY_WAKE:
                return left
            due = self._requests.take(self._paused_until)
            bisect.insort(self._out, due)
            return due - now

    def unreserve(self, *, due: float) -> None:
        """Give back a turn not used: its caller stopped waiting before it was due (cancelled,
        an episode's time limit, or its deadline came first).

        `due` is when the turn was due (a value of the limiter's clock, as deadlines
        are; the latest turn the caller was given, `hold`'s new place after a pause
        included). With a request rate, the next turn taken gets that place in line
        (a place the rate gave, so the sends stay within it); one due already (within
        a few milliseconds), or not found within half a turn's spacing, is not given back. A provider's
        request budget counted down by the turn is counted up again (unless a header
        has set it since).
        """
        with self._lock:
            now = self._clock()
            if self._left is not None and self._left_taken > 0:
                self._left += 1
                self._left_taken -= 1
            if self._requests is None or due <= now + _EARLY_WAKE:  # due already
                return
            self._forget_past(now)
            at = bisect.bisect_left(self._out, due)
            near = [i for i in (at - 1, at) if 0 <= i < len(self._out)]
            if not near:
                return
            found = min(near, key=lambda i: abs(self._out[i] - due))
            if abs(self._out[found] - due) <= 0.5 / self._requests.rate:
                bisect.insort(self._free, self._out.pop(found))

    def _forget_past(self, now: float) -> None:
        """Under the lock: drop the turns due by `now` (sent, or their place gone unused)."""
        for times in (self._out, self._free):
            del times[: bisect.bisect_right(times, now)]

    def observe(self, status: int, headers: Mapping[str, str], tokens: int | None = None) -> None:
        """Learn from one reply: charge `tokens` in place of what its request held (the
        oldest hold when several are out), follow the budget headers, pause after a 429.

        A successful reply that reports no usage keeps its hold charged; any other
        reply without usage (a 429, a 500) gives it back.
        """
        lowered = {str(k).lower(): str(v) for k, v in headers.items()}
        with self._lock:
            now = self._clock()
            if self._tokens is not None:
                self._settle(self._tokens, status, tokens, now)
            # Anthropic's reset times are read by the reply's own clock, like Retry-After dates.
            answered = reply_time(lowered, self._now())
            budgets = self._budgets(lowered, answered)
            requests = self._request_budget(lowered, answered)
            if requests is not None:
                left, reset = requests
                self._left = left
                self._left_taken = 0
                self._left_until = now + min(reset if reset is not None else 1.0, self.max_pause)
            for remaining, reset in budgets:
                if remaining == 0:
                    self._pause(reset if reset is not None else self.fallback_pause, now)
            if status == 429:
                asked = retry_after_from_headers(lowered, self._now())
                resets = [r for left, r in budgets if left == 0 and r is not None]
                hint = max([w for w in (asked, *resets) if w is not None], default=None)
                self._pause(hint if hint else self.fallback_pause, now)

    def _settle(self, bucket: _Bucket, status: int, tokens: int | None, now: float) -> None:
        """Under the lock: charge one reply's usage to the token `bucket` in place of its
        request's hold."""
        bucket.refill(now)
        self._drop_expired(now)
        held = self._held.pop(0)[0] if self._held else 0.0
        cap = bucket.capacity * 60
        # Compared before float(): float() of a 400-digit int raises.
        used = None if tokens is None or tokens < 0 else (cap if tokens >= cap else float(tokens))
        answered = 200 <= status < 300
        if used is not None:
            self._report(now, used)
        elif answered:
            used = held  # spent, but not reported: the estimate stands
            if not self._reported:
                self._report(now, 0.0)
        # The hold was charged when the request was admitted: only the difference is new.
        bucket.level = min(bucket.capacity, bucket.level + held - (used or 0.0))

    def _report(self, now: float, used: float) -> None:
        """Under the lock: remember one reply's usage until replies have come for
        `ESTIMATE_WINDOW` seconds after it."""
        while self._reported and self._reported[-1][1] <= used:
            self._reported.pop()
        self._reported.append((now, used))
        while self._reported[0][0] <= now - ESTIMATE_WINDOW:
            self._reported.popleft()

    def _estimate(self) -> float:
        """Under the lock: what an admitted request holds: the largest usage reported in the
        `ESTIMATE_WINDOW` seconds up to the latest reply (a quiet spell changes nothing:
        a lull's first requests hold what the last busy minute's did)."""
        return self._reported[0][1] if self._reported else 0.0

    def _drop_expired(self, now: float) -> None:
        """Under the lock: forget the holds past their call's deadline (their estimate stays spent)."""
        self._held = [held for held in self._held if held[1] > now]

    def _request_budget(
        self, headers: Mapping[str, str], answered: datetime
    ) -> tuple[int, float | None] | None:
        """(remaining, seconds to reset) of the provider's request budget, when a header says."""
        remaining = _count(headers.get("x-ratelimit-remaining-requests"))
        if remaining is not None:
            return remaining, parse_duration(headers.get("x-ratelimit-reset-requests"))
        remaining = _count(headers.get("anthropic-ratelimit-requests-remaining"))
        if remaining is not None:
            reset = headers.get("anthropic-ratelimit-requests-reset")
            return remaining, parse_reset_time(reset, answered)
        return None

    def _budgets(
        self, headers: Mapping[str, str], answered: datetime
    ) -> list[tuple[int, float | None]]:
        """(remaining, seconds to reset) for each budget the headers describe, Anthropic's reset
        times measured from `answered`."""
        found = []
        for kind in ("requests", "tokens"):
            remaining = _count(headers.get(f"x-ratelimit-remaining-{kind}"))
            if remaining is not None:
                found.append((remaining, parse_duration(headers.get(f"x-ratelimit-reset-{kind}"))))
        for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
            remaining = _count(headers.get(f"anthropic-ratelimit-{kind}-remaining"))
            if remaining is not None:
                reset = parse_reset_time(headers.get(f"anthropic-ratelimit-{kind}-reset"), answered)
                found.append((remaining, reset))
        return found


def admission(
    limiter: Limiter,
    *,
    deadline: float | None = None,
    timeout: float | None = None,
    provider: str = "",
) -> Iterator[float]:
    """The sleeps until `limiter`'s token budget has room for a try, asked again after each
    (so none is longer than a slice).

    Before a call's first try (no `deadline`) however long it takes, each ask
    telling the limiter the deadline the call would have if admitted now
    (`timeout` from now; its deadline starts once admitted); before a retry,
    within the call's `deadline`: a wait past it is a `RateLimitWaitError`.
    """
    while True:
        if deadline is None and timeout is not None:
            asked: float | None = time.monotonic() + timeout
        else:
            asked = deadline
        wait = limiter.admit(deadline=asked)
        if wait <= 0:
            return
        if deadline is not None and time.monotonic() + wait > deadline:
            why = "had no room for the retry before the call's deadline"
            raise _not_sent(f"the shared token budget {why}; the try was not sent", provider)
        yield wait


class Turn:
    """One try's turn at a shared limiter: `with turn(...) as held:` (sync) or `async with`.

    Entering sleeps until the try may go: room in the token budget (unless the
    call's first try was `admitted` already), its request turn, then any pause
    that began since; a wait that would pass `deadline` (a `time.monotonic()`
    value) is a `RateLimitWaitError`. `held.observe(...)` tells the limiter
    what the reply said (and settles the room the try held). Leaving without
    that (no reply, an error, a cancel) gives the room back (`release`), and a
    wait left before its turn was due gives the turn back (`unreserve`), so it
    does not hold up the callers after it. With no limiter, nothing waits.
    """

    def __init__(
        self, limiter: Limiter | None, *, deadline: float | None, provider: str, admitted: bool
    ) -> None:
        self._limiter = limiter
        self._deadline = deadline
        self._provider = provider
        self._admitted = admitted
        self._holding = False  # room in the token budget is held for this try
        self._observed = False
        self._due: float | None = None  # when the turn taken last is due (`time.monotonic()`)

    def _waits(self, limiter: Limiter) -> Iterator[float]:
        if not self._admitted:
            yield from admission(limiter, deadline=self._deadline, provider=self._provider)
        self._holding = True
        wait = limiter.reserve(deadline=self._deadline, provider=self._provider)
        while True:
            self._due = time.monotonic() + wait
            if wait <= 0:
                return
            if self._deadline is not None and self._due > self._deadline:
                why = f"pauses calls for {wait:.1f} s more, past the call's deadline"
                raise _not_sent(
                    f"the shared rate limit {why}; the call was not sent", self._provider
                )
            yield wait
            wait = limiter.hold()  # with a request rate, a new place in line after the pause

    @contextlib.contextmanager
    def _giving_back(self, limiter: Limiter) -> Iterator[None]:
        """Around the waits: when they end early (a cancel, an episode's time limit, a
        `RateLimitWaitError`), give back the turn not used yet, and the room held."""
        try:
            yield
        except BaseException:
            if self._due is not None and time.monotonic() < self._due:
                limiter.unreserve(due=self._due)
            if self._holding:
                limiter.release()
            raise

    def __enter__(self) -> Self:
        if self._limiter is not None:
            with self._giving_back(self._limiter):
                for wait in self._waits(self._limiter):
                    time.sleep(wait)
        return self

    async def __aenter__(self) -> Self:
        if self._limiter is not None:
            with self._giving_back(self._limiter):
                for wait in self._waits(self._limiter):
                    await asyncio.sleep(wait)
        return self

    def observe(self, status: int, headers: Mapping[str, str], tokens: int | None = None) -> None:
        """Tell the limiter what the try's reply said: its status, headers and tokens used."""
        if self._limiter is not None:
            self._observed = True
            self._limiter.observe(status, headers, tokens)

    def __exit__(self, *exc: object) -> None:
        if self._limiter is not None and self._holding and not self._observed:
            self._limiter.release()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__()


def turn(
    limiter: Limiter | None,
    *,
    deadline: float | None = None,
    provider: str = "",
    admitted: bool = False,
) -> Turn:
    """One try's `Turn` at `limiter` (`None`: no limiter, nothing to wait for), built on the
    `Limiter` methods alone, so any limiter (a `RateLimiter`, a `RayLimiter`) works.

    >>> limiter = RateLimiter(requests_per_minute=60, clock=time.monotonic)
    >>> with turn(limiter, provider="p") as held:
    ...     held.observe(200, {}, tokens=12)
    >>> limiter.waits
    0
    """
    return Turn(limiter, deadline=deadline, provider=provider, admitted=admitted)


__all__ = [
    "DEFAULT_MAX_PAUSE",
    "HOLD_LIFETIME",
    "TOKEN_SLICE",
    "Limiter",
    "RateLimiter",
    "Turn",
    "admission",
    "parse_duration",
    "parse_reset_time",
    "turn",
]
