"""The one runner: `arun_task` decides each task's outcome; task lists only schedule it.

`arun_task_list` runs a list's tasks (read by `adapters.runs.task_lists`), up to `workers` at
once, each into its folder (`Layout`: OS-Harm result folders by default, or our JSONL
trajectories); `run_task_list` is the same with one worker. A finished folder (`result.txt`,
or `unscored.txt`: see `is_finished`) is skipped, any other is emptied and the task redone
from its start, as OSWorld's run.py resumes, so a rerun after a crash neither repeats a
finished task nor keeps half of an unfinished one; a folder another live run holds is left
alone (`adapters.runs.locks`).
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import attrs

from adapters.accounting.budget import Budget
from adapters.accounting.cost import UsageTotals
from adapters.agent import PromptAgent
from adapters.errors import BudgetExceeded, TrajectoryError, error_line, error_text
from adapters.record import ActionRecord, EpisodeEnd, Recorder, StepRecord
from adapters.runs.env_contract import RecordsScreen
from adapters.runs.environments import ENV_EXECUTOR, in_thread
from adapters.runs.episode import Episode, arun_episode
from adapters.runs.locks import FolderLock, Holder, take_lock
from adapters.runs.manifest import RunManifest, begin_manifest, end_manifest
from adapters.runs.progress import Quiet, RunListener, RunResult, RunSummary
from adapters.runs.screening import Screening
from adapters.runs.task_lists import (
    OsworldTask,
    is_finished,
    load_task_list,
    task_folders,
)
from adapters.trajectories.jsonl import (
    FINISHED_FILE,
    TrajectoryFile,
    TrajectoryRecorder,
)
from adapters.trajectories.osharm import (
    BETTER_LOG,
    ResultWriter,
    TaskInfo,
    is_result_folder,
    result_folder,
)
from adapters.trajectories.rebuild import Recording, folder_recording, recorded_under
from adapters.trajectories.replay import ForkClient
from osharm_core import AgentConfig
from osharm_core.errors import (
    is_finite_number,
    refusing,
    strict_int,
    true_or_false,
)
from osharm_core.safety import SafetyTally


def _finite(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: a finite int or float, not a bool."""
    if not is_finite_number(value):
        raise ValueError(attribute.name)


@attrs.frozen
class TaskOutcome:
    """How one task of a list ended: `finished` (with its score), `skipped`, `failed` or `stopped`.

    `stopped`: not started, because the run's budget was used up. `steps`
    counts its model calls, `usage` their tokens and cost (the agent's
    `usage_totals`; `None` when no agent ran it or the agent keeps none),
    `seconds` its wall time; `ended` says why its episode ended (see
    `adapters.runs.episode.Ending`; empty when none ran); `safety` counts its safety events.
    """

    task: OsworldTask
    folder: Path
    status: str
    score: float | None = None
    detail: str = ""
    steps: int = 0
    usage: UsageTotals | None = None
    seconds: float = 0.0
    ended: str = ""
    safety: SafetyTally = attrs.field(factory=SafetyTally)

    @property
    def cost(self) -> float | None:
        """The episode's cost in USD when every step's price was known, else `None`."""
        return None if self.usage is None else self.usage.cost_usd


@attrs.frozen(kw_only=True)
class RunSettings:
    """What every task-list runner takes besides its tasks, checked once where a run begins
    (`run_task_list`, `arun_task_list`, `run_task_list_on_ray`): a refusal is a `ConfigError`
    naming the setting."""

    config: AgentConfig = attrs.field(
        validator=refusing("an AgentConfig", attrs.validators.instance_of(AgentConfig))
    )
    max_steps: int = attrs.field(
        validator=refusing("an integer >= 1", strict_int, attrs.validators.ge(1))
    )
    workers: int = attrs.field(
        default=1, validator=refusing("an integer >= 1", strict_int, attrs.validators.ge(1))
    )
    episode_timeout: float | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(
            refusing("a number of seconds above 0", _finite, attrs.validators.gt(0))
        ),
    )
    continue_unfinished: bool = attrs.field(default=False, validator=true_or_false)
    budget: Budget | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(
            refusing("a Budget or None", attrs.validators.instance_of(Budget))
        ),
    )


