"""OSWorld task lists: read them, run each task into its result folder, resume after a crash.

A task list is an `evaluation_examples` meta file (`test_all.json`,
OS-Harm's `test_misuse.json`, ...): a JSON object `{domain: [example_id, ...]}`;
each example is `{examples_dir}/{domain}/{example_id}.json` with at least an
`instruction` (OSWorld's task config format). `run_task_list` runs the tasks in
the file's order, each into `result_folder(...)`; a folder holding `result.txt`
(or `unscored.txt`, see `is_finished`) is finished and skipped, any other is emptied and the task redone from its
start, as OSWorld's run.py resumes, so a rerun after a crash neither repeats a
finished task nor keeps half of an unfinished one.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import attrs

from adapters._checks import positive_int
from adapters._files import MAX_JSON_BYTES, read_regular
from adapters._strict_json import _NotFinite, strict_loads
from adapters.accounting.budget import Budget, check_budget
from adapters.accounting.cost import UsageTotals
from adapters.agent import PromptAgent
from adapters.errors import (
    BudgetExceeded,
    EnvironmentFailure,
    ModelCallError,
    RevertFailure,
    TrajectoryError,
    UnwritableRecord,
    error_line,
    error_text,
)
from adapters.runs.environments import ENV_EXECUTOR
from adapters.runs.progress import Quiet, RunListener, RunResult, RunSummary
from adapters.runs.vm_http import VmUnanswered, seconds_limit
from adapters.trajectories.jsonl import TrajectoryFile, _plain_file_name
from adapters.trajectories.osharm import (
    BETTER_LOG,
    RESULT_FILE,
    UNSCORED_FILE,
    AgentFacts,
    ResultWriter,
    TaskInfo,
    arun_episode,
    check_writable,
    is_result_folder,
    result_folder,
    run_episode,
)
from adapters.trajectories.rebuild import Recording, folder_recording, recorded_under
from adapters.trajectories.replay import ForkClient
from osharm_core import AgentConfig
from osharm_core.config import check_config
from osharm_core.errors import (
    ConfigError,
    ObservationError,
    RequestBudgetError,
    check_flag,
    excerpt,
)


@attrs.frozen(kw_only=True)
class OsworldTask:
    """One example of a task list: where it sits, what it asks, and its whole config."""

    domain: str
    example_id: str
    instruction: str
    config: Mapping[str, Any] = attrs.field(factory=dict, repr=False)


class _Repeated(ValueError):
    """A key an object of a task list names twice; its argument is the key."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict; `_Repeated` for a key given twice (`json.loads` would keep
    only its last value, dropping the tasks listed under the first)."""
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise _Repeated(key)
        mapping[key] = value
    return mapping


def _json(path: Path, *, unique: bool = False) -> Any:
    """The JSON of a task list or example file; with `unique`, a key repeated in an object is
    a `TrajectoryError` naming it."""
    try:
        data = read_regular(path, "task file", MAX_JSON_BYTES, TrajectoryError)
    except FileNotFoundError:
        raise TrajectoryError(f"no such task file: {path}") from None
    try:
        return strict_loads(data.decode("utf-8"), object_pairs_hook=_unique if unique else None)
    except _NotFinite as exc:
        raise TrajectoryError(f"cannot read {path}: {exc.reason}") from None
    except _Repeated as exc:
        raise TrajectoryError(
            f"{path} names {excerpt(exc.args[0])} twice; each domain must be listed once "
            "(JSON readers keep only the last list, dropping the tasks of the first)"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise TrajectoryError(f"cannot read {path}: {error_text(exc)}") from None
    except RecursionError:
        raise TrajectoryError(f"cannot read {path}: its JSON is nested too deeply") from None


def _check_names(meta: str | os.PathLike[str], index: Mapping[str, list[str]]) -> None:
    """A `TrajectoryError` naming `meta` and the value when a domain or id is not a plain file
    name (`_plain_file_name`: no `/`, `\\`, `:` or NUL, not `.` or `..`, at most 255 bytes):
    each names a file or folder inside the examples folder (and the observations folder, and
    a replay source), and `../x` or an absolute path would read a file outside it."""
    rule = "a plain file name (no '/', '\\', ':' or NUL, not '.' or '..', at most 255 bytes)"
    for name, ids in index.items():
        if not _plain_file_name(name):
            raise TrajectoryError(f"{meta}: domain {excerpt(name)} is not {rule}")
        for example_id in ids:
            if not _plain_file_name(example_id):
                raise TrajectoryError(
                    f"{meta}: id {excerpt(example_id)} of domain {excerpt(name)} is not {rule}"
                )


def load_task_list(
    meta: str | os.PathLike[str],
    examples: str | os.PathLike[str],
    *,
    domain: str = "all",
) -> tuple[OsworldTask, ...]:
    """The tasks of a meta file, in its order (only `domain`'s unless it is `all`).

    Raises `TrajectoryError` naming the file when the meta file or an example is
    missing or not in the documented shape, and naming the meta file and the
    value, before any example is read, when it names a domain twice or a domain
    or id is not a plain file name (`../x`, an absolute path: see `_check_names`).
    """
    index = _json(Path(meta), unique=True)
    if not isinstance(index, dict) or not all(
        isinstance(ids, list) and all(isinstance(i, str) for i in ids) for ids in index.values()
    ):
        raise TrajectoryError(f"{meta}: expected an object mapping each domain to a list of ids")
    _check_names(meta, index)
    if domain != "all" and domain not in index:
        known = ", ".join(sorted(index)[:20]) or "none"
        raise TrajectoryError(f"{meta} has no domain {domain!r} (it has: {known})")
    tasks = []
    for name, ids in index.items():
        if domain not in ("all", name):
            continue
        for example_id in ids:
            path = Path(examples) / name / f"{example_id}.json"
            config = _json(path)
            instruction = config.get("instruction") if isinstance(config, dict) else None
            if not isinstance(instruction, str) or not instruction.strip():
                raise TrajectoryError(f"{path} has no 'instruction' string")
            tasks.append(
                OsworldTask(
                    domain=name, example_id=example_id, instruction=instruction, config=config
                )
            )
    return tuple(tasks)


def task_folders(
    tasks: Sequence[OsworldTask], config: AgentConfig, result_dir: str | os.PathLike[str]
) -> tuple[Path, ...]:
    """Each task's result folder, checked before anything runs: a `ConfigError` names an item
    that is not an `OsworldTask`, a `TrajectoryError` a task whose domain or id cannot name
    a folder, two tasks that would share one (the same id twice, or ids such as `x:1` and
    `x_1`, which name the same folder), and an unfinished folder holding a directory (or
    FIFO) where its writer keeps a file (`check_writable`: a `result.txt/` directory)."""
    folders: list[Path] = []
    owner: dict[Path, OsworldTask] = {}
    if isinstance(tasks, str | bytes):  # type: ignore[unreachable]  # untyped callers
        raise ConfigError(
            f"tasks must be a list of OsworldTask (see load_task_list); got {excerpt(tasks)}"
        )
    for index, task in enumerate(tasks):
        if not isinstance(task, OsworldTask):
            raise ConfigError(
                f"tasks[{index}] must be an OsworldTask (see load_task_list); "
                f"got {type(task).__name__} {excerpt(task)}"
            )
        folder = result_folder(result_dir, config, task.domain, task.example_id)
        other = owner.setdefault(folder, task)
        if other is not task:
            raise TrajectoryError(
                f"tasks {other.domain}/{other.example_id} and {task.domain}/{task.example_id} "
                f"would share the result folder {folder}; each task needs its own"
            )
        if folder.is_dir() and not is_finished(folder):
            check_writable(folder)
        folders.append(folder)
    return tuple(folders)


def is_finished(folder: str | os.PathLike[str]) -> bool:
    """Whether a task's result folder is complete: it holds `result.txt` (the score) or, for an
    episode its environment could not score, `unscored.txt`; either is written last."""
    path = Path(folder)
    return (path / RESULT_FILE).is_file() or (path / UNSCORED_FILE).is_file()


@attrs.frozen
class TaskOutcome:
    """How one task of a list ended: `finished` (with its score), `skipped`, `failed` or `stopped`.

    `stopped`: not started, because the run's budget was used up. `steps`
    counts its model calls, `usage` their tokens and cost (the agent's
    `usage_totals`; `None` when no agent ran it or the agent keeps none),
    `seconds` its wall time.
    """

    task: OsworldTask
    folder: Path
    status: str
    score: float | None = None
    detail: str = ""
    steps: int = 0
    usage: UsageTotals | None = None
    seconds: float = 0.0

    @property
    def cost(self) -> float | None:
        """The episode's cost in USD when every step's price was known, else `None`."""
        return None if self.usage is None else self.usage.cost_usd


def _writer(
    task: OsworldTask,
    folder: Path,
    config: AgentConfig,
    max_steps: int,
    fork: Mapping[str, Any] | None = None,
) -> Callable[[], ResultWriter]:
    """Opens the task's writer when called, emptying its unfinished folder then; a folder
    whose record is continued (`fork`) only once its first model call is recorded, so an
    episode stopped before that (a run cap another worker reached) keeps the record."""
    info = TaskInfo(instruction=task.instruction, domain=task.domain, example_id=task.example_id)
    return lambda: ResultWriter(
        folder,
        config=config,
        task=info,
        max_steps=max_steps,
        overwrite=True,
        fork=fork,
        deferred=fork is not None,
    )


def _recorded(folder: Path) -> Recording | None:
    """An unfinished folder's record, its better_log.json read once (`None` when it holds
    none that can be read)."""
    if not is_result_folder(folder):
        return None
    try:
        return folder_recording(folder)
    except TrajectoryError:
        return None


@attrs.frozen
class _Begun:
    """An unfinished task about to run: its folder, its agent, how to open its writer (which
    empties the folder, see `_writer`), and how many recorded steps the agent replays (0: none)."""

    folder: Path
    agent: Any
    open_writer: Callable[[], ResultWriter]
    replays: int


def _begin(
    task: OsworldTask,
    *,
    config: AgentConfig,
    result_dir: str | os.PathLike[str],
    max_steps: int,
    make_agent: Callable[[OsworldTask], Any],
    continue_unfinished: bool,
    budget: Budget | None = None,
) -> _Begun | Path:
    """The task to run, or its folder when it is already finished.

    With `continue_unfinished`, a `PromptAgent` for a folder that recorded `k`
    model calls answers its first `k` calls from that record (a `ForkClient`:
    the same replies, so the environment re-executes the same actions) and
    only then calls its model; the record says so in better_log's `fork`.
    An agent built without a budget gets the run's `budget`.
    """
    folder = result_folder(result_dir, config, task.domain, task.example_id)
    if is_finished(folder):
        return folder
    agent = make_agent(task)
    if budget is not None and getattr(agent, "budget", budget) is None:
        agent.budget = budget
    fork = None
    recording = _recorded(folder) if continue_unfinished else None
    done = 0
    # Steps recorded under other prompt settings are redone, not carried into this run's folder.
    if (
        recording is not None
        and isinstance(agent, PromptAgent)
        and recorded_under(recording, agent.config)
    ):
        done = len(recording.entries)
        # The steps counted are the ones replayed: the record as read, never read again.
        record = TrajectoryFile(folder / BETTER_LOG, recording.entries)
        client = ForkClient(record, agent.client, at=done)
        agent = PromptAgent.from_config(
            agent.config, client=client, recorder=agent.recorder, budget=agent.budget
        )
        fork = {"source": os.fspath(folder), "at": done, "resumed": True}
    return _Begun(folder, agent, _writer(task, folder, config, max_steps, fork), done)


def _failed_unstarted(begun: _Begun) -> None:
    """A task failed before its episode began (its setup was refused or failed, or its time
    ran out): OSWorld's error line in its emptied folder, or, when it was to replay a
    recorded run, nothing: the record stays for the next try."""
    if not begun.replays:
        begun.open_writer().error()


def check_run(
    config: object, max_steps: object, continue_unfinished: object, budget: object
) -> None:
    """The arguments every task-list runner shares, checked before anything runs: `config` an
    `AgentConfig` (`TypeError`), `max_steps` an int >= 1, `continue_unfinished` a bool and
    `budget` a `Budget` or `None` (`ConfigError`)."""
    check_config(config)
    positive_int("max_steps", max_steps)
    check_flag("continue_unfinished", continue_unfinished)
    check_budget(budget)


def _check_timeout(episode_timeout: float | None) -> None:
    """A `ConfigError` unless `episode_timeout` is `None` or a number of seconds above 0."""
    if episode_timeout is not None:
        seconds_limit("episode_timeout", episode_timeout, above_zero=True)


#: What ends one episode as failed while the run goes on: its model call failed, its setup was
#: refused or failed, its environment failed (`EnvironmentFailure`: an answer that cannot be
#: read, a screenshot that is no PNG, ...), it gave an observation that cannot be read (a
#: cut-off tree) or that no request can fit, or a value its step record cannot hold (a
#: `TrajectoryError`). Not a desktop that is gone, nor a folder that cannot be written: see
#: `_stops_run`.
_EPISODE_FAILURES: Final = (
    ModelCallError,
    EnvironmentFailure,
    ObservationError,
    RequestBudgetError,
    TrajectoryError,
)


def _stops_run(exc: BaseException) -> bool:
    """Whether an episode's failure stops the whole run rather than failing its episode: a
    VM that gives no answer at all, or that could not be restored to its snapshot (the next
    task on it would fail the same way, or start on a dirty desktop); and a result folder
    that cannot be written (every later task's would fail too). A step record refused for
    a value in it that JSON cannot hold (an environment's `NaN` reward or `info`) costs only
    its episode."""
    if isinstance(exc, TrajectoryError):
        return not isinstance(exc, UnwritableRecord)
    return isinstance(exc, VmUnanswered | RevertFailure)


def _close(close: Callable[[], None]) -> str:
    """Close an episode's environment; what went wrong, for the outcome's detail ("" if nothing).

    The episode's folder is already written: a failing close (a recording too
    large to keep, a VM that stopped answering) is reported, not raised, so
    the run goes on and the outcome is not lost.
    """
    try:
        close()
    except Exception as exc:
        return f"closing its environment failed: {error_line(exc)}"
    return ""


async def _aclose(close: Callable[[], Awaitable[None]]) -> str:
    """`_close` for an async environment."""
    try:
        await close()
    except Exception as exc:
        return f"closing its environment failed: {error_line(exc)}"
    return ""


def _noted(outcome: TaskOutcome, closing: str, env: object) -> TaskOutcome:
    """`outcome` with a failed close added to its detail, and for a finished episode whose
    screen recording (`--record`) did not start, why: the folder is finished without its
    video, and a rerun skips it unless told otherwise."""
    problem = getattr(env, "recording_problem", None)
    unrecorded = (
        f"unrecorded: {problem}"
        if outcome.status == "finished" and isinstance(problem, str)
        else ""
    )
    if not (unrecorded or closing):
        return outcome
    notes = (outcome.detail, unrecorded, closing)
    return attrs.evolve(outcome, detail="; ".join(filter(None, notes)))


def _skipped(task: OsworldTask, folder: Path) -> TaskOutcome:
    return TaskOutcome(task, folder, "skipped", detail="already finished")


def _stopped(
    task: OsworldTask,
    config: AgentConfig,
    result_dir: str | os.PathLike[str],
    budget: Budget | None,
) -> TaskOutcome | None:
    """`stopped` for an unfinished task once the run budget is used up; `None` to go on as usual."""
    reason = None if budget is None else budget.run_exceeded()
    return _stopped_by(task, config, result_dir, reason)


def _stopped_by(
    task: OsworldTask, config: AgentConfig, result_dir: str | os.PathLike[str], reason: str | None
) -> TaskOutcome | None:
    """`stopped` for an unfinished task when a run cap is reached (`reason`), else `None`."""
    folder = result_folder(result_dir, config, task.domain, task.example_id)
    if reason is None or is_finished(folder):
        return None
    return TaskOutcome(task, folder, "stopped", detail=f"run budget exceeded: {reason}")


class _Meter(AgentFacts):
    """One episode's agent, counted: each model step is told to the listener; the
    episode's usage and cost are the agent's `usage_totals` (a `PromptAgent` keeps them)."""

    def __init__(
        self, agent: Any, task: OsworldTask, *, max_steps: int, listener: RunListener
    ) -> None:
        self.agent, self.task = agent, task
        self.max_steps, self.listener = max_steps, listener
        self.steps = 0

    def _stepped(self) -> None:
        self.steps += 1
        self.listener.stepped(self.task, self.steps, self.max_steps)

    def predict(self, instruction: str, obs: Mapping[str, Any]) -> Any:
        """The agent's `predict`, counted."""
        answer = self.agent.predict(instruction, obs)
        self._stepped()
        return answer

    async def apredict(self, instruction: str, obs: Mapping[str, Any]) -> Any:
        """The agent's `apredict`, counted."""
        answer = await self.agent.apredict(instruction, obs)
        self._stepped()
        return answer

    def outcome(
        self,
        folder: Path,
        status: str,
        started: float,
        score: float | None = None,
        detail: str = "",
        writer: ResultWriter | None = None,
    ) -> TaskOutcome:
        """The task's outcome with what was counted (and why a budget ended it early)."""
        if writer is not None and writer.ended_by is not None and not detail:
            detail = f"ended early: {writer.ended_by}"
        usage = getattr(self.agent, "usage_totals", None)
        return TaskOutcome(
            self.task,
            folder,
            status,
            score,
            detail,
            steps=self.steps,
            usage=usage if isinstance(usage, UsageTotals) else None,
            seconds=time.monotonic() - started,
        )


def run_task_list(
    tasks: Sequence[OsworldTask],
    *,
    config: AgentConfig,
    result_dir: str | os.PathLike[str],
    make_agent: Callable[[OsworldTask], Any],
    make_env: Callable[[OsworldTask], Any],
    max_steps: int,
    report: Callable[[TaskOutcome], None] = lambda _: None,
    listener: RunListener | None = None,
    continue_unfinished: bool = False,
    budget: Budget | None = None,
) -> RunResult:
    """Run every unfinished task into its result folder, in order; returns each one's outcome.

    `make_agent` and `make_env` build a fresh agent and environment per task
    (the environment's `reset(task_config=...)` gives the first observation).
    A model-call failure, a task whose setup steps were refused or failed
    (`TaskSetupError`), any other `EnvironmentFailure` (an answer the desktop
    gave that cannot be read), an observation that cannot be read or fitted
    into a request, or a value from the environment that no record can hold
    (`UnwritableRecord`), ends that task with the error line and the run goes on
    to the next; anything else (a kill, a VM that gives no answer at all or
    could not be reverted, an exception that is not an `OsharmError`)
    propagates and leaves the task unfinished, to be redone by the next run. `listener` (see
    `adapters.runs.progress`) hears each start, model step and end;
    the result is a sequence of the outcomes with the run's `summary`
    (tokens and cost from each agent's `usage_totals`). With
    `continue_unfinished`, an unfinished folder's recorded steps are replayed
    instead of asking the model again (see `_begin`); by default the task is
    redone from its start. With a `budget` (given to every agent built
    without one), an episode that reaches a cap ends early and is evaluated,
    and once the run's cap is reached no further task is started (each is
    reported `stopped`). Each environment is closed after its episode; a close
    that fails is noted in the outcome's `detail` and the run goes on. Tasks
    that would share a result folder (see `task_folders`) are refused before
    any runs, and so are arguments of the wrong kind (see `check_run`: a
    `max_steps` below 1 would mark every task finished with no step).
    """
    check_run(config, max_steps, continue_unfinished, budget)
    task_folders(tasks, config, result_dir)
    hears = listener if listener is not None else Quiet()
    began = time.monotonic()
    outcomes = []
    for task in tasks:
        stopped = _stopped(task, config, result_dir, budget)
        if stopped is not None:
            hears.ended(stopped)
            report(stopped)
            outcomes.append(stopped)
            continue
        begun = _begin(
            task,
            config=config,
            result_dir=result_dir,
            max_steps=max_steps,
            make_agent=make_agent,
            continue_unfinished=continue_unfinished,
            budget=budget,
        )
        if isinstance(begun, Path):
            outcome = _skipped(task, begun)
        else:
            folder, writer = begun.folder, None
            started = time.monotonic()
            hears.started(task)
            env = make_env(task)
            meter = _Meter(begun.agent, task, max_steps=max_steps, listener=hears)
            try:
                try:
                    observation = env.reset(task_config=dict(task.config))
                except EnvironmentFailure as exc:
                    if not _stops_run(exc):
                        _failed_unstarted(begun)
                    raise
                writer = begun.open_writer()
                score = run_episode(meter, env, observation, writer, max_steps=max_steps)
            except BudgetExceeded as exc:
                outcome = meter.outcome(folder, "stopped", started, detail=error_text(exc))
            except _EPISODE_FAILURES as exc:
                if _stops_run(exc):
                    raise
                outcome = meter.outcome(folder, "failed", started, detail=error_text(exc))
            else:
                outcome = meter.outcome(folder, "finished", started, score, writer=writer)
            finally:
                closing = _close(env.close)
            outcome = _noted(outcome, closing, env)
        hears.ended(outcome)
        report(outcome)
        outcomes.append(outcome)
    return RunResult(tuple(outcomes), RunSummary.of(outcomes, time.monotonic() - began))


async def arun_task(
    task: OsworldTask,
    *,
    config: AgentConfig,
    result_dir: str | os.PathLike[str],
    make_agent: Callable[[OsworldTask], Any],
    make_env: Callable[[OsworldTask], Any],
    max_steps: int,
    episode_timeout: float | None = None,
    listener: RunListener | None = None,
    executor: Executor | None = None,
    continue_unfinished: bool = False,
    budget: Budget | None = None,
) -> TaskOutcome:
    """One task of a list on an event loop (what each worker of `arun_task_list` runs).

    Skipped when its folder is finished, else redone from its start; a model
    failure, a refused or failed setup (`TaskSetupError`), another
    `EnvironmentFailure`, an unreadable observation, a value from the
    environment that no record can hold (`UnwritableRecord`) or passing
    `episode_timeout` ends it as failed, with the error
    line; anything else (a VM that gives no answer, or could not be reverted)
    propagates and leaves it unfinished. The limit cannot
    interrupt an environment call under way in a thread (`in_thread`): the
    episode ends when that call returns. Its environment is closed in any
    case; a close that fails is noted in the outcome's `detail`. The result
    folder is written in `executor` (default: the loop's), off the event loop.
    """
    check_run(config, max_steps, continue_unfinished, budget)
    _check_timeout(episode_timeout)
    hears = listener if listener is not None else Quiet()
    stopped = _stopped(task, config, result_dir, budget)
    if stopped is not None:
        hears.ended(stopped)
        return stopped
    begun = _begin(
        task,
        config=config,
        result_dir=result_dir,
        max_steps=max_steps,
        make_agent=make_agent,
        continue_unfinished=continue_unfinished,
        budget=budget,
    )
    if isinstance(begun, Path):
        outcome = _skipped(task, begun)
        hears.ended(outcome)
        return outcome
    folder, writer = begun.folder, None
    started = time.monotonic()
    hears.started(task)
    env = make_env(task)
    meter = _Meter(begun.agent, task, max_steps=max_steps, listener=hears)
    limit = asyncio.timeout(episode_timeout)
    try:
        async with limit:
            try:
                observation = await env.reset(task_config=dict(task.config))
            except EnvironmentFailure as exc:
                if not _stops_run(exc):
                    _failed_unstarted(begun)
                raise
            writer = begun.open_writer()
            score = await arun_episode(
                meter,
                env,
                observation,
                writer,
                max_steps=max_steps,
                offload=True,
                executor=executor,
            )
    except BudgetExceeded as exc:
        outcome = meter.outcome(folder, "stopped", started, detail=error_text(exc))
    except _EPISODE_FAILURES as exc:
        if _stops_run(exc):
            raise
        outcome = meter.outcome(folder, "failed", started, detail=error_text(exc))
    except TimeoutError:
        if not limit.expired():  # the environment's own TimeoutError, not the episode's limit
            raise
        if writer is not None and writer.finished:  # it passed as the last file was written
            outcome = meter.outcome(folder, "finished", started, writer.score, writer=writer)
        else:
            if writer is None:
                _failed_unstarted(begun)
            else:
                writer.error()
            detail = f"episode took longer than {episode_timeout} s"
            outcome = meter.outcome(folder, "failed", started, detail=detail)
    else:
        outcome = meter.outcome(folder, "finished", started, score, writer=writer)
    finally:
        closing = await _aclose(env.close)
    outcome = _noted(outcome, closing, env)
    hears.ended(outcome)
    return outcome


async def arun_task_list(
    tasks: Sequence[OsworldTask],
    *,
    config: AgentConfig,
    result_dir: str | os.PathLike[str],
    make_agent: Callable[[OsworldTask], Any],
    make_env: Callable[[OsworldTask], Any],
    max_steps: int,
    workers: int = 4,
    episode_timeout: float | None = None,
    report: Callable[[TaskOutcome], None] = lambda _: None,
    listener: RunListener | None = None,
    continue_unfinished: bool = False,
    budget: Budget | None = None,
) -> RunResult:
    """`run_task_list` with up to `workers` episodes at once on one event loop.

    `make_env` gives an `AsyncEnv` (wrap a synchronous one with `in_thread`)
    and the agent answers through `apredict`; `in_thread` environments get a
    thread per worker for their calls. An episode past
    `episode_timeout` seconds is stopped, gets the error line and counts as
    failed (to be redone by the next run; see `arun_task` for an environment
    call under way). Outcomes come back in task order,
    with the run's `summary`; `report` sees each as it ends.
    """
    positive_int("workers", workers)
    check_run(config, max_steps, continue_unfinished, budget)
    _check_timeout(episode_timeout)
    task_folders(tasks, config, result_dir)
    began = time.monotonic()
    slots = asyncio.Semaphore(workers)
    # Result folders are written off the loop; a few threads overlap the fsync waits, and more
    # only contend with the loop for the GIL (32 threads cost ~3 ms of CPU per step at 32 workers).
    writers = ThreadPoolExecutor(max_workers=min(workers, 8), thread_name_prefix="osharm-folders")
    # Environments wait on desktops, not the CPU: one thread per worker, so none waits for another.
    envs = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="osharm-envs")
    own_envs = ENV_EXECUTOR.set(envs)
    stopped = False

    async def one(task: OsworldTask) -> TaskOutcome:
        nonlocal stopped
        async with slots:
            if stopped:
                # The run is stopping (an episode raised) and this task got the slot that
                # episode left: it must not start an environment call that is then abandoned.
                raise asyncio.CancelledError
            try:
                outcome = await arun_task(
                    task,
                    config=config,
                    result_dir=result_dir,
                    make_agent=make_agent,
                    make_env=make_env,
                    max_steps=max_steps,
                    episode_timeout=episode_timeout,
                    listener=listener,
                    executor=writers,
                    continue_unfinished=continue_unfinished,
                    budget=budget,
                )
            except BaseException:
                stopped = True
                raise
            report(outcome)
            return outcome

    episodes = [asyncio.ensure_future(one(task)) for task in tasks]
    try:
        outcomes = list(await asyncio.gather(*episodes))
    except BaseException:
        # An episode raised, or the run was cancelled: gather returns at once, so the others
        # are stopped here and waited for, and no environment call outlives the run.
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
    return RunResult(tuple(outcomes), RunSummary.of(outcomes, time.monotonic() - began))


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
