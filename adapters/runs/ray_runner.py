"""Task lists over a Ray cluster: one environment per actor, rate limits held by one actor.

`run_task_list_on_ray` is `arun_task_list` spread over machines. Each of
`actors` Ray actors owns one environment at a time (environments are never
shared: an actor runs one episode after another, each with the environment
`make_env` gives it, which for a VM can be that actor's own machine) and
writes its episodes into the same result-folder layout under `result_dir`,
which must therefore be storage every node sees (a shared or network
folder). The resume rules are `arun_task_list`'s: a finished folder
(`is_finished`) is never run again (the driver does not even schedule it, and
the actor checks again), any other is emptied and redone.

Rate limits are cluster-wide: one actor holds the `RateLimiter` and every
model client reaches it through a `RayLimiter` handle (`limiter` of the
agents' clients). So are a budget's run caps: one `BudgetActor` holds them and
each episode's `RayBudget` reserves a place there before every request. The
configuration travels as JSON (`AgentConfig.to_json`);
`make_agent(task, limiter)` and `make_env` are pickled to the actors (Ray's
cloudpickle), so they must only refer to what the workers can import.

A worker actor that dies mid-run (the OOM killer, a lost node, an
environment that ends its process) costs only its episode: that task is
`failed` with Ray's reason, its folder stays unfinished (a rerun redoes it)
and the run goes on with the other actors. With none left, the run stops
with an `EnvironmentFailure`; so does the death of the rate limiter's or the
run budget's actor, in one line naming it.

What an episode says in its actor (a retry scheduled, a warning logged) comes to the
driver's stamina hooks and logging with `relay_messages` (see `adapters.runs._relay`).

Ray is an optional extra (`pip install 'osharm-core[ray]'`) imported only
when these functions run; importing `adapters` never imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Final

from adapters.accounting.budget import Budget, Reservation
from adapters.accounting.cost import UsageTotals
from adapters.engine.limits import DEFAULT_MAX_PAUSE, RateLimiter
from adapters.errors import (
    BudgetExceeded,
    ConfigurationError,
    EnvironmentFailure,
    RateLimitWaitError,
    _text,
    error_line,
    error_text,
)
from adapters.runs._relay import Channel, Logged, Retried, Said, relay, telling
from adapters.runs.environments import in_thread
from adapters.runs.progress import Quiet, RunListener, RunResult, RunSummary
from adapters.runs.tasks import (
    OsworldTask,
    ResultFolders,
    RunSettings,
    TaskOutcome,
    arun_task,
    settled_before_start,
    task_folders,
)
from adapters.trajectories.osharm import result_folder
from osharm_core import AgentConfig, ConfigError
from osharm_core.errors import check_flag

#: How long the driver waits for a first actor to start before it gives up.
DEFAULT_START_TIMEOUT: Final = 300.0


#: How long the driver tries to reach a named cluster before saying nothing answers there.
CONNECT_TIMEOUT: Final = 10.0

#: How long a run that stops (an episode's error, Ctrl-C) waits for the episodes under way,
#: cancelled, to close their environments before it kills their actors.
STOP_TIMEOUT: Final = 120.0


def _check_reachable(address: str | None) -> None:
    """A `ConfigurationError` when nothing answers at a named `HOST:PORT` (or `ray://...`):
    Ray itself would keep trying to connect for many minutes."""
    if address is None or address in ("auto", "local"):
        return
    where = address.removeprefix("ray://").rstrip("/")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        return  # not HOST:PORT: Ray's own error names it
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT):
            pass
    except (OSError, OverflowError) as exc:
        raise ConfigurationError(
            f"no Ray cluster answers at {address}: {error_text(exc)} (start it, or check --ray)"
        ) from None


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
    ) -> None:
        self.run_caps = run_caps  # the `BudgetActor`, when the run has caps
        self.relay_messages = relay_messages
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


def _cpu_share(value: object) -> float:
    """A Ray CPU request: a fraction in (0, 1] or a whole number (what Ray accepts)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"cpus_per_actor must be a number; got {value!r}")
    if not (0 < value <= 1 or (value > 1 and float(value).is_integer())):
        raise ConfigError(
            f"cpus_per_actor must be a fraction in (0, 1] or a whole number; got {value!r}"
        )
    return float(value)


