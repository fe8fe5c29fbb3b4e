"""`osharm-agent run TASK_DIR ...`: an episode per task directory, through the one runner.

A task directory holds observations (`NAME.png` / `NAME.xml`, served one per model
turn) and its instruction in `task.json`. Each task is an `OsworldTask` run by
`run_task_list` into our JSONL trajectory (`--format jsonl`, the default) or an
OS-Harm result folder (`--format osharm`); a finished one is skipped, an unfinished one
redone, so the same command resumes a run that was stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

import attrs

from adapters.accounting.budget import Budget
from adapters.accounting.cost import UsageTotals
from adapters.agent import PromptAgent
from adapters.cli._budget import add_budget_options, run_budget, usage_summary
from adapters.cli._inputs import (
    ModelClients,
    add_agent_options,
    add_model_options,
    agent_config,
    path_option,
    positive_count,
    replay_source,
    task_instruction,
    task_place,
)
from adapters.cli._manifest import add_manifest_option, command_manifest
from adapters.cli._output import line, one_line
from adapters.cli._safety import add_safety_options, safety_line, screening
from adapters.cli._step import message_tokens
from adapters.contract import ModelClient
from adapters.errors import TrajectoryError, UsageError
from adapters.record import StepRecord
from adapters.runs.environments import in_thread
from adapters.runs.manifest import MANIFEST_FILE
from adapters.runs.screening import Screening
from adapters.runs.tasks import (
    Layout,
    OsworldTask,
    ResultFolders,
    TaskOutcome,
    Trajectories,
    arun_task_list,
)
from adapters.trajectories import replay as _replay
from adapters.trajectories.jsonl import TRAJECTORY_FILE, _plain_file_name, recording_files
from adapters.trajectories.osharm import check_writable, folder_files
from osharm_core import AgentConfig, ObservationError


def add_command(commands: Any, formatter: type[argparse.HelpFormatter], models: str) -> None:
    """The `run` subcommand (task directories; `run --tasks` is `run-tasks`)."""
    run = commands.add_parser(
        "run",
        help="an episode over each task directory of observations",
        epilog=models,
        formatter_class=formatter,
    )
    run.description = (
        "Run an episode on each task directory (NAME.png / NAME.xml observations in sorted "
        "order, the instruction in task.json), one model turn per observation, recording the "
        "trajectory (in both --format kinds every reply uses up one observation, however "
        "many actions it holds). With several tasks each gets --out/NAME; --model replay:DIR "
        "replays DIR/NAME for each task when it exists. A task whose record is finished is "
        "skipped and an unfinished one redone, so running the same command again resumes."
    )
    run.add_argument("tasks", nargs="+", metavar="TASK_DIR", help="task directories")
    run.add_argument(
        "--out", required=True, type=path_option, metavar="DIR", help="where to record"
    )
    run.add_argument(
        "--format",
        choices=("jsonl", "osharm"),
        default="jsonl",
        help="jsonl: our trajectory.jsonl; osharm: OS-Harm / OSWorld result folders "
        "(--out/ACTION_SPACE/OBSERVATION_TYPE/MODEL/DOMAIN/ID) that OS-Harm's judge reads; "
        "DOMAIN and ID come from task.json's 'domain' and 'id' (else local and the "
        "directory's name)",
    )
    run.add_argument(
        "--instruction",
        help="the task (default: each directory's task.json, else a recording's own steps')",
    )
    run.add_argument(
        "--max-steps", type=positive_count, default=15, metavar="N", help="turns per episode"
    )
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="run finished tasks again too, and replace folders that hold files of another kind",
    )
    run.add_argument(
        "--fork",
        metavar="RECORDED",
        help="replay this recorded run (trajectory.jsonl, its directory or an OS-Harm result "
        "folder) for the first --at steps, then hand over to --model (one task directory)",
    )
    run.add_argument(
        "--at", type=int, default=0, metavar="K", help="with --fork: the steps replayed"
    )
    add_agent_options(run)
    add_model_options(run)
    add_budget_options(run)
    add_safety_options(run)
    add_manifest_option(run)
    run.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace, out: TextIO) -> int:
    """`run TASK_DIR...`: each task directory's episode; exit status 1 when one failed."""
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is a file; runs are written into a directory")
    if args.at and args.fork is None:
        raise UsageError("--at K says how many steps of --fork RECORDED to replay: give --fork")
    dirs = [Path(t) for t in args.tasks]
    for task in dirs:
        if not task.is_dir():
            raise UsageError(f"no such task directory: {task}")
    if args.fork is not None and len(dirs) > 1:
        raise UsageError("--fork replays one recorded run: give one task directory")
    if len(dirs) > 1 and len({_name(t) for t in dirs}) != len(dirs):
        raise UsageError(
            "task directories must have different names (each gets its own --out subdirectory)"
        )
    config = agent_config(args)
    budget = run_budget(args, config.model)
    check_out(args, dirs, args.fork)
    tasks = [(_task(args, d), d) for d in dirs]
    layout = _layout(args, config, len(dirs) > 1)
    _check_targets(args, layout, tasks)
    return _Run(args, config, budget, layout, tasks, out, screening(args)).go()


