"""The Ray actors of a task-list run: the episode runner, and the cluster-wide rate limiter
and run budget with the handles episodes reach them through.

`EpisodeActor` runs `arun_task` for each task the driver (`adapters.runs.ray_runner`) hands
it; `LimiterActor` and `BudgetActor` hold the run's shared rate limit and caps, reached
through `RayLimiter` and `RayBudget`, which pickle and travel to the workers. A call to a
shared actor that has died is one line naming it (`_reaching`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import re
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
)
from typing import Any

from adapters.accounting.budget import Budget, Reservation
from adapters.accounting.cost import UsageTotals
from adapters.engine.limits import DEFAULT_MAX_PAUSE, RateLimiter
from adapters.errors import (
    BudgetExceeded,
    ConfigurationError,
    RateLimitWaitError,
    _text,
    error_line,
    error_text,
)
from adapters.runs._relay import Channel, Logged, Retried, Said, telling
from adapters.runs.environments import in_thread
from adapters.runs.progress import Quiet, RunListener
from adapters.runs.screening import Screening
from adapters.runs.tasks import (
    OsworldTask,
    TaskOutcome,
    arun_task,
)
from osharm_core import AgentConfig


def _ray() -> Any:
    """The `ray` module, or a `ConfigurationError` saying how to install it."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ConfigurationError(
            "running on Ray needs the ray extra: pip install 'osharm-core[ray]'"
        ) from None


class _SharedActorDied(Exception):
    """Raised in an episode when one of the cluster's shared actors (rate limiter, run budget)
    has died. Not an `OsharmError`, so `arun_task` does not take it for the episode's own
    failure: it stops the run, and the driver raises it as an `EnvironmentFailure`."""


@contextlib.contextmanager
def _reaching(name: str, error: type[Exception] = _SharedActorDied) -> Iterator[None]:
    """Ray's error from a call to the cluster's `name` actor once that actor is gone (the OOM
    killer, a lost node, a kill), as one line in `error`; Ray's own is a multi-line dump."""
    try:
        yield
    except Exception as exc:
        errors = _ray().exceptions
        if not isinstance(exc, errors.RayActorError) or isinstance(exc, errors.RayTaskError):
            raise
        gone = "cannot be reached" if isinstance(exc, _unavailable(errors)) else "died"
        raise error(
            f"the cluster's {name} actor {gone}: {_reason(exc)}; a rerun resumes the run "
            "(finished tasks are skipped, the others redone)"
        ) from None


def _unavailable(errors: Any) -> tuple[type[BaseException], ...]:
    """Ray's `ActorUnavailableError`, where the installed Ray has it."""
    try:
        return (errors.ActorUnavailableError,)
    except AttributeError:  # a Ray older than 2.40
        return ()


class LimiterActor:
    """The body of the Ray actor that holds a model's `RateLimiter` for the whole cluster.

    Deadlines cross machines as seconds left, not as clock readings.
    """

    def __init__(
        self,
        requests_per_minute: float | None,
        tokens_per_minute: float | None,
        max_pause: float = DEFAULT_MAX_PAUSE,
    ) -> None:
        self.limiter = RateLimiter(
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
            max_pause=max_pause,
        )

    def reserve(self, seconds_left: float | None, provider: str) -> float | str:
        """A turn's wait, or the message of the `RateLimitWaitError` it would raise."""
        deadline = None if seconds_left is None else time.monotonic() + seconds_left
        try:
            return self.limiter.reserve(deadline=deadline, provider=provider)
        except RateLimitWaitError as error:
            return error.message

    def admit(self, seconds_left: float | None) -> float:
        """See `RateLimiter.admit`."""
        deadline = None if seconds_left is None else time.monotonic() + seconds_left
        return self.limiter.admit(deadline=deadline)

    def release(self) -> None:
        """See `RateLimiter.release`."""
        self.limiter.release()

    def hold(self) -> float:
        """See `RateLimiter.hold`."""
        return self.limiter.hold()

    def unreserve(self, seconds_left: float) -> None:
        """See `RateLimiter.unreserve` (`due` as the seconds left until it)."""
        self.limiter.unreserve(due=time.monotonic() + seconds_left)

    def observe(self, status: int, headers: dict[str, str], tokens: int | None) -> None:
        """See `RateLimiter.observe`."""
        self.limiter.observe(status, headers, tokens)

    def counts(self) -> tuple[int, int]:
        """(turns that waited, pauses the provider caused)."""
        return self.limiter.waits, self.limiter.pauses