class Layout(Protocol):
    """Where and how a run records each task: its folder, whether that folder is finished,
    the recorder that writes it, and the recording an unfinished one holds."""

    def folder(self, task: OsworldTask) -> Path:
        """The task's folder."""
        ...

    def is_finished(self, folder: Path) -> bool:
        """Whether the folder records a finished episode (a rerun skips it)."""
        ...

    def recorder(self, task: OsworldTask, folder: Path, fork: Mapping[str, Any] | None) -> Recorder:
        """The recorder of a task about to run, emptying its unfinished folder; continuing its
        record (`fork`, the record's `fork` entry), only once a live model call is recorded."""
        ...

    def recording(self, folder: Path) -> Recording | None:
        """An unfinished folder's record, to continue (`None`: none that can be read)."""
        ...


@attrs.frozen
class ResultFolders:
    """OS-Harm / OSWorld result folders under `result_dir` (`result_folder`): finished with
    `result.txt` or `unscored.txt`, resumable from `better_log.json`."""

    result_dir: str | os.PathLike[str]
    config: AgentConfig
    max_steps: int
    #: better_log's `fork` entry for every task (a run forked from a recording, `--fork`).
    fork: Mapping[str, Any] | None = None

    def folder(self, task: OsworldTask) -> Path:
        return result_folder(self.result_dir, self.config, task.domain, task.example_id)

    def is_finished(self, folder: Path) -> bool:
        return is_finished(folder)

    def recorder(self, task: OsworldTask, folder: Path, fork: Mapping[str, Any] | None) -> Recorder:
        info = TaskInfo(
            instruction=task.instruction, domain=task.domain, example_id=task.example_id
        )
        return ResultWriter(
            folder,
            config=self.config,
            task=info,
            max_steps=self.max_steps,
            overwrite=True,
            fork=self.fork if fork is None else fork,
            deferred=fork is not None,
        )

    def recording(self, folder: Path) -> Recording | None:
        if not is_result_folder(folder):
            return None
        try:
            return folder_recording(folder)
        except TrajectoryError:
            return None


@attrs.frozen
class Trajectories:
    """Our JSONL trajectories: one folder per task under `out` (`out/NAME` with several tasks,
    `out` itself with one), finished once `finished.json` is written."""

    out: Path
    several: bool

    def folder(self, task: OsworldTask) -> Path:
        return self.out / task.example_id if self.several else self.out

    def is_finished(self, folder: Path) -> bool:
        return (folder / FINISHED_FILE).is_file()

    def recorder(self, task: OsworldTask, folder: Path, fork: Mapping[str, Any] | None) -> Recorder:
        return TrajectoryRecorder(folder, overwrite=True)

    def recording(self, folder: Path) -> Recording | None:
        return None


def settled_before_start(
    task: OsworldTask, layout: Layout, budget: Budget | None, run_exceeded: str | None = None
) -> TaskOutcome | None:
    """The outcome of a task that is not to run: `skipped` when its folder is finished,
    `stopped` when the run's budget is used up (`run_exceeded`, or `budget`'s run cap);
    `None` when it is to run."""
    folder = layout.folder(task)
    if layout.is_finished(folder):
        return TaskOutcome(task, folder, "skipped", detail="already finished")
    reason = run_exceeded or (None if budget is None else budget.run_exceeded())
    if reason is not None:
        return TaskOutcome(task, folder, "stopped", detail=f"run budget exceeded: {reason}")
    return None


@attrs.frozen
class _Begun:
    """An unfinished task about to run: its folder, its agent, and the fork entry of a record
    it continues (`None`: it starts afresh)."""

    folder: Path
    agent: Any
    fork: Mapping[str, Any] | None