def _task(args: argparse.Namespace, directory: Path) -> OsworldTask:
    """The task a directory holds: its place (task.json's domain and id) and instruction."""
    try:
        _replay.ReplayEnv(directory)  # it holds observations: said before anything else
        instruction = task_instruction(args.instruction, directory)
        domain, example_id = task_place(directory, _name(directory))
    except (UsageError, ObservationError, TrajectoryError) as exc:
        raise UsageError(f"task {directory}: {one_line(exc)}") from None
    if args.format == "jsonl":
        domain, example_id = "local", _name(directory)
    return OsworldTask(domain=domain, example_id=example_id, instruction=instruction)


def _name(directory: Path) -> str:
    """A task directory's own name, as the path names it once `..` and `.` are resolved
    (`a/sub/..` is `a`): it names the task's folder under --out, so it must be a plain name."""
    name = Path(os.path.abspath(directory)).name
    if not _plain_file_name(name):
        raise UsageError(f"task {directory}: its name {name!r} cannot name a folder under --out")
    return name


def _layout(args: argparse.Namespace, config: AgentConfig, several: bool) -> Layout:
    fork = None if args.fork is None else {"source": args.fork, "at": args.at}
    if args.format == "osharm":
        layout: Layout = ResultFolders(args.out, config, args.max_steps, fork)
    else:
        layout = Trajectories(Path(args.out), several)
    return _Again(layout) if args.overwrite else layout


@attrs.frozen
class _Again:
    """A layout whose finished folders are run again (`--overwrite`)."""

    inner: Layout

    def folder(self, task: OsworldTask) -> Path:
        return self.inner.folder(task)

    def is_finished(self, folder: Path) -> bool:
        return False

    def recorder(self, task: OsworldTask, folder: Path, fork: Any) -> Any:
        return self.inner.recorder(task, folder, fork)

    def recording(self, folder: Path) -> Any:
        return None


def _check_targets(
    args: argparse.Namespace, layout: Layout, tasks: list[tuple[OsworldTask, Path]]
) -> None:
    """Where each task will be written, checked before any model is called: a folder of its
    own (two task.json naming one domain/id are refused), and not one holding files of
    another kind (for jsonl: step files without a trajectory) unless --overwrite."""
    owner: dict[Path, Path] = {}
    for task, directory in tasks:
        try:
            target = layout.folder(task)
        except TrajectoryError as exc:
            raise UsageError(f"task {directory}: {one_line(exc)}") from None
        other = owner.setdefault(target, directory)
        if other is not directory:
            raise UsageError(
                f"tasks {other} and {directory} would share the result folder {target}; "
                "give each task.json its own domain/id"
            )
        try:
            if args.format == "osharm" and target.is_dir():
                check_writable(target)
                folder_files(target)
            old = recording_files(target) if args.format == "jsonl" else ()
        except (OSError, TrajectoryError) as exc:
            raise UsageError(f"task {directory}: {one_line(exc)}") from None
        if old and old[0].name != TRAJECTORY_FILE and not args.overwrite:
            raise UsageError(
                f"task {directory}: {target} holds step files ({old[0].name}, ...) and no "
                f"{TRAJECTORY_FILE}: pass --overwrite to replace them"
            )


def overlap(out: Path, other: Path) -> str | None:
    """How the folder `out` and the path `other` overlap ("is", "holds", "is inside"), if they do."""
    try:
        mine, theirs = Path(os.path.realpath(out)), Path(os.path.realpath(other))
    except (OSError, ValueError):  # a name no file can have: it overlaps nothing
        return None
    if mine == theirs:
        return "is"
    if mine in theirs.parents:
        return "holds"
    return "is inside" if theirs in mine.parents else None