def run_task_list_on_ray(
    tasks: Sequence[OsworldTask],
    *,
    config: AgentConfig,
    result_dir: str | os.PathLike[str],
    make_agent: Callable[[OsworldTask, RayLimiter | None], Any],
    make_env: Callable[[OsworldTask], Any] | Sequence[Callable[[OsworldTask], Any]],
    max_steps: int,
    actors: int = 2,
    cpus_per_actor: float = 1.0,
    start_timeout: float = DEFAULT_START_TIMEOUT,
    address: str | None = None,
    episode_timeout: float | None = None,
    requests_per_minute: float | None = None,
    tokens_per_minute: float | None = None,
    shared_limiter: bool = True,
    report: Callable[[TaskOutcome], None] = lambda _: None,
    listener: RunListener | None = None,
    continue_unfinished: bool = False,
    budget: Budget | None = None,
    relay_messages: bool = False,
) -> RunResult:
    """Run a task list on `actors` Ray actors; outcomes in task order with the run's summary.

    `address` is Ray's (`auto`, `ray://HOST:10001`, `HOST:6379`); when Ray is
    already initialised in this process (`ray.init` was called) it is used as
    it is, else it is initialised here and shut down at the end. `make_env`
    is one factory for every actor or one per actor (e.g. each its own VM).
    `make_agent(task, limiter)` builds the agent in the actor; give
    `limiter` (a `RayLimiter`, `None` when `shared_limiter` is off) to its
    model client so the whole cluster shares one limit. A task whose actor
    raised anything but what ends an episode as failed there (a model failure, a failed
    setup, an `EnvironmentFailure` other than a VM that gives no answer or could not be
    reverted, a timeout) stops the run with that error (as `arun_task_list` does; one
    whose `__str__` raises is raised as itself too, see `_Raised`), leaving the task to be
    redone; the episodes under way on the other actors (as on
    Ctrl-C) are cancelled, so each closes its environment as in `arun_task_list`, and
    waited for (at most `STOP_TIMEOUT` seconds) before the actors are killed. A task
    whose actor died (its process ended: the OOM killer, a lost node) is
    `failed` with Ray's reason, its folder left unfinished for the next run;
    that actor is dropped and the others take the remaining tasks; when no
    actor is left the run stops with an `EnvironmentFailure`. `listener`
    hears each model step as the actors report it (not through Ray Client,
    `ray://`, which cannot stream: there it hears starts and ends only). Only
    as many actors start as there are unfinished tasks (none when all are).
    `continue_unfinished` is `arun_task_list`'s. With a `budget`, each
    episode keeps its caps in its actor (with the budget's prices); the run's
    caps are kept per request for the whole cluster by one `BudgetActor` (each
    request holds a place as `Budget.reserve` gives one; a dead actor's places
    are given back; it starts from what `budget` was already charged, as
    `arun_task_list` would count on), the driver adds each ended episode's usage to
    `budget`'s totals and stops handing out tasks once a run cap is reached (those
    are `stopped`).

    With `relay_messages`, what the episodes say in their actors comes to this process as
    they say it (through Ray Client, `ray://`, as each episode ends): each retry stamina
    schedules goes to this process's stamina hooks (a `RetryDetails` without the call's
    arguments) and each record the library's loggers pass there (`adapters.*` and the
    agent's `desktopenv.agent`; warnings and above unless logging is configured on the
    workers) to this process's logger of that name, so they come out as they would had the
    episodes run here (the CLI's "trying again" lines and warnings). Off by default: a
    cluster whose workers' logs already reach the driver would show them twice.

    Each actor asks Ray for `cpus_per_actor` CPUs (default 1; an episode
    that mostly waits on a remote model and VM needs far less, e.g. 0.25).
    An actor gets tasks only once Ray has started it, so a cluster with room
    for fewer actors than asked runs on those it has (more join as it
    grows); when none has started after `start_timeout` seconds the run
    stops with a `ConfigurationError` instead of waiting forever.
    """
    count = RunSettings(
        config=config,
        max_steps=max_steps,
        workers=actors,
        episode_timeout=episode_timeout,
        continue_unfinished=continue_unfinished,
        budget=budget,
    ).workers
    check_flag("shared_limiter", shared_limiter)
    share = _cpu_share(cpus_per_actor)
    if isinstance(start_timeout, bool) or not isinstance(start_timeout, int | float):
        raise ConfigError(f"start_timeout must be a number of seconds; got {start_timeout!r}")
    if not start_timeout > 0:
        raise ConfigError(f"start_timeout must be > 0; got {start_timeout!r}")
    factories = [make_env] * count if callable(make_env) else list(make_env)
    if len(factories) != count:
        raise ConfigError(f"make_env gives {len(factories)} factories for {count} actors")
    ray = _ray()
    task_folders(tasks, config, result_dir)  # refused before any actor starts
    began = time.monotonic()
    hears = listener if listener is not None else Quiet()
    outcomes: dict[int, TaskOutcome] = {}
    pending = []
    layout = ResultFolders(result_dir, config, max_steps)
    for index, task in enumerate(tasks):
        skipped = settled_before_start(task, layout, None)
        if skipped is not None:
            outcomes[index] = skipped
            hears.ended(outcomes[index])
            report(outcomes[index])
        else:
            pending.append(index)
    if not pending:  # nothing to run: no cluster needed
        done = [outcomes[i] for i in range(len(tasks))]
        return RunResult(tuple(done), RunSummary.of(done, time.monotonic() - began))
    factories = factories[: len(pending)]
    own_cluster = not ray.is_initialized()
    if own_cluster:
        _check_reachable(address)
        try:
            with _own_sigterm():
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except ConnectionError:  # `auto` finding no cluster: Ray's words name its own flags
            raise ConfigurationError(
                f"no Ray cluster answers at {address}: Ray found none to join "
                "(start it, or check --ray)"
            ) from None
    spawned: list[Any] = []
    try:
        limiter = None
        if shared_limiter:
            holder = ray.remote(num_cpus=0)(LimiterActor).remote(
                requests_per_minute, tokens_per_minute
            )
            spawned.append(holder)
            limiter = RayLimiter(holder, counts_tokens=tokens_per_minute is not None)
        run_caps = None
        if budget is not None and (budget.max_run_tokens, budget.max_run_cost) != (None, None):
            run_caps = ray.remote(num_cpus=0)(BudgetActor).remote(
                budget.max_run_tokens, budget.max_run_cost, budget.run_totals, budget.largest_step
            )
            spawned.append(run_caps)
        worker = ray.remote(num_cpus=share)(EpisodeActor)
        for factory in factories:
            try:
                actor = worker.remote(
                    json.dumps(config.to_json()),
                    os.fspath(result_dir),
                    make_agent,
                    factory,
                    max_steps,
                    episode_timeout,
                    limiter,
                    _episode_caps(budget),
                    continue_unfinished,
                    run_caps,
                    relay_messages,
                )
            except TypeError as exc:  # Ray could not pickle an argument
                text = error_text(exc)  # the pickler's words, about the user's objects
                first = text.splitlines()[0] if text else type(exc).__name__
                raise ConfigurationError(
                    "make_agent and make_env travel to the Ray workers, so they must pickle "
                    f"(module-level functions or functools.partial of them): {first}"
                ) from None
            spawned.append(actor)
        workers = spawned[-len(factories) :]
        stop = _Stop(config, result_dir, budget, run_caps)
        # Ray Client (ray://) cannot stream an actor's steps back: there what an episode
        # says comes when it ends.
        steps = (listener is not None or relay_messages) and not _client(ray)
        _drive(
            ray,
            tasks,
            pending,
            workers,
            outcomes,
            hears,
            report,
            stop,
            start_timeout,
            share,
            steps,
            relay_messages,
        )
    finally:
        for actor in spawned:
            ray.kill(actor)
        if own_cluster:
            ray.shutdown()
    done = [outcomes[i] for i in range(len(tasks))]
    return RunResult(tuple(done), RunSummary.of(done, time.monotonic() - began))