def _begin(
    task: OsworldTask,
    layout: Layout,
    make_agent: Callable[[OsworldTask], Any],
    continue_unfinished: bool,
    budget: Budget | None,
) -> _Begun:
    """The agent for an unfinished task. With `continue_unfinished`, a `PromptAgent` for a
    folder that recorded `k` model calls answers its first `k` calls from that record (a
    `ForkClient`: the same replies, so the environment re-executes the same actions) and only
    then calls its model; the record says so in its `fork` entry. An agent built without a
    budget gets the run's `budget`."""
    folder = layout.folder(task)
    agent = make_agent(task)
    if not isinstance(agent, PromptAgent):
        return _Begun(folder, agent, None)
    if agent.budget is None:
        agent.budget = budget
    recording = layout.recording(folder) if continue_unfinished else None
    # Steps recorded under other prompt settings are redone, not carried into this run's folder.
    if recording is None or not recorded_under(recording, agent.config):
        return _Begun(folder, agent, None)
    done = len(recording.entries)
    # The steps counted are the ones replayed: the record as read, never read again.
    record = TrajectoryFile(folder / BETTER_LOG, recording.entries)
    client = ForkClient(record, agent.client, at=done)
    agent = PromptAgent.from_config(
        agent.config, client=client, recorder=agent.recorder, budget=agent.budget
    )
    return _Begun(folder, agent, {"source": os.fspath(folder), "at": done, "resumed": True})


class _Ending:
    """The task's recorder, opened when the episode first records (its folder is not touched
    before its environment has given a first observation, or the episode failed), and the end
    it recorded (to tell, when a time limit passes, whether the episode had ended)."""

    def __init__(self, open_recorder: Callable[[], Recorder]) -> None:
        self._open = open_recorder
        self._inner: Recorder | None = None
        self.end: EpisodeEnd | None = None

    @property
    def inner(self) -> Recorder:
        if self._inner is None:
            self._inner = self._open()
        return self._inner

    def begin(self, observation: Mapping[str, Any]) -> None:
        self.inner.begin(observation)

    def step(self, record: StepRecord) -> None:
        self.inner.step(record)

    def action(self, record: ActionRecord) -> None:
        self.inner.action(record)

    def finish(self, end: EpisodeEnd) -> None:
        self.inner.finish(end)
        self.end = end


async def _aclose(close: Callable[[], Awaitable[None]]) -> str:
    """Close an episode's environment; what went wrong, for the outcome's detail ("" if nothing).

    The episode's folder is already written: a failing close (a recording too large to keep,
    a VM that stopped answering) is reported, not raised, so the run goes on."""
    try:
        await close()
    except Exception as exc:
        return f"closing its environment failed: {error_line(exc)}"
    return ""


def _outcome(
    task: OsworldTask,
    begun: _Begun,
    episode: Episode,
    started: float,
    closing: str,
    recording_problem: str | None,
    status: str | None = None,
) -> TaskOutcome:
    """The task's outcome from its episode (`status` when it did not begin), with its usage,
    time, and what went wrong closing its environment or starting its screen recording."""
    detail = episode.detail
    if status is None:
        status = "failed" if episode.failed else "finished"
        if episode.ended == "budget":
            detail = f"ended early: {detail}"
    unrecorded = (
        f"unrecorded: {recording_problem}"
        if status == "finished" and recording_problem is not None
        else ""
    )
    agent = begun.agent
    return TaskOutcome(
        task,
        begun.folder,
        status,
        episode.score,
        "; ".join(filter(None, (detail, unrecorded, closing))),
        steps=episode.steps,
        usage=agent.usage_totals if isinstance(agent, PromptAgent) else None,
        seconds=time.monotonic() - started,
        ended=episode.ended,
        safety=episode.safety,
    )