def check_out(args: argparse.Namespace, read: Sequence[Path], fork: str | None = None) -> None:
    """Refuse an --out that is, holds or is inside what the run reads: a task directory, the
    replay source or the --fork source (writing there, or redoing a task, would destroy it)."""
    named = [(task, f"the task directory {task}") for task in read]
    source = replay_source(args.model)
    if source is not None:
        named.append((source, f"the replay source {source} (--model {args.model})"))
    if fork is not None:
        named.append((Path(fork), f"the --fork source {fork}"))
    out = Path(args.out)
    for path, what in named:
        relation = overlap(out, path)
        if relation is not None:
            refuse_out(out, relation, what)


@contextlib.contextmanager
def left_tidy(out: Path, folders: Sequence[Path]) -> Iterator[None]:
    """The folders a run made between `out` (included) and its task folders are removed again
    when it leaves them empty, the run's manifest aside (a run that fails before its first
    step leaves no --out behind); folders that were there before are kept, empty or not."""
    made: list[Path] = []
    for folder in folders:
        for path in (folder, *folder.parents):
            if not path.exists() and path not in made:
                made.append(path)
            if path == out:
                break
    try:
        yield
    finally:
        for path in sorted(made, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):  # not empty, or gone: kept as it is
                if path == out and [p.name for p in path.iterdir()] == [MANIFEST_FILE]:
                    (path / MANIFEST_FILE).unlink()  # the manifest of a run that recorded nothing
                path.rmdir()


def refuse_out(out: Path, relation: str, what: str) -> NoReturn:
    """The usage error of an --out that overlaps what the run reads."""
    raise UsageError(
        f"--out {out} {relation} {what}; write the run to a folder outside what it reads"
    )


_Key = tuple[str, str]


def _key(task: OsworldTask) -> _Key:
    return task.domain, task.example_id


@attrs.define
class _Tally:
    """One task's steps as `run` shows them: tokens in (`~`: a local estimate went in) and out
    (`None`: a reply reported none), and the model's time."""

    tokens_in: int = 0
    estimated: bool = False
    tokens_out: int | None = 0
    seconds: float = 0.0