@contextlib.contextmanager
def _own_sigterm() -> Iterator[None]:
    """Keep this process's SIGTERM handler: `ray.init` puts in its own (which exits at once,
    with Ray's crash dump), replacing the CLI's that stops the run as Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if handler is not None:  # None: installed outside Python, cannot be put back
            signal.signal(signal.SIGTERM, handler)


def _client(ray: Any) -> bool:
    """Whether this process talks to its cluster through Ray Client (`ray://`)."""
    return bool(importlib.import_module("ray.util.client").ray.is_connected())


def _owner(task: OsworldTask) -> str:
    """Who holds a place in the run's caps: the task (one episode at a time each)."""
    return f"{task.domain}/{task.example_id}"


def _episode_caps(budget: Budget | None) -> dict[str, Any] | None:
    """What an actor needs to keep a budget's episode caps (a `Budget` holds a lock: not sent)."""
    if budget is None:
        return None
    return {
        "max_episode_tokens": budget.max_episode_tokens,
        "max_episode_cost": budget.max_episode_cost,
        "prices": budget.prices,
    }


class _Stop:
    """The driver's side of a run budget: charges ended episodes, stops tasks past a run cap."""

    def __init__(
        self,
        config: AgentConfig,
        result_dir: str | os.PathLike[str],
        budget: Budget | None,
        run_caps: Any = None,
    ) -> None:
        self.config, self.result_dir, self.budget = config, result_dir, budget
        self.run_caps = run_caps

    def before(self, task: OsworldTask) -> TaskOutcome | None:
        """The task's outcome when it is not to be handed out (see `settled_before_start`)."""
        reason = None
        if self.run_caps is not None:
            with _reaching("run budget", EnvironmentFailure):
                reason = _ray().get(self.run_caps.run_exceeded.remote())
        layout = ResultFolders(self.result_dir, self.config, 1)
        return settled_before_start(task, layout, self.budget, reason)

    def after(self, outcome: TaskOutcome) -> None:
        if self.budget is not None and outcome.usage is not None:
            self.budget.charge(outcome.usage)

    def died(self, task: OsworldTask) -> None:
        """Give back the places a dead actor's episode held in the run's caps."""
        if self.run_caps is not None:
            with _reaching("run budget", EnvironmentFailure):
                _ray().get(self.run_caps.forget.remote(_owner(task)))