async def arun_task(
    task: OsworldTask,
    *,
    config: AgentConfig,
    result_dir: str | os.PathLike[str] = "",
    make_agent: Callable[[OsworldTask], Any],
    make_env: Callable[[OsworldTask], Any],
    max_steps: int,
    episode_timeout: float | None = None,
    listener: RunListener | None = None,
    executor: Executor | None = None,
    continue_unfinished: bool = False,
    budget: Budget | None = None,
    layout: Layout | None = None,
    on_step: Callable[[OsworldTask, StepRecord], None] | None = None,
    screening: Screening | None = None,
) -> TaskOutcome:
    """One task, start to end: the one place an episode's outcome is decided.

    Skipped when its folder is finished and `stopped` when the run's budget is used up; else its
    episode runs (`adapters.runs.episode.arun_episode`, screened by `screening`) into its folder
    (by default OS-Harm result folders under `result_dir`; see `Layout`), redone from its start
    or, with `continue_unfinished`, continued from its record. A model failure, a refused or
    failed setup, another `EnvironmentFailure`, an unreadable observation, a value from the
    environment that no record can hold, or passing `episode_timeout` ends it as failed, with
    OSWorld's error line; anything that stops the run (a VM that gives no answer, or could not
    be reverted) propagates and leaves it unfinished. A run cap reached before its first live
    model call leaves it `stopped`, its record as it was. The limit cannot interrupt an
    environment call under way in a thread (`in_thread`): the episode ends when that call
    returns. Its environment is closed in any case (a failing close is noted in `detail`); the
    folder is written in `executor` (default: the loop's); `on_step` sees each step's record.
    """
    layout = ResultFolders(result_dir, config, max_steps) if layout is None else layout
    hears = listener if listener is not None else Quiet()
    if (settled := settled_before_start(task, layout, budget)) is not None:
        hears.ended(settled)
        return settled
    lock = take_lock(layout.folder(task), uuid.uuid4().hex)
    if isinstance(lock, Holder):  # another live run has it: never written into
        held = TaskOutcome(
            task, layout.folder(task), "skipped", detail=f"held by another run ({lock.describe()})"
        )
        hears.ended(held)
        return held
    run = _TaskRun(
        config, layout, make_agent, make_env, max_steps, episode_timeout, executor,
        continue_unfinished, budget, listener, on_step, screening,
    )  # fmt: skip
    try:
        return await _locked(task, lock, run, hears)
    finally:
        lock.release()


@attrs.frozen
class _TaskRun:
    """What `arun_task` runs a task with: the run's settings, as its caller gave them."""

    config: AgentConfig
    layout: Layout
    make_agent: Callable[[OsworldTask], Any]
    make_env: Callable[[OsworldTask], Any]
    max_steps: int
    episode_timeout: float | None
    executor: Executor | None
    continue_unfinished: bool
    budget: Budget | None
    listener: RunListener | None
    on_step: Callable[[OsworldTask, StepRecord], None] | None
    screening: Screening | None


async def _locked(
    task: OsworldTask, lock: FolderLock, run: _TaskRun, hears: RunListener
) -> TaskOutcome:
    """`arun_task` once the task's folder is held by this run."""
    layout, listener, on_step = run.layout, run.listener, run.on_step
    settled = settled_before_start(task, layout, run.budget)  # finished while the lock was taken
    if settled is not None:
        hears.ended(settled)
        return settled
    begun = _begin(task, layout, run.make_agent, run.continue_unfinished, run.budget)
    started = time.monotonic()
    hears.started(task)
    env = run.make_env(task)
    steps = 0

    def stepped(record: StepRecord) -> None:
        nonlocal steps
        steps += 1
        lock.refresh()
        if listener is not None:
            listener.stepped(task, steps, run.max_steps)
        if on_step is not None:
            on_step(task, record)

    limit = asyncio.timeout(run.episode_timeout)
    recorder = _Ending(lambda: layout.recorder(task, begun.folder, begun.fork))
    status = None
    try:
        async with limit:
            episode = await arun_episode(
                begun.agent,
                env,
                recorder,
                instruction=task.instruction,
                config=run.config,
                max_steps=run.max_steps,
                task_config=task.config,
                offload=True,
                executor=run.executor,
                on_step=stepped,
                screening=run.screening,
            )
    except BudgetExceeded as exc:  # a run cap, before its first live call: it did not begin
        status, episode = "stopped", Episode("budget", steps=steps, detail=error_text(exc))
    except TimeoutError:
        if not limit.expired():  # the environment's own TimeoutError, not the episode's limit
            raise
        episode = _timed_out(recorder, steps, run.episode_timeout)
    finally:
        closing = await _aclose(env.close)
    outcome = _outcome(task, begun, episode, started, closing, _recording_problem(env), status)
    hears.ended(outcome)
    return outcome