class RayLimiter:
    """A `Limiter` that is a handle to the cluster's `LimiterActor` (picklable, so it travels)."""

    def __init__(self, actor: Any, *, counts_tokens: bool = True) -> None:
        self.actor = actor
        # Without a token budget there is no room to ask for: no round trip for it per try.
        self.counts_tokens = counts_tokens

    def reserve(self, *, deadline: float | None = None, provider: str = "") -> float:
        """Ask the limiter actor for a turn (blocks for the round trip, never for the wait)."""
        left = None if deadline is None else deadline - time.monotonic()
        with _reaching("rate limiter"):
            answer = _ray().get(self.actor.reserve.remote(left, provider))
        if isinstance(answer, str):
            raise RateLimitWaitError(answer, provider=provider or "rate limiter")
        return float(answer)

    def admit(self, *, deadline: float | None = None) -> float:
        """Ask the limiter actor for room in the token budget (blocks for the round trip only)."""
        if not self.counts_tokens:
            return 0.0
        left = None if deadline is None else deadline - time.monotonic()
        with _reaching("rate limiter"):
            return float(_ray().get(self.actor.admit.remote(left)))

    def release(self) -> None:
        """Give the room back (without waiting for the actor to take note)."""
        if not self.counts_tokens:
            return
        with _reaching("rate limiter"):
            self.actor.release.remote()

    def hold(self) -> float:
        """See `RateLimiter.hold`."""
        with _reaching("rate limiter"):
            return float(_ray().get(self.actor.hold.remote()))

    def unreserve(self, *, due: float) -> None:
        """Give the turn back (without waiting for the actor to take note)."""
        with _reaching("rate limiter"):
            self.actor.unreserve.remote(due - time.monotonic())

    def observe(self, status: int, headers: Mapping[str, str], tokens: int | None = None) -> None:
        """Tell the limiter actor about a reply (without waiting for it to take note)."""
        with _reaching("rate limiter"):
            self.actor.observe.remote(status, {str(k): str(v) for k, v in headers.items()}, tokens)


class BudgetActor:
    """The body of the Ray actor that keeps a run's caps for the whole cluster (an async
    actor: a request waiting for room awaits without holding up the others).

    Each actor's `RayBudget` reserves a place here before each request and settles or
    releases it after; the places of an episode whose actor died are given back by the driver.
    It starts from what the driver's budget was already charged (`spent`, with its
    `largest_step`), as that budget would go on counting in one process.
    """

    def __init__(
        self,
        max_run_tokens: int | None,
        max_run_cost: float | None,
        spent: UsageTotals | None = None,
        largest_step: tuple[int, float] = (0, 0.0),
    ) -> None:
        self.budget = Budget(max_run_tokens=max_run_tokens, max_run_cost=max_run_cost)
        self.budget.carry_over(spent or UsageTotals(), largest_step)
        self.held: dict[int, tuple[str, Reservation]] = {}
        self.taken = 0
        self.ended: set[str] = set()

    async def reserve(self, owner: str) -> tuple[int, int, float] | tuple[str, int, float | None]:
        """A place's number with the estimate it holds (tokens, dollars), or what
        `BudgetExceeded` says (reason, tokens, cost) when none is left."""
        try:
            reservation = await self.budget.areserve(UsageTotals())
        except BudgetExceeded as exc:
            return exc.reason, exc.tokens, exc.cost_usd
        if owner in self.ended:  # asked for by an episode that has ended since
            reservation.release()
            return "the episode has ended", 0, None
        self.taken += 1
        self.held[self.taken] = (owner, reservation)
        return self.taken, reservation.tokens, reservation.cost_usd

    def settle(self, number: int, step: UsageTotals | None) -> None:
        """Charge an answered step in place of its estimate (`None`: give the place back)."""
        found = self.held.pop(number, None)
        if found is None:
            return
        if step is None:
            found[1].release()
        else:
            found[1].settle(step)

    def forget(self, owner: str) -> None:
        """An episode ended (or its actor died): give back every place it holds or will get."""
        self.ended.add(owner)
        for number in [n for n, (who, _) in self.held.items() if who == owner]:
            self.held.pop(number)[1].release()

    def run_exceeded(self) -> str | None:
        """See `Budget.run_exceeded`."""
        return self.budget.run_exceeded()