def _started(ray: Any, ref: Any) -> str | None:
    """Wait for an actor's `ready()`: `None` once it runs, Ray's reason when its process died
    while it started (the OOM killer, a lost node), a `ConfigurationError` when starting it
    raised (make_agent or make_env could not be unpickled there)."""
    try:
        ray.get(ref)
    except ray.exceptions.RayActorError as exc:
        if not exc.actor_init_failed:
            return _reason(exc)
        lines = [line for line in error_text(exc).splitlines() if line.strip()]
        cause = next(
            (line for line in reversed(lines) if "Error" in line), lines[-1] if lines else ""
        )
        raise ConfigurationError(
            "a Ray worker actor could not start (is the code make_agent and make_env use "
            f"importable on every node? see Ray's runtime_env): {cause.strip()[:300]}"
        ) from None
    return None


class _Running:
    """An episode handed to an actor: its task's index, the actor, when, and the steps heard."""

    def __init__(self, index: int, actor: Any) -> None:
        self.index, self.actor = index, actor
        self.began = time.monotonic()
        self.steps = 0


def _died(ray: Any, error: BaseException) -> bool:
    """Whether `error` (from an actor's episode) says the actor's process is gone."""
    deaths = (
        ray.exceptions.RayActorError,
        ray.exceptions.OutOfMemoryError,
        ray.exceptions.NodeDiedError,
        ray.exceptions.WorkerCrashedError,
    )
    # A RayTaskError is an error the episode raised (even one from a nested ray.get).
    return isinstance(error, deaths) and not isinstance(error, ray.exceptions.RayTaskError)


