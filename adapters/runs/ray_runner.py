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

An episode that raises what stops a run (anything but an episode failure: see
`adapters.runs.episode.stops_run`) stops it with that error, as `arun_task_list` does: the
episodes under way are cancelled, each closing its environment, and waited for (at most
`STOP_TIMEOUT` seconds) before the actors are killed. A worker actor that dies mid-run (the
OOM killer, a lost node, an environment that ends its process) costs only its episode: that
task is `failed` with Ray's reason, its folder stays unfinished (a rerun redoes it) and the
run goes on with the other actors. With none left, the run stops with an
`EnvironmentFailure`; so does the death of the rate limiter's or the run budget's actor, in
one line naming it.

With a `budget`, each episode keeps its episode caps in its actor; the run's caps are kept
per request for the whole cluster by one `BudgetActor` (starting from what the budget was
already charged; a dead actor's places are given back), the driver adds each ended
episode's usage to the budget's totals, and stops handing out tasks once a run cap is
reached (those are `stopped`). The listener hears each model step as the actors report it
(through Ray Client, `ray://`, which cannot stream, only starts and ends).

With `relay_messages`, what an episode says in its actor (each retry stamina schedules, each
warning the library's loggers pass) comes to the driver's stamina hooks and loggers as it is
said (through Ray Client, as each episode ends), so it is printed as if the episode ran
here (see `adapters.runs._relay`). Off by default: a cluster whose workers' logs already
reach the driver would show them twice.

Ray is an optional extra (`pip install 'osharm-core[ray]'`) imported only
when these functions run; importing `adapters` never imports it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import (
    Callable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, Final

from adapters.accounting.budget import Budget
from adapters.errors import (
    ConfigurationError,
    EnvironmentFailure,
    error_text,
)
from adapters.runs._relay import Logged, Retried, Said, relay
from adapters.runs.manifest import RunManifest, begin_manifest, end_manifest
from adapters.runs.progress import Quiet, RunListener, RunResult, RunSummary
from adapters.runs.ray_actors import (
    BudgetActor,
    EpisodeActor,
    LimiterActor,
    RayBudget,
    RayLimiter,
    _owner,
    _Raised,
    _ray,
    _reaching,
    _reason,
    _SharedActorDied,
)
from adapters.runs.screening import Screening
from adapters.runs.tasks import (
    OsworldTask,
    ResultFolders,
    RunSettings,
    TaskOutcome,
    settled_before_start,
    task_folders,
)
from adapters.trajectories.osharm import result_folder
from osharm_core import AgentConfig, ConfigError
from osharm_core.errors import check_flag, is_finite_number

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
    screening: Screening | None = None,
    manifest: RunManifest | None = None,
) -> RunResult:
    """Run a task list on `actors` Ray actors; outcomes in task order with the run's summary.

    `address` is Ray's (`auto`, `ray://HOST:10001`, `HOST:6379`); a Ray this process has
    already initialised is used as it is. `make_env` is one factory for every actor or one
    per actor (each its own VM); `make_agent(task, limiter)` builds the agent in the actor,
    and gives `limiter` (a `RayLimiter`; `None` without `shared_limiter`) to its model
    client. Only as many actors start as there are unfinished tasks, each asking for
    `cpus_per_actor` CPUs (0.25 fits more on a node when episodes mostly wait); an actor
    gets tasks once Ray has started it, and when none has after `start_timeout` seconds
    the run stops with a `ConfigError`. `screening` (a `Screening`: a screen, a monitor and
    their policy) travels to the actors, which screen each step there. Failures, deaths,
    budgets and `relay_messages` are as the module says; the rest is `arun_task_list`'s
    (`manifest` too).
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
    if not (is_finite_number(start_timeout) and start_timeout > 0):
        raise ConfigError(f"start_timeout must be a number of seconds > 0; got {start_timeout!r}")
    factories = [make_env] * count if callable(make_env) else list(make_env)
    if len(factories) != count:
        raise ConfigError(f"make_env gives {len(factories)} factories for {count} actors")
    ray = _ray()
    task_folders(tasks, config, result_dir)  # refused before any actor starts
    kept = begin_manifest(manifest, tasks, workers=count, ray_address=address, budget=budget)
    began = time.monotonic()
    driver = _Driver(ray, tasks, listener, report, start_timeout, share)
    pending = driver.settle_finished(ResultFolders(result_dir, config, max_steps))
    if pending:  # else nothing to run: no cluster needed
        with _cluster(ray, address), _Spawned(ray) as spawned:
            limiter = spawned.limiter(shared_limiter, requests_per_minute, tokens_per_minute)
            run_caps = spawned.run_caps(budget)
            episode = (json.dumps(config.to_json()), os.fspath(result_dir), make_agent)
            settings = (max_steps, episode_timeout, limiter, _episode_caps(budget))
            rest = (continue_unfinished, run_caps, relay_messages, screening)
            workers = [
                spawned.worker(share, (*episode, factory, *settings, *rest))
                for factory in factories[: len(pending)]
            ]
            driver.stop = _Stop(config, result_dir, budget, run_caps)
            # Ray Client (ray://) cannot stream an actor's steps back: there what an episode
            # says comes when it ends.
            driver.steps = (listener is not None or relay_messages) and not _client(ray)
            driver.relaying = relay_messages
            driver.run(pending, workers)
    return end_manifest(kept, driver.result(began))


@contextlib.contextmanager
def _cluster(ray: Any, address: str | None) -> Iterator[None]:
    """Ray as this process finds it (`ray.init` already called), or a cluster joined at
    `address` for the run and left at its end."""
    if ray.is_initialized():
        yield
        return
    _check_reachable(address)
    try:
        with _own_sigterm():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except ConnectionError:  # `auto` finding no cluster: Ray's words name its own flags
        raise ConfigurationError(
            f"no Ray cluster answers at {address}: Ray found none to join "
            "(start it, or check --ray)"
        ) from None
    try:
        yield
    finally:
        ray.shutdown()


class _Spawned:
    """The actors a run starts, killed when it ends."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self.actors: list[Any] = []

    def __enter__(self) -> _Spawned:
        return self

    def __exit__(self, *_: object) -> None:
        for actor in self.actors:
            self.ray.kill(actor)

    def _started(self, actor: Any) -> Any:
        self.actors.append(actor)
        return actor

    def limiter(self, shared: bool, requests: float | None, tokens: float | None) -> Any:
        """The cluster's rate limiter, as the handle the model clients reach it through."""
        if not shared:
            return None
        holder = self._started(self.ray.remote(num_cpus=0)(LimiterActor).remote(requests, tokens))
        return RayLimiter(holder, counts_tokens=tokens is not None)

    def run_caps(self, budget: Budget | None) -> Any:
        """The actor that keeps the run's caps for the whole cluster, when it has any."""
        if budget is None or (budget.max_run_tokens, budget.max_run_cost) == (None, None):
            return None
        caps = (budget.max_run_tokens, budget.max_run_cost, budget.run_totals, budget.largest_step)
        return self._started(self.ray.remote(num_cpus=0)(BudgetActor).remote(*caps))

    def worker(self, share: float, arguments: tuple[Any, ...]) -> Any:
        """An `EpisodeActor` asking for `share` CPUs; its arguments must pickle."""
        try:
            return self._started(self.ray.remote(num_cpus=share)(EpisodeActor).remote(*arguments))
        except TypeError as exc:  # Ray could not pickle an argument
            text = error_text(exc)  # the pickler's words, about the user's objects
            first = text.splitlines()[0] if text else type(exc).__name__
            raise ConfigurationError(
                "make_agent and make_env travel to the Ray workers, so they must pickle "
                f"(module-level functions or functools.partial of them): {first}"
            ) from None


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


class _Driver:
    """Keeps every started actor busy with the next unfinished task until none is left.

    With `steps`, each episode is a streaming generator (`EpisodeActor.stream`) whose step
    numbers go to the listener as they come; else one call (`run`). With `relaying`, what
    the episodes say (`_relay`) goes to this process's stamina hooks and logging: as it
    comes when streamed, else once each episode has ended.
    """

    def __init__(
        self,
        ray: Any,
        tasks: Sequence[OsworldTask],
        listener: RunListener | None,
        report: Callable[[TaskOutcome], None],
        start_timeout: float,
        share: float,
    ) -> None:
        self.ray, self.tasks, self.report = ray, tasks, report
        self.hears = listener if listener is not None else Quiet()
        self.start_timeout, self.share = start_timeout, share
        self.stop: _Stop | None = None
        self.steps = self.relaying = False
        self.outcomes: dict[int, TaskOutcome] = {}
        self.running: dict[Any, _Running] = {}
        self.starting: dict[Any, Any] = {}
        self.idle: list[Any] = []
        self.waiting: list[int] = []
        self.deaths: list[str] = []
        self.ever_started = False
        self.waiting_since = time.monotonic()

    def _ended(self, index: int, outcome: TaskOutcome) -> None:
        self.outcomes[index] = outcome
        self.hears.ended(outcome)
        self.report(outcome)

    def settle_finished(self, layout: ResultFolders) -> list[int]:
        """The tasks whose folders are finished are skipped here; the others' places."""
        pending = []
        for index, task in enumerate(self.tasks):
            skipped = settled_before_start(task, layout, None)
            if skipped is None:
                pending.append(index)
            else:
                self._ended(index, skipped)
        return pending

    def result(self, began: float) -> RunResult:
        done = [self.outcomes[i] for i in range(len(self.tasks))]
        return RunResult(tuple(done), RunSummary.of(done, time.monotonic() - began))

    def run(self, pending: list[int], workers: list[Any]) -> None:
        """Hand the pending tasks out; on an error or an interrupt, stop the episodes under
        way (each closes its environment before the actors are killed) and raise it."""
        self.waiting = list(reversed(pending))
        self.starting = {actor.ready.remote(): actor for actor in workers}
        self.workers = len(workers)
        try:
            while self.waiting or self.running:
                self._give()
                if not self.running and not self.waiting:
                    break
                for ref in self._ready():
                    if ref in self.starting:
                        self._started(ref)
                    else:
                        self._answered(ref)
        except BaseException:
            _stop_running(self.ray, self.running, self.steps)
            raise

    def _give(self) -> None:
        """Each idle actor gets the next waiting task (one the run budget stops ends here)."""
        assert self.stop is not None
        while self.waiting and self.idle:
            index = self.waiting.pop()
            task = self.tasks[index]
            stopped = self.stop.before(task)
            if stopped is not None:
                self._ended(index, stopped)
                continue
            actor = self.idle.pop()
            self.hears.started(task)
            if self.steps:
                call = actor.stream.options(num_returns="streaming").remote(task)
            else:
                call = actor.run.remote(task)
            self.running[call] = _Running(index, actor)

    def _ready(self) -> list[Any]:
        """The calls and starts that have come back, waited for; a run with no actor left, or
        none started in time, stops here."""
        if not self.running and not self.starting:  # every actor that started has died
            if not self.ever_started:
                raise ConfigurationError(
                    f"no Ray worker actor could start: all {self.workers} died while "
                    f"starting; the last: {self.deaths[-1]}"
                )
            raise _no_worker_left(self.deaths, len(self.waiting))
        # Started actors are idle or busy, so with nothing running none has started yet.
        timeout = (
            None
            if self.running
            else max(0.0, self.waiting_since + self.start_timeout - time.monotonic())
        )
        ready, _ = self.ray.wait([*self.running, *self.starting], num_returns=1, timeout=timeout)
        if ready:
            return list(ready)
        if self.deaths:
            left = (self.deaths, len(self.waiting), len(self.starting), self.start_timeout)
            raise _no_worker_left(*left)
        raise ConfigurationError(
            f"no Ray actor started within {self.start_timeout:g} s: the cluster has no room "
            f"for an actor asking {self.share:g} CPU(s) (see cpus_per_actor)"
        )

    def _started(self, ref: Any) -> None:
        actor = self.starting.pop(ref)
        died = _started(self.ray, ref)
        if died is None:
            self.ever_started = True
            self.idle.append(actor)
        else:  # its room may go to one not started yet: give that time
            self.deaths.append(f"(while starting) {died}")
            self.waiting_since = time.monotonic()

    def _answered(self, ref: Any) -> None:
        """A step, a saying or the end of an episode under way; its actor's death."""
        assert self.stop is not None
        episode = self.running[ref]
        task = self.tasks[episode.index]
        try:
            answer = self.ray.get(next(ref) if self.steps else ref)
        except Exception as exc:
            if not _died(self.ray, exc):
                raise _raised_remotely(self.ray, exc) from None
            answer = self._lost(episode, exc)
        else:
            if isinstance(answer, tuple):  # a step of a streamed episode
                episode.steps, max_steps = answer
                self.hears.stepped(task, episode.steps, max_steps)
                return
            if isinstance(answer, Retried | Logged):  # what a streamed episode said
                relay([answer])
                return
            if self.relaying and not self.steps:  # what the episode said, once it has ended
                relay(_unsent(self.ray, episode.actor))
            if isinstance(answer, _Raised):  # as `arun_task` raises it
                raise answer.error
            self.idle.append(episode.actor)
        del self.running[ref]
        self.stop.after(answer)
        self._ended(episode.index, answer)

    def _lost(self, episode: _Running, error: Exception) -> TaskOutcome:
        """The outcome of an episode whose actor died: failed, its folder left to redo."""
        assert self.stop is not None
        task = self.tasks[episode.index]
        self.deaths.append(_reason(error))
        self.stop.died(task)
        # Actors not started yet may now get the dead one's room: give them time.
        self.waiting_since = time.monotonic()
        folder = result_folder(self.stop.result_dir, self.stop.config, task.domain, task.example_id)
        return TaskOutcome(
            task,
            folder,
            "failed",
            detail=f"the Ray worker running it died: {self.deaths[-1]}",
            steps=episode.steps,
            seconds=time.monotonic() - episode.began,
        )


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