class RayBudget(Budget):
    """An episode's `Budget` in a worker actor: its episode caps here, the run's caps in the
    cluster's `BudgetActor` (a place per request, as `Budget.reserve` keeps them in one process)."""

    def __init__(self, holder: Any, owner: str, **caps: Any) -> None:
        super().__init__(**caps)
        self.holder, self.owner = holder, owner
        self._numbers: dict[int, int] = {}

    def reserve(self, episode: UsageTotals) -> Reservation:
        """Check the episode's caps, then wait for a place in the run's (blocking this thread)."""
        self.check(episode)
        with _reaching("run budget"):
            answer = _ray().get(self.holder.reserve.remote(self.owner))
        return self._placed(answer)

    async def areserve(self, episode: UsageTotals) -> Reservation:
        """`reserve` for async callers."""
        self.check(episode)
        with _reaching("run budget"):
            answer = await self.holder.reserve.remote(self.owner)
        return self._placed(answer)

    def _placed(
        self, answer: tuple[int, int, float] | tuple[str, int, float | None]
    ) -> Reservation:
        place, tokens, cost = answer
        if isinstance(place, str):
            raise BudgetExceeded(place, scope="run", tokens=tokens, cost_usd=cost)
        reservation = Reservation(self, tokens=tokens, cost_usd=cost or 0.0)
        self._numbers[id(reservation)] = place
        return reservation

    def _end(self, reservation: Reservation, step: UsageTotals | None) -> None:
        number = self._numbers.pop(id(reservation), None)
        if step is not None:
            self.charge(step)
        if number is not None:  # waited for, so the run's next check sees it
            with _reaching("run budget"):
                _ray().get(self.holder.settle.remote(number, step))


class EpisodeActor:
    """The body of one Ray worker actor: runs episodes one after another, each into its folder."""

    def __init__(
        self,
        config_json: str,
        result_dir: str,
        make_agent: Callable[[OsworldTask, RayLimiter | None], Any],
        make_env: Callable[[OsworldTask], Any],
        max_steps: int,
        episode_timeout: float | None,
        limiter: RayLimiter | None,
        episode_caps: Mapping[str, Any] | None = None,
        continue_unfinished: bool = False,
        run_caps: Any = None,
        relay_messages: bool = False,
        screening: Screening | None = None,
    ) -> None:
        self.run_caps = run_caps  # the `BudgetActor`, when the run has caps
        self.relay_messages = relay_messages
        self.screening = screening
        # What episodes said that no stream of theirs took (see `_relay`), for `unsent`.
        self._unsent: list[Said] = []
        self.config = AgentConfig.from_json(json.loads(config_json))
        self.result_dir = result_dir
        self.make_agent, self.make_env = make_agent, make_env
        self.max_steps, self.episode_timeout = max_steps, episode_timeout
        self.limiter, self.episode_caps = limiter, episode_caps
        self.continue_unfinished = continue_unfinished
        self._under_way: set[asyncio.Future[TaskOutcome | _Raised]] = set()

    def ready(self) -> bool:
        """True once the actor runs (the driver hands it tasks only then)."""
        return True

    async def run(self, task: OsworldTask) -> TaskOutcome | _Raised:
        """One task (skipped when its folder is finished), as `arun_task` runs it (see
        `_Raised` for an error whose message cannot be read).

        An async actor method: `ray.cancel` of the call cancels the episode on the actor's
        event loop, so it ends as `arun_task_list`'s cancelled episodes do (its environment
        closed once the call under way returns).
        """
        return await self._started(task, None, self._channel(self._unsent.append))

    async def stream(
        self, task: OsworldTask
    ) -> AsyncIterator[tuple[int, int] | Said | TaskOutcome | _Raised]:
        """`run`, yielding (step, max_steps) as each model step comes back (and, relaying,
        what the episode says as it says it), then the outcome.

        Called as a Ray streaming generator, so the driver's listener hears the
        steps while the episode runs; `ray.cancel` of it cancels the episode as for `run`.
        """
        for said in self.unsent():  # from an earlier episode's threads, after its stream
            yield said
        items: asyncio.Queue[tuple[int, int] | Said | None] = asyncio.Queue()
        channel = self._channel(items.put_nowait)
        episode = self._started(task, _Steps(items.put_nowait), channel)
        episode.add_done_callback(lambda _: items.put_nowait(None))
        try:
            while (item := await items.get()) is not None:
                yield item
            yield episode.result()
        finally:
            if channel is not None:  # what it said and says from now on waits for `unsent`
                channel.put = self._unsent.append
                while not items.empty():
                    if isinstance(item := items.get_nowait(), Retried | Logged):
                        self._unsent.append(item)
            if not episode.done():  # the call was cancelled: so is its episode, waited for
                episode.cancel()
                await asyncio.wait([episode])

    async def settle(self) -> list[Said]:
        """Wait until the episodes under way here have ended; what they said that no stream
        took (see `unsent`). Ray may report a cancelled call ended before its episode has
        closed its environment; the driver asks this before it kills the actor."""
        if self._under_way:
            await asyncio.wait(list(self._under_way))
        return self.unsent()

    def unsent(self) -> list[Said]:
        """What episodes here said (relaying) that no stream of theirs took, taken: all an
        episode `run` said, once it has ended."""
        said, self._unsent = self._unsent, []
        return said

    def _channel(self, put: Callable[[Said], None]) -> Channel | None:
        """Where an episode's sayings go (to `put`), when this actor relays them."""
        return Channel(asyncio.get_running_loop(), put) if self.relay_messages else None

    def _started(
        self, task: OsworldTask, listener: RunListener | None, channel: Channel | None
    ) -> asyncio.Future[TaskOutcome | _Raised]:
        """The episode of `task` as a task on this actor's loop, known to `settle`; what it
        says goes to `channel`."""
        running = _sendable(task, self._episode(task, listener))
        episode = asyncio.ensure_future(running if channel is None else telling(channel, running))
        self._under_way.add(episode)
        episode.add_done_callback(self._under_way.discard)
        return episode

    def _episode(
        self, task: OsworldTask, listener: RunListener | None
    ) -> Coroutine[Any, Any, TaskOutcome]:
        episode = arun_task(
            task,
            config=self.config,
            result_dir=self.result_dir,
            make_agent=lambda t: self.make_agent(t, self.limiter),
            make_env=lambda t: in_thread(self.make_env(t)),
            max_steps=self.max_steps,
            episode_timeout=self.episode_timeout,
            listener=listener,
            continue_unfinished=self.continue_unfinished,
            screening=self.screening,
            # Each episode's own caps; the run's caps are kept by the `BudgetActor`.
            budget=self._budget(task),
        )
        if self.run_caps is None:
            return episode
        holder = self.run_caps

        async def then_give_back() -> TaskOutcome:
            try:
                return await episode
            finally:  # whatever ended it (a timeout cancels a request in flight)
                # A dead holder has nothing to give back (the next request says it died).
                with contextlib.suppress(_ray().exceptions.RayActorError):
                    await holder.forget.remote(_owner(task))

        return then_give_back()

    def _budget(self, task: OsworldTask) -> Budget | None:
        if self.episode_caps is None:
            return None
        if self.run_caps is None:
            return Budget(**self.episode_caps)
        return RayBudget(self.run_caps, _owner(task), **self.episode_caps)