class _Run:
    """A `run` of task directories: the agents, environments and lines of one invocation."""

    def __init__(
        self,
        args: argparse.Namespace,
        config: AgentConfig,
        budget: Budget,
        layout: Layout,
        tasks: list[tuple[OsworldTask, Path]],
        out: TextIO,
        screens: Screening | None = None,
    ) -> None:
        self.args, self.config, self.budget, self.layout = args, config, budget, layout
        self.screening = screens
        self.order, self.out = [task for task, _ in tasks], out
        self.dirs = {_key(task): directory for task, directory in tasks}
        self.several = len(tasks) > 1
        self.clients = ModelClients(args)
        self.envs: dict[_Key, _replay.ReplayEnv] = {}
        self.tallies: dict[_Key, _Tally] = {}
        self.models = {_key(task): self._model(task) for task in self.order}

    def go(self) -> int:
        async def run() -> Sequence[TaskOutcome]:
            try:
                return await arun_task_list(
                    self.order,
                    config=self.config,
                    make_agent=self.agent,
                    make_env=self.env,
                    max_steps=self.args.max_steps,
                    workers=1,
                    report=self.report,
                    budget=self.budget,
                    layout=self.layout,
                    on_step=self.stepped if self.args.format == "jsonl" else None,
                    screening=self.screening,
                    manifest=command_manifest(
                        self.args, self.config, self.args.out, self.args.format
                    ),
                )
            finally:
                await self.clients.aclose()

        with left_tidy(Path(self.args.out), [self.layout.folder(task) for task in self.order]):
            outcomes = asyncio.run(run())
        if self.args.format == "jsonl":
            for outcome in outcomes:
                self.summary(outcome)
            if self.several:
                self.out.write(f"summary (run): {self.budget.run_totals.describe()}\n")
        return 1 if any(o.status == "failed" for o in outcomes) else 0

    def _model(self, task: OsworldTask) -> str:
        """The model name for one task: `replay:DIR` with per-task subdirectories picks the task's one."""
        model: str = self.args.model
        base = replay_source(model) if self.several else None
        if base is None:
            return model
        name = _name(self.dirs[_key(task)])
        if (base / name).is_dir():
            return f"{_replay.REPLAY_SCHEME}{base / name}"
        if base.is_dir() and not _replay.is_recording(base):
            raise UsageError(
                f"--model {model} has no recording for the task {self.dirs[_key(task)]} "
                f"(no folder {base / name})"
            )
        return model

    def agent(self, task: OsworldTask) -> PromptAgent:
        client: ModelClient = self.clients.get(self.models[_key(task)])
        if self.args.fork is not None:
            client = _replay.ForkClient(self.args.fork, client, at=self.args.at)
        return PromptAgent.from_config(self.config, client=client, budget=self.budget)

    def env(self, task: OsworldTask) -> Any:
        env = _replay.ReplayEnv(self.dirs[_key(task)], instruction=task.instruction, per_turn=True)
        self.envs[_key(task)] = env
        self.tallies[_key(task)] = _Tally()
        return in_thread(env)

    def stepped(self, task: OsworldTask, record: StepRecord) -> None:
        """A step's line (jsonl): its observation, actions, tokens, cost and latency."""
        tally, usage = self.tallies[_key(task)], record.response.usage
        step_in = usage.input_tokens
        if step_in is None:
            messages = () if record.request is None else record.request.messages
            step_in = sum(message_tokens(m) for m in messages)
        if not record.prepaid:  # a fork's replayed step was paid for by the run that recorded it
            tally.tokens_in += step_in
            tally.estimated = tally.estimated or usage.input_tokens is None
            out = usage.output_tokens
            tally.tokens_out = (
                None if out is None or tally.tokens_out is None else tally.tokens_out + out
            )
        tally.seconds += record.latency
        actions = "unparsable" if record.actions is None else str(len(record.actions))
        cost = "" if record.cost_usd is None else f", cost ${record.cost_usd:.4f}"
        note = " (replayed: not counted)" if record.prepaid else ""
        sent = "-" if usage.output_tokens is None else usage.output_tokens
        line(
            self.out,
            f"[{_name(self.dirs[_key(task)])}] step {(record.history or 0) + 1}: observation "
            f"{self.envs[_key(task)].observation_name}, actions {actions}, tokens in "
            f"{'~' if usage.input_tokens is None else ''}{step_in} out {sent}{cost}{note}, "
            f"latency {record.latency:.3f}s",
        )

    def report(self, outcome: TaskOutcome) -> None:
        """A task's line (osharm): its steps, actions, score and folder, or why it did not run."""
        if self.args.format != "osharm":
            return
        name = _name(self.dirs[_key(outcome.task)])
        if outcome.status == "stopped":
            line(self.out, f"[{name}] not started: {outcome.detail}")
        elif outcome.status == "skipped":
            line(self.out, f"[{name}] skipped: already finished; folder {outcome.folder}")
        elif outcome.status == "failed":
            line(self.out, f"[{name}] {self._failure(outcome)}; folder {outcome.folder}")
        else:
            env = self.envs[_key(outcome.task)]
            scored = "" if outcome.score is None else f", score {outcome.score}"
            usage = usage_summary(outcome.usage or UsageTotals())
            early = outcome.detail and f"; {outcome.detail}"
            line(
                self.out,
                f"[{name}] {outcome.steps} step(s), {len(env.actions)} action(s){scored}"
                f"{usage}{safety_line(outcome.safety)}{early}; folder {outcome.folder}",
            )

    def summary(self, outcome: TaskOutcome) -> None:
        """A task's summary line (jsonl)."""
        name = _name(self.dirs[_key(outcome.task)])
        tally = self.tallies.get(_key(outcome.task), _Tally())
        tokens_in = f"~{tally.tokens_in}" if tally.estimated else str(tally.tokens_in)
        tokens_out = "-" if tally.tokens_out is None else str(tally.tokens_out)
        trajectory = outcome.folder / TRAJECTORY_FILE
        where = str(trajectory) if trajectory.is_file() else "none"
        line(
            self.out,
            f"summary [{name}]: {outcome.steps} step(s), {self._status(outcome)}; tokens in "
            f"{tokens_in} out {tokens_out}{usage_summary(outcome.usage or UsageTotals())}"
            f"{safety_line(outcome.safety)}; model time {tally.seconds:.3f}s; trajectory {where}",
        )

    def _failure(self, outcome: TaskOutcome) -> str:
        """Why a task failed, naming the observation a replayed desktop could not give."""
        detail, env = one_line(outcome.detail), self.envs.get(_key(outcome.task))
        unread = "observation unreadable:"
        if env is not None and detail.startswith(unread):
            detail = f"observation {env.observation_name} unreadable:{detail[len(unread) :]}"
        return detail

    def _status(self, outcome: TaskOutcome) -> str:
        if outcome.status == "stopped":
            return f"not started ({outcome.detail})"
        if outcome.status == "skipped":
            return "skipped: already finished (--overwrite runs it again)"
        if outcome.status == "failed":
            return self._failure(outcome)
        return {
            "DONE": "ended with DONE",
            "FAIL": "ended with FAIL",
            "max steps": "reached --max-steps",
            "budget": outcome.detail,
            "blocked": outcome.detail,
        }.get(outcome.ended, "observations ran out")
