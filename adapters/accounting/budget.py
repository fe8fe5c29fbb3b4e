"""Optional caps on tokens and dollars, per episode and per run.

A `Budget` is one run's accounting (an edge object: it holds the run's
totals): every agent of the run shares it. The agent reserves a place with
it before each request (`reserve`, `areserve`) and settles the reservation
with the step's usage after the response (or releases it when the call
failed and nothing it got may have been billed); once a cap is reached no
further request is sent (`BudgetExceeded`). Caps are checked against what was
charged, since a request's cost is known only once it is answered, so the
step that reaches a cap is completed and recorded, and the episode ends
before the next one. Caps count what this `Budget` was charged: one process's
run (a new `Budget`, such as a rerun's, starts from nothing).

A cap fails closed where it cannot be kept: a token cap is reached by a step
whose provider reported no usage (it would add 0 tokens), a dollar cap by a
step whose cost is unknown (no price for the model, or no usage). A reply
that came with a 2xx status but gave no step (it could not be decoded, its
body was cut off) may have been billed, so it is charged too: the usage its
body reported, or, when none could be read, an estimate that leans high (see
`adapters.agent.billed_totals`).

Requests in flight count against the run caps: each holds an estimate, the
largest step (tokens and dollars) charged so far in the run, and a request
waits while the charged totals plus the estimates in flight reach a run
cap (it goes, or ends with `BudgetExceeded`, once those requests are
answered). Until the run's first step is charged nothing is known to
estimate with, so the run sends one request at a time. A single agent never
waits (its own request is answered before it asks again). The bound that
remains: a run cap is passed by at most one step, as for a single agent,
plus, for each other request in flight at that moment, how much its step
came out larger than the largest charged before it (a trajectory's history
grows its later steps), and, for each reply charged an estimate, how much it
came out larger than its estimate.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import NoReturn

from adapters.accounting.cost import UsageTotals
from adapters.accounting.prices import PriceTable, check_prices, default_prices
from adapters.errors import BudgetExceeded, ConfigurationError
from osharm_core.errors import ConfigError, excerpt, is_finite_number, number_excerpt


def _cap(value: float | None, name: str, *, integer: bool) -> float | None:
    if value is None:
        return None
    if not is_finite_number(value) or (integer and not isinstance(value, int)):
        what = "an integer" if integer else "a number"
        raise ConfigError(
            f"{name} must be {what} > 0 that a float can hold, or None; got {number_excerpt(value)}"
        )
    if value <= 0:
        raise ConfigError(f"{name} must be > 0; got {number_excerpt(value)}")
    return value


def _reached(
    totals: UsageTotals, max_tokens: float | None, max_cost: float | None, scope: str
) -> str | None:
    if max_tokens is not None:
        if totals.tokens >= max_tokens:
            return f"{totals.tokens} tokens used, cap {int(max_tokens)}"
        if totals.unreported_steps:
            return (
                f"usage not reported for a step, so the {scope} token cap {int(max_tokens)} "
                "cannot be kept"
            )
    if max_cost is not None:
        if totals.unpriced_steps:
            return (
                f"a step's cost is unknown (no price for the model, or usage not reported), "
                f"so the {scope} dollar cap ${max_cost:g} cannot be kept"
            )
        if totals.known_cost_usd >= max_cost:
            return f"${totals.known_cost_usd:.4f} spent, cap ${max_cost:g}"
    return None


class Budget:
    """Per-episode and per-run caps (tokens and USD; `None`: no cap) and the run's totals.

    `prices` prices the steps (the shipped table by default; see
    `load_prices` for overrides). Invalid caps, and `prices` that are not a
    `PriceTable` (a path: read it with `load_prices`), raise `ConfigError`.

    Share one `Budget` between a process's agents (threads or one event
    loop): each request in flight holds the largest step charged so far
    against the run caps (see the module doc for the bound that remains).
    A `Budget` does not cross processes (pickling or copying one, or an agent
    holding one, raises `ConfigurationError`): build one in each worker process;
    on Ray one actor keeps the run's caps the same way
    (`adapters.runs.ray_runner.BudgetActor`).
    """

    def __init__(
        self,
        *,
        max_episode_tokens: int | None = None,
        max_episode_cost: float | None = None,
        max_run_tokens: int | None = None,
        max_run_cost: float | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        self.max_episode_tokens = _cap(max_episode_tokens, "max_episode_tokens", integer=True)
        self.max_episode_cost = _cap(max_episode_cost, "max_episode_cost", integer=False)
        self.max_run_tokens = _cap(max_run_tokens, "max_run_tokens", integer=True)
        self.max_run_cost = _cap(max_run_cost, "max_run_cost", integer=False)
        given = check_prices(prices)
        self.prices = given if given is not None else default_prices()
        self._run = UsageTotals()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._largest = (0, 0.0)  # the largest step charged: tokens, known dollars
        self._in_flight = 0
        self._held = (0, 0.0)  # the estimates of the requests in flight

    def __reduce__(self) -> NoReturn:
        raise ConfigurationError(
            f"a {type(self).__name__} does not pickle or copy: it counts the spending of the "
            "agents of the process it is in, so a copy would cap nothing the original sees "
            "(an agent handed to a worker process holds one); build the budget in the worker, "
            "or run on Ray, where one actor keeps the run's caps"
        )

    @property
    def run_totals(self) -> UsageTotals:
        """Usage and cost of every step charged so far, across episodes."""
        return self._run

    @property
    def caps_cost(self) -> bool:
        """Whether a dollar cap is set (then every step needs a price)."""
        return self.max_episode_cost is not None or self.max_run_cost is not None

    @property
    def largest_step(self) -> tuple[int, float]:
        """The largest step charged so far (tokens, known dollars): what a request holds."""
        return self._largest

    @property
    def in_flight(self) -> int:
        """How many reserved requests are not answered yet (counted only under a run cap)."""
        return self._in_flight

    def charge(self, totals: UsageTotals) -> None:
        """Add a finished step (given as its own totals, see `UsageTotals.add`) to the run's totals.

        (Totals of several steps, such as an ended episode's, count as steps of their mean size.)
        """
        with self._lock:
            self._add(totals)
            self._wake()

    def carry_over(self, spent: UsageTotals, largest_step: tuple[int, float]) -> None:
        """Count what another budget was charged (its `run_totals` and `largest_step`) as
        charged here: Ray's `BudgetActor` starts from the driver's budget this way."""
        with self._lock:
            self._run = self._run + spent
            self._largest = (
                max(self._largest[0], largest_step[0]),
                max(self._largest[1], largest_step[1]),
            )
            self._wake()

    def reserve(self, episode: UsageTotals) -> Reservation:
        """A place for one request of an episode with these totals, waiting while requests in
        flight may use up a run cap; `BudgetExceeded` when the episode or the run may not send it.

        On a thread that runs an event loop it never waits (the requests it would wait for
        may need that loop), so there it only checks, as `check` does.
        """
        with self._lock:
            while True:
                reservation = self._try_reserve(episode)
                if reservation is not None:
                    return reservation
                if _on_a_loop():
                    return self._take()
                self._settled.wait()

    async def areserve(self, episode: UsageTotals) -> Reservation:
        """`reserve` for async callers: waits on the running asyncio loop (on another
        event loop, such as trio's, it only checks, as `check` does)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            with self._lock:
                return self._try_reserve(episode) or self._take()
        while True:
            with self._lock:
                reservation = self._try_reserve(episode)
                if reservation is not None:
                    return reservation
                woken: asyncio.Future[None] = loop.create_future()
                self._waiting.append((loop, woken))
            try:
                await woken
            finally:
                with self._lock:
                    if (loop, woken) in self._waiting:
                        self._waiting.remove((loop, woken))

    def _try_reserve(self, episode: UsageTotals) -> Reservation | None:
        """Under the lock: a reservation, `None` to wait, or `BudgetExceeded`."""
        error = self.exceeded(episode)
        if error is not None:
            raise error
        if self.max_run_tokens is None and self.max_run_cost is None:
            tokens, cost = self._largest
            return Reservation(self, tokens=tokens, cost_usd=cost, counted=False)
        if self._in_flight and not self._room():
            return None
        return self._take()

    def _room(self) -> bool:
        """Whether the charged totals plus the estimates in flight leave room under the run caps."""
        if not self._run.steps:
            return False  # nothing to estimate with yet
        tokens, cost = self._held
        if self.max_run_tokens is not None and self._run.tokens + tokens >= self.max_run_tokens:
            return False
        return self.max_run_cost is None or self._run.known_cost_usd + cost < self.max_run_cost

    def _take(self) -> Reservation:
        tokens, cost = self._largest
        self._held = (self._held[0] + tokens, self._held[1] + cost)
        self._in_flight += 1
        return Reservation(self, tokens=tokens, cost_usd=cost)

    def _add(self, totals: UsageTotals) -> None:
        self._run = self._run + totals
        if totals.steps:
            step = (-(-totals.tokens // totals.steps), totals.known_cost_usd / totals.steps)
            self._largest = (max(self._largest[0], step[0]), max(self._largest[1], step[1]))

    def _end(self, reservation: Reservation, step: UsageTotals | None) -> None:
        with self._lock:
            if reservation.counted:
                self._held = (
                    self._held[0] - reservation.tokens,
                    self._held[1] - reservation.cost_usd,
                )
                self._in_flight -= 1
                if not self._in_flight:
                    self._held = (0, 0.0)  # no float drift left behind
            if step is not None:
                self._add(step)
            self._wake()

    def _wake(self) -> None:
        """Under the lock: let every waiting request look again."""
        self._settled.notify_all()
        waiting, self._waiting = self._waiting, []
        for loop, woken in waiting:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits there now
                loop.call_soon_threadsafe(_resolve, woken)

    def run_exceeded(self) -> str | None:
        """Why the run cap is reached, or `None` while the run may go on."""
        return _reached(self._run, self.max_run_tokens, self.max_run_cost, "run")

    def exceeded(self, episode: UsageTotals) -> BudgetExceeded | None:
        """The error to end an episode with these totals (the run cap first), or `None`."""
        run = self.run_exceeded()
        if run is not None:
            return BudgetExceeded(
                run, scope="run", tokens=self._run.tokens, cost_usd=self._run.cost_usd
            )
        reason = _reached(episode, self.max_episode_tokens, self.max_episode_cost, "episode")
        if reason is not None:
            return BudgetExceeded(
                reason, scope="episode", tokens=episode.tokens, cost_usd=episode.cost_usd
            )
        return None

    def check(self, episode: UsageTotals) -> None:
        """Raise `BudgetExceeded` when the episode (with these totals) or the run may not send another request."""
        error = self.exceeded(episode)
        if error is not None:
            raise error


class Reservation:
    """One request's place in a `Budget`: `settle` it with the step's totals once answered,
    or `release` it when the call failed (each only once; `release` after `settle` does nothing).

    `tokens` and `cost_usd` are the estimate it holds: the largest step charged in the run
    when it was reserved (held against the run caps only when `counted`).
    """

    __slots__ = ("_budget", "_open", "cost_usd", "counted", "tokens")

    def __init__(
        self, budget: Budget, *, tokens: int = 0, cost_usd: float = 0.0, counted: bool = True
    ) -> None:
        self._budget = budget
        self._open = True
        self.tokens = tokens
        self.cost_usd = cost_usd
        self.counted = counted

    def settle(self, step: UsageTotals) -> None:
        """Charge the answered step to the budget in place of the estimate (after a `release`,
        just charge it)."""
        if self._open:
            self._open = False
            self._budget._end(self, step)
        else:
            self._budget.charge(step)

    def release(self) -> None:
        """Give the place back without charging anything (the request failed or was never sent)."""
        if self._open:
            self._open = False
            self._budget._end(self, None)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _on_a_loop() -> bool:
    """Whether this thread is running an asyncio event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def check_budget(budget: object) -> Budget | None:
    """`budget` when it is a `Budget` or `None`, else a `ConfigError` (caps given as a mapping
    are passed to `Budget(...)` as keywords)."""
    if budget is not None and not isinstance(budget, Budget):
        raise ConfigError(
            f"budget must be a Budget or None (build one with Budget(max_episode_cost=...)); "
            f"got {type(budget).__name__} {excerpt(budget)}"
        )
    return budget