class _Raised:
    """An error an episode raised whose message cannot be read (its `__str__` raises), sent
    to the driver as a value for it to raise: raised in the actor, Ray would format it and
    send the driver the error of that `__str__` instead, losing the episode's."""

    def __init__(self, error: Exception) -> None:
        self.error = error


async def _sendable(task: OsworldTask, episode: Awaitable[TaskOutcome]) -> TaskOutcome | _Raised:
    """`episode`'s outcome; what it raises, raised, unless Ray cannot carry it (`_Raised`).

    An error that does not survive pickling is replaced by a `RuntimeError` naming its
    type (`error_line`) and the task."""
    try:
        return await episode
    except Exception as exc:
        if _text(exc) is not None:  # printable: Ray carries it (see `_raised_remotely`)
            raise
        pickler = importlib.import_module("ray.cloudpickle")
        try:
            pickler.loads(pickler.dumps(exc))
        except Exception:
            return _Raised(
                RuntimeError(
                    f"{error_line(exc)} (raised by the episode of {_owner(task)}; "
                    "it cannot be sent from its Ray worker)"
                )
            )
        return _Raised(exc)


class _Steps(Quiet):
    """A `RunListener` in an actor that passes each model step on to `sink`
    (the driver tells starts and ends itself)."""

    def __init__(self, sink: Callable[[tuple[int, int]], None]) -> None:
        self.sink = sink

    def stepped(self, task: OsworldTask, step: int, max_steps: int) -> None:
        """Pass the step on."""
        self.sink((step, max_steps))


def _owner(task: OsworldTask) -> str:
    """Who holds a place in the run's caps: the task (one episode at a time each)."""
    return f"{task.domain}/{task.example_id}"


def _reason(error: BaseException, limit: int = 200) -> str:
    """Ray's reason for a death in one line: its whole sentences up to `limit` characters.

    Ray's `ActorDiedError` reads: a headline, tab-indented fields (ids, pid,
    address), then why the actor died and a list of common causes.
    """
    fields = [line for line in error_text(error).splitlines() if line.strip() and line[0] != "\t"]
    text = " ".join(line.strip() for line in (fields[1:] or fields)) or type(error).__name__
    kept = ""
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if kept and len(kept) + 1 + len(sentence) > limit:
            break
        kept = f"{kept} {sentence}".strip()
    return kept if len(kept) <= limit else kept[: limit - 3] + "..."