def _timed_out(recorder: _Ending, steps: int, limit: float | None) -> Episode:
    """The episode a time limit ended: finished when it passed as the last file was written,
    else failed, with OSWorld's error line."""
    if recorder.end is not None and recorder.end.failed is None:
        return Episode("max steps", recorder.end.score, steps)
    detail = f"episode took longer than {limit} s"
    if recorder.end is None:
        recorder.finish(EpisodeEnd(failed=detail))
    return Episode("failed", steps=steps, detail=detail)


def _recording_problem(env: object) -> str | None:
    """Why the environment's screen recording (`--record`) did not start, if it did not."""
    return env.recording_problem if isinstance(env, RecordsScreen) else None


async def arun_task_list(
    tasks: Sequence[OsworldTask],
    *,
    config: AgentConfig,
    result_dir: str | os.PathLike[str] = "",
    make_agent: Callable[[OsworldTask], Any],
    make_env: Callable[[OsworldTask], Any],
    max_steps: int,
    workers: int = 4,
    episode_timeout: float | None = None,
    report: Callable[[TaskOutcome], None] = lambda _: None,
    listener: RunListener | None = None,
    continue_unfinished: bool = False,
    budget: Budget | None = None,
    layout: Layout | None = None,
    on_step: Callable[[OsworldTask, StepRecord], None] | None = None,
    screening: Screening | None = None,
    manifest: RunManifest | None = None,
) -> RunResult:
    """Every unfinished task of `tasks` into its folder, up to `workers` episodes at once on one
    event loop (`arun_task` each); outcomes in task order with the run's `summary`.

    `make_agent` and `make_env` build a fresh agent and environment per task (an `AsyncEnv`:
    wrap a synchronous one with `in_thread`; each worker gets a thread of its own for its
    calls). `report` sees each outcome as it ends, `listener` (see `adapters.runs.progress`)
    hears each start, model step and end. With a `budget` (given to every agent built
    without one), an episode that reaches a cap ends early and is evaluated, and once the
    run's cap is reached no further task is started (each is reported `stopped`). Tasks that
    would share a result folder (see `task_folders`) are refused before any runs. An episode
    that raises (what stops the run) stops the others, each closing its environment, and
    the error propagates. `screening` screens every episode's actions (see `arun_episode`).
    A `manifest` (see `adapters.runs.manifest`) is checked against the one at its root and
    written there before the first episode, and again at the end.
    """
    RunSettings(
        config=config,
        max_steps=max_steps,
        workers=workers,
        episode_timeout=episode_timeout,
        continue_unfinished=continue_unfinished,
        budget=budget,
    )
    layout = ResultFolders(result_dir, config, max_steps) if layout is None else layout
    if isinstance(layout, ResultFolders):
        task_folders(tasks, config, layout.result_dir)
    began = time.monotonic()
    one = functools.partial(
        arun_task,
        config=config,
        make_agent=make_agent,
        make_env=make_env,
        max_steps=max_steps,
        episode_timeout=episode_timeout,
        listener=listener,
        continue_unfinished=continue_unfinished,
        budget=budget,
        layout=layout,
        on_step=on_step,
        screening=screening,
    )
    kept = begin_manifest(manifest, tasks, workers=workers, budget=budget)
    outcomes = await _at_once(tasks, one, workers, report)
    result = RunResult(tuple(outcomes), RunSummary.of(outcomes, time.monotonic() - began))
    return end_manifest(kept, result)