def _raised_remotely(ray: Any, error: Exception) -> Exception:
    """The error an actor's episode raised, as it raised it (Ray's `RayTaskError` wraps it in
    the actor's whole traceback, which the CLI would print as its one error line)."""
    cause = error.cause if isinstance(error, ray.exceptions.RayTaskError) else None
    if isinstance(cause, _SharedActorDied):
        return EnvironmentFailure(str(cause))
    return cause if isinstance(cause, Exception) else error


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


def _drive(
    ray: Any,
    tasks: Sequence[OsworldTask],
    pending: list[int],
    workers: list[Any],
    outcomes: dict[int, TaskOutcome],
    hears: RunListener,
    report: Callable[[TaskOutcome], None],
    stop: _Stop,
    start_timeout: float,
    share: float,
    steps: bool = False,
    relaying: bool = False,
) -> None:
    """Keep every started actor busy with the next unfinished task until none is left.

    With `steps`, each episode is a streaming generator (`EpisodeActor.stream`)
    whose step numbers go to `hears` as they come; else one call (`run`). With
    `relaying`, what the episodes say (`_relay`) goes to this process's stamina hooks
    and logging: as it comes when streamed, else once each episode has ended.
    """
    running: dict[Any, _Running] = {}
    try:
        _hand_out(
            ray,
            tasks,
            pending,
            workers,
            running,
            outcomes,
            hears,
            report,
            stop,
            start_timeout,
            share,
            steps,
            relaying,
        )
    except BaseException:
        # An episode raised, or the run was interrupted: the others are cancelled and waited
        # for, so each closes its environment (a VM stopped, a recording saved) before the
        # actors are killed, as `arun_task_list` stops its episodes; what they said on the
        # way out is relayed.
        _stop_running(ray, running, steps)
        raise


def _stop_running(
    ray: Any, running: Mapping[Any, _Running], steps: bool, timeout: float = STOP_TIMEOUT
) -> None:
    """Cancel the episodes under way (`ray.cancel`: each ends as a cancelled `arun_task`,
    closing its environment) and wait at most `timeout` seconds for them to end, on their
    actors too (`EpisodeActor.settle`), relaying what they said."""
    for call in running:
        with contextlib.suppress(Exception):  # one that has ended already
            ray.cancel(call)
    deadline = time.monotonic() + timeout
    _wait_calls(ray, list(running), steps, deadline)
    if running:
        with contextlib.suppress(Exception):  # an actor that has died has nothing to close
            settled = [r.actor.settle.remote() for r in running.values()]
            ready, _ = ray.wait(
                settled,
                num_returns=len(settled),
                timeout=max(0.0, deadline - time.monotonic()),
            )
            for ref in ready:
                with contextlib.suppress(Exception):
                    relay(ray.get(ref))