async def _at_once(
    tasks: Sequence[OsworldTask],
    one: Callable[..., Awaitable[TaskOutcome]],
    workers: int,
    report: Callable[[TaskOutcome], None],
) -> list[TaskOutcome]:
    """`one(task, executor=...)` for every task, at most `workers` at once, in task order. An
    episode that raises (or a cancel) stops the others, waited for: no environment call
    outlives the run."""
    slots = asyncio.Semaphore(workers)
    # Result folders are written off the loop; a few threads overlap the fsync waits, and more
    # only contend with the loop for the GIL (32 threads cost ~3 ms of CPU per step at 32 workers).
    writers = ThreadPoolExecutor(max_workers=min(workers, 8), thread_name_prefix="osharm-folders")
    # Environments wait on desktops, not the CPU: one thread per worker, so none waits for another.
    envs = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="osharm-envs")
    own_envs = ENV_EXECUTOR.set(envs)
    stopped = False

    async def run(task: OsworldTask) -> TaskOutcome:
        nonlocal stopped
        async with slots:
            if stopped:
                # The run is stopping (an episode raised) and this task got the slot that
                # episode left: it must not start an environment call that is then abandoned.
                raise asyncio.CancelledError
            try:
                outcome = await one(task, executor=writers)
            except BaseException:
                stopped = True
                raise
            report(outcome)
            return outcome

    episodes = [asyncio.ensure_future(run(task)) for task in tasks]
    try:
        return list(await asyncio.gather(*episodes))
    except BaseException:
        for episode in episodes:
            if not episode.cancelling():
                episode.cancel()
        if episodes:
            await asyncio.wait(episodes)
        raise
    finally:
        ENV_EXECUTOR.reset(own_envs)
        writers.shutdown(wait=False, cancel_futures=True)
        envs.shutdown(wait=False, cancel_futures=True)


def run_task_list(
    tasks: Sequence[OsworldTask],
    *,
    config: AgentConfig,
    result_dir: str | os.PathLike[str] = "",
    make_agent: Callable[[OsworldTask], Any],
    make_env: Callable[[OsworldTask], Any],
    max_steps: int,
    report: Callable[[TaskOutcome], None] = lambda _: None,
    listener: RunListener | None = None,
    continue_unfinished: bool = False,
    budget: Budget | None = None,
    layout: Layout | None = None,
    screening: Screening | None = None,
    manifest: RunManifest | None = None,
) -> RunResult:
    """`arun_task_list` with one worker, for a synchronous environment (`make_env` gives an
    `Env`, run in a thread of its own): every unfinished task in order. See `arun_task_list`
    and `arun_task`."""

    def in_order() -> RunResult:
        return asyncio.run(
            arun_task_list(
                tasks,
                config=config,
                result_dir=result_dir,
                make_agent=make_agent,
                make_env=lambda task: in_thread(make_env(task)),
                max_steps=max_steps,
                workers=1,
                report=report,
                listener=listener,
                continue_unfinished=continue_unfinished,
                budget=budget,
                layout=layout,
                screening=screening,
                manifest=manifest,
            )
        )

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return in_order()
    with ThreadPoolExecutor(max_workers=1) as aside:  # called from a running event loop
        return aside.submit(in_order).result()


__all__ = [
    "OsworldTask",
    "TaskOutcome",
    "arun_task",
    "arun_task_list",
    "is_finished",
    "load_task_list",
    "run_task_list",
    "task_folders",
]