def _wait_calls(ray: Any, calls: list[Any], steps: bool, deadline: float) -> None:
    """Wait until the cancelled `calls` have ended (a streamed one once its items are all
    taken), or `deadline` (`time.monotonic()`) has passed."""
    while calls:
        ready, calls = ray.wait(calls, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            return
        if steps:  # a streamed episode has ended once its items are all taken
            for call in ready:
                try:
                    item = next(call)
                except StopIteration:
                    continue
                with contextlib.suppress(Exception):  # its cancellation, or its own error
                    said = ray.get(item)
                    if isinstance(said, Retried | Logged):
                        relay([said])
                calls.append(call)


def _hand_out(
    ray: Any,
    tasks: Sequence[OsworldTask],
    pending: list[int],
    workers: list[Any],
    running: dict[Any, _Running],
    outcomes: dict[int, TaskOutcome],
    hears: RunListener,
    report: Callable[[TaskOutcome], None],
    stop: _Stop,
    start_timeout: float,
    share: float,
    steps: bool,
    relaying: bool,
) -> None:
    """`_drive`'s loop; `running` holds the calls under way (left there when it raises)."""
    waiting = list(reversed(pending))
    starting = {actor.ready.remote(): actor for actor in workers}
    idle: list[Any] = []
    deaths: list[str] = []
    ever_started = False
    waiting_since = time.monotonic()
    while waiting or running:
        while waiting and idle:
            index = waiting.pop()
            stopped = stop.before(tasks[index])
            if stopped is not None:
                outcomes[index] = stopped
                hears.ended(stopped)
                report(stopped)
                continue
            actor = idle.pop()
            hears.started(tasks[index])
            if steps:
                call = actor.stream.options(num_returns="streaming").remote(tasks[index])
            else:
                call = actor.run.remote(tasks[index])
            running[call] = _Running(index, actor)
        if not running and not waiting:
            break
        if not running and not starting:  # every actor that started has died
            if not ever_started:
                raise ConfigurationError(
                    f"no Ray worker actor could start: all {len(workers)} died while starting; "
                    f"the last: {deaths[-1]}"
                )
            raise _no_worker_left(deaths, len(waiting))
        # Started actors are idle or busy, so with nothing running none has started yet.
        timeout = None if running else max(0.0, waiting_since + start_timeout - time.monotonic())
        ready, _ = ray.wait([*running, *starting], num_returns=1, timeout=timeout)
        if not ready:
            if deaths:
                raise _no_worker_left(deaths, len(waiting), len(starting), start_timeout)
            raise ConfigurationError(
                f"no Ray actor started within {start_timeout:g} s: the cluster has no room "
                f"for an actor asking {share:g} CPU(s) (see cpus_per_actor)"
            )
        for ref in ready:
            if ref in starting:
                actor = starting.pop(ref)
                died = _started(ray, ref)
                if died is None:
                    ever_started = True
                    idle.append(actor)
                else:  # its room may go to one not started yet: give that time
                    deaths.append(f"(while starting) {died}")
                    waiting_since = time.monotonic()
                continue
            episode = running[ref]
            task = tasks[episode.index]
            try:
                answer = ray.get(next(ref) if steps else ref)
            except Exception as exc:
                if not _died(ray, exc):
                    raise _raised_remotely(ray, exc) from None
                deaths.append(_reason(exc))
                stop.died(task)
                # Actors not started yet may now get the dead one's room: give them time.
                waiting_since = time.monotonic()
                answer = TaskOutcome(
                    task,
                    result_folder(stop.result_dir, stop.config, task.domain, task.example_id),
                    "failed",
                    detail=f"the Ray worker running it died: {deaths[-1]}",
                    steps=episode.steps,
                    seconds=time.monotonic() - episode.began,
                )
            else:
                if isinstance(answer, tuple):  # a step of a streamed episode
                    episode.steps, max_steps = answer
                    hears.stepped(task, episode.steps, max_steps)
                    continue
                if isinstance(answer, Retried | Logged):  # what a streamed episode said
                    relay([answer])
                    continue
                if relaying and not steps:  # what the episode said, once it has ended
                    relay(_unsent(ray, episode.actor))
                if isinstance(answer, _Raised):  # as `arun_task` raises it
                    raise answer.error
                idle.append(episode.actor)
            del running[ref]
            outcomes[episode.index] = answer
            stop.after(answer)
            hears.ended(answer)
            report(answer)


def _unsent(ray: Any, actor: Any) -> list[Said]:
    """What the episodes of `actor` said that no stream took (none once it has died)."""
    try:
        return list(ray.get(actor.unsent.remote()))
    except ray.exceptions.RayError:
        return []


def _no_worker_left(
    deaths: list[str], left: int, unstarted: int = 0, start_timeout: float = 0.0
) -> EnvironmentFailure:
    """The error that stops a run whose worker actors have all died."""
    others = (
        f" and the {unstarted} other(s) did not start within {start_timeout:g} s"
        if unstarted
        else ""
    )
    return EnvironmentFailure(
        f"{len(deaths)} Ray worker actor(s) died{others}, so no worker is left for the "
        f"{left} task(s) not started; a rerun resumes the run (finished tasks are skipped, "
        f"the others redone). Last death: {deaths[-1]}"
    )


__all__ = [
    "DEFAULT_START_TIMEOUT",
    "BudgetActor",
    "EpisodeActor",
    "LimiterActor",
    "RayBudget",
    "RayLimiter",
    "run_task_list_on_ray",
]
