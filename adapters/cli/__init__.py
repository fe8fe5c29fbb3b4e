"""`osharm-agent`: one step, the rendered prompt, a whole episode, or a replay, from the shell.

Commands: `predict` (one step on an observation), `render` (the exact
messages, no key needed), `run` (an episode over a directory of
observations, recorded), `replay` (re-parse a recorded trajectory and report
differences). A user mistake (missing file, bad XML, unknown model, missing
key, bad option) prints one line on stderr and exits with status 2; a model
call that fails exits with 1. The option groups the commands share, and the
reading of their values, are in `adapters.cli._inputs`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import hashlib
import io
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn, TextIO

import attrs
from stamina.instrumentation import RetryDetails, get_on_retry_hooks, set_on_retry_hooks

from adapters._process import ProcessWide
from adapters._wire import json_for_terminal, printable
from adapters.accounting.budget import Budget
from adapters.accounting.cost import UsageTotals
from adapters.agent import DEFAULT_LOGGER, FAILED_CALL_MESSAGE, PromptAgent
from adapters.cli._budget import add_budget_options, run_budget, usage_summary
from adapters.cli._inputs import (
    ModelClients,
    add_agent_options,
    add_model_options,
    add_observation_options,
    agent_config,
    observation,
    option_words,
    path_option,
    replay_source,
    task_instruction,
    task_place,
)
from adapters.cli._recorded import recorded_config
from adapters.cli._task_list import add_task_list_options, run_task_list_command
from adapters.contract import ModelClient, ModelRequest, ModelResponse
from adapters.engine.server_limits import fit_request
from adapters.errors import (
    BudgetExceeded,
    ConfigurationError,
    ModelCallError,
    TrajectoryError,
    TrajectoryExistsError,
    UsageError,
    error_text,
)
from adapters.registry import REGISTRY
from adapters.trajectories import replay as _replay
from adapters.trajectories.jsonl import (
    TRAJECTORY_FILE,
    StepRecord,
    TrajectoryEntry,
    TrajectoryRecorder,
    open_trajectory,
    recording_files,
    usage_json,
)
from adapters.trajectories.osharm import (
    ResultWriter,
    TaskInfo,
    check_writable,
    folder_files,
    result_folder,
    run_episode,
)
from adapters.trajectories.rebuild import load_recording, rebuild_step
from osharm_core import (
    AgentConfig,
    AgentState,
    ConfigError,
    ImagePart,
    Message,
    ObservationError,
    OsharmError,
    TextPart,
    render_openai_chat,
)
from osharm_core.observation import png_size
from osharm_core.step import StepRequest, parse_reply, prepare_step
from osharm_core.tokens import cl100k_encoding

PROG: Final = "osharm-agent"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def _model_forms() -> str:
    forms = "\n".join(f"  {option_words(form)}" for form in REGISTRY.forms())
    return f"model names:\n{forms}"


def build_parser() -> argparse.ArgumentParser:
    """The `osharm-agent` argument parser."""
    parser = _Parser(
        prog=PROG,
        description="Run the osharm-core PromptAgent from the shell.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    models = _model_forms()

    raw = argparse.RawDescriptionHelpFormatter
    predict = commands.add_parser(
        "predict", help="one step on one observation", epilog=models, formatter_class=raw
    )
    predict.description = (
        "Ask the model for one step on an observation; print the reply and the actions."
    )
    add_observation_options(predict)
    add_agent_options(predict)
    add_model_options(predict)
    predict.add_argument("--json", action="store_true", help="print one JSON object")

    render = commands.add_parser("render", help="the exact messages one step would send")
    render.description = (
        "Print the messages one step would send (images as size and sha256), with cl100k "
        "token counts. Needs no key and no network."
    )
    add_observation_options(render)
    add_agent_options(render)
    add_model_options(render, client=False)
    render.add_argument(
        "--som-out", type=path_option, metavar="PNG", help="write the set-of-marks screenshot here"
    )
    render.add_argument("--json", action="store_true", help="print the wire-shape messages as JSON")
    render.add_argument(
        "--trajectory",
        metavar="PATH",
        help="rebuild a recorded step instead: a trajectory.jsonl, its directory, or an OS-Harm / "
        "OSWorld result folder (its model, observation type, action space, platform and scaling "
        "are used, and each step is cut down as recorded to fit a server profile; the history "
        "starts where the agent's episode did)",
    )
    render.add_argument(
        "--step", type=int, metavar="K", help="with --trajectory: the step (from 1; default 1)"
    )

    run = commands.add_parser(
        "run",
        help="an episode over directories of observations",
        epilog=models,
        formatter_class=raw,
    )
    run.description = (
        "Run an episode on each task directory (NAME.png / NAME.xml observations in sorted "
        "order, the instruction in task.json), one model turn per observation, recording the "
        "trajectory (in both --format kinds every reply uses up one observation, however "
        "many actions it holds: the actions after its first see the same one). With several "
        "tasks each gets --out/NAME; --model replay:DIR replays DIR/NAME for each task when "
        "it exists (a single replay file restarts for every task)."
    )
    run.add_argument("tasks", nargs="*", metavar="TASK_DIR", help="task directories")
    run.add_argument(
        "--tasks",
        dest="task_list",
        metavar="META.json",
        help="an OSWorld task list ({domain: [id, ...]}, e.g. test_all.json); each task is run "
        "into its OS-Harm result folder under --out, finished folders (with result.txt, or unscored.txt) are "
        "skipped and unfinished ones redone, so a rerun resumes",
    )
    run.add_argument(
        "--examples",
        type=path_option,
        metavar="DIR",
        help="with --tasks: the examples directory holding DOMAIN/ID.json task configs",
    )
    run.add_argument("--domain", help="with --tasks: run only this domain (default all)")
    run.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="with --tasks: episodes run at once (default 1, or one per --env-url VM)",
    )
    run.add_argument(
        "--episode-timeout",
        type=float,
        metavar="SECONDS",
        help="with --tasks --workers: stop an episode after this long (it counts as failed)",
    )
    run.add_argument(
        "--fork",
        metavar="RECORDED",
        help="replay this recorded run (trajectory.jsonl, its directory or an OS-Harm result "
        "folder) for the first --at steps, then hand over to --model",
    )
    run.add_argument("--at", type=int, metavar="K", help="with --fork: steps replayed (default 0)")
    run.add_argument(
        "--observations",
        type=path_option,
        metavar="DIR",
        help="with --tasks: the desktop each task sees, DIR/DOMAIN/ID when it exists, else DIR; "
        "one observation per model turn, as for task directories",
    )
    run.add_argument(
        "--out",
        required=True,
        type=path_option,
        metavar="DIR",
        help="where to record trajectories",
    )
    run.add_argument(
        "--instruction",
        help="the task (default: each directory's task.json, else a recording's own steps')",
    )
    run.add_argument("--max-steps", type=int, default=15, help="turns per episode (default 15)")
    run.add_argument("--overwrite", action="store_true", help="replace an existing recording")
    run.add_argument(
        "--format",
        choices=("jsonl", "osharm"),
        help="jsonl: our trajectory.jsonl (default); osharm: OS-Harm / OSWorld result folders "
        "(--out/ACTION_SPACE/OBSERVATION_TYPE/MODEL/DOMAIN/ID with traj.jsonl, better_log.json, "
        "screenshots and result.txt) that OS-Harm's judge reads; DOMAIN and ID come from "
        "task.json's 'domain' and 'id' (default: local and the directory name)",
    )
    add_agent_options(run)
    add_model_options(run)
    add_budget_options(run)
    add_task_list_options(run)

    replay = commands.add_parser("replay", help="re-parse a recorded trajectory")
    replay.description = (
        "Run today's parsers over the replies of a recorded trajectory and report the steps "
        "whose actions differ from the recorded ones (exit status 1 when any differ)."
    )
    replay.add_argument("trajectory", help="a trajectory.jsonl or the directory holding it")
    replay.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


# --- output helpers -----------------------------------------------------------


def _image_label(part: ImagePart) -> str:
    data = base64.b64decode(part.data)
    try:
        width, height = png_size(data)
        size = f"{width}x{height}, "
    except ObservationError:
        size = ""
    digest = hashlib.sha256(data).hexdigest()
    return f"<image {part.media_type}, {size}{len(data)} bytes, sha256 {digest}>"


def _tokens(text: str) -> int:
    return len(cl100k_encoding().encode(text, disallowed_special=()))


def _message_tokens(message: Message) -> int:
    return _tokens(message.text)


def _actions_text(actions: Sequence[Any] | None) -> str:
    if actions is None:
        return "(the reply could not be parsed: no actions)"
    if not actions:
        return "(no actions)"
    return "\n".join(a if isinstance(a, str) else json.dumps(a) for a in actions)


def _usage_json(response: ModelResponse) -> dict[str, int | None]:
    return usage_json(response.usage)


# --- commands -----------------------------------------------------------------


def _cmd_predict(args: argparse.Namespace, out: TextIO) -> int:
    config = agent_config(args)
    obs, directory = observation(args)
    instruction = task_instruction(args.instruction, directory)
    recorder = _LastStep()
    kept = ModelClients(args)
    try:
        agent = PromptAgent.from_config(config, client=kept.get(), recorder=recorder)
        response, actions = agent.predict(instruction, obs)
    finally:
        kept.close()
    step = recorder.last
    if args.json:
        assert step is not None
        reply = {
            "response": response,
            "actions": actions,
            "model": step.response.model,
            "usage": _usage_json(step.response),
            "tries": step.response.tries,
            "context_fallback": step.response.context_fallback,
            "latency": round(step.latency, 6),
        }
        out.write(json_for_terminal(reply) + "\n")
        return 0
    out.write(_for_reader(f"{response}\n--- actions ---\n{_actions_text(actions)}\n", out))
    return 0


def _recorded_step(args: argparse.Namespace) -> tuple[AgentConfig, StepRequest]:
    """`render --trajectory PATH --step K`: the recorded step's configuration and request."""
    if args.observation or args.screenshot or args.a11y:
        raise UsageError("give an observation or --trajectory PATH, not both")
    recording = load_recording(args.trajectory)
    config = recorded_config(args, recording, PROG)
    if args.server_profile is not None:
        print(
            f"{PROG}: note: each step is cut down as the recording says it was cut to fit its "
            "server profile; --server-profile is not used",
            file=sys.stderr,
        )
    step = 1 if args.step is None else args.step
    rebuilt = rebuild_step(recording, step, config)
    return rebuilt.config, rebuilt.request


def _cmd_render(args: argparse.Namespace, out: TextIO) -> int:
    if args.step is not None and args.trajectory is None:
        raise UsageError("--step K picks a step of a recording: give --trajectory PATH")
    if args.trajectory is not None:
        config, step = _recorded_step(args)
    else:
        config = agent_config(args)
        obs, directory = observation(args)
        instruction = task_instruction(args.instruction, directory)
        step = prepare_step(config, AgentState(), instruction, obs)
        # As the agent sends it: cut down to fit --server-profile (sizes as an OpenAI chat body).
        step = fit_request(config, AgentState(), step, None)
    counts = [_message_tokens(m) for m in step.messages]
    degradation = step.observation.degradation
    if degradation is not None:
        print(
            f"{PROG}: request cut down to fit --server-profile: "
            f"{json.dumps(degradation.to_json(), sort_keys=True)}",
            file=sys.stderr,
        )
    som_note = None
    if args.som_out and config.observation_type != "som":
        raise UsageError("--som-out writes the set-of-marks screenshot: use --observation-type som")
    if config.observation_type == "som":
        tagged = base64.b64decode(step.observation.screenshot or "")
        if args.som_out:
            Path(args.som_out).write_bytes(tagged)
            som_note = (
                f"set-of-marks screenshot ({len(step.masks or ())} marks) written to {args.som_out}"
            )
        else:
            som_note = "set-of-marks screenshot not saved (pass --som-out FILE to look at it)"
    if args.json:
        wire = render_openai_chat(step.messages, config.model)
        labels = iter(_image_label(i) for m in step.messages for i in m.images)
        for wire_message in wire:
            for wire_part in wire_message["content"]:
                if wire_part.get("type") == "image_url":
                    wire_part["image_url"]["url"] = next(labels)
                elif wire_part.get("type") == "input_image":
                    wire_part["image_url"] = next(labels)
        rendered = {"messages": wire, "tokens": counts, "total_tokens": sum(counts)}
        out.write(json_for_terminal(rendered, indent=1) + "\n")
    else:
        for number, (message, count) in enumerate(zip(step.messages, counts, strict=True), 1):
            out.write(f"=== [{number}] {message.role} ({count} tokens) ===\n")
            for part in message.parts:
                if isinstance(part, TextPart):
                    out.write(_for_reader(f"{part.text}\n", out))
                else:
                    out.write(f"{_image_label(part)}\n")
        out.write(
            f"=== total: {sum(counts)} tokens in {len(counts)} messages "
            "(cl100k_base, text only; images are not counted) ===\n"
        )
    if som_note:
        print(som_note, file=sys.stderr if args.json else out)
    return 0


@attrs.define
class _LastStep:
    """A recorder that keeps the last step and forwards every step to another recorder."""

    inner: TrajectoryRecorder | None = None
    last: StepRecord | None = None
    entry: TrajectoryEntry | None = None

    def record(self, step: StepRecord) -> object:
        self.last = step
        if self.inner is not None:
            self.entry = self.inner.record(step)
        return self.entry


@attrs.define
class _Tap:
    """A client wrapper that keeps the last request (for a local token count)."""

    inner: ModelClient
    last: ModelRequest | None = None

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.last = request
        return self.inner.complete(request)

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        self.last = request
        return await self.inner.acomplete(request)


@attrs.frozen
class _Outcome:
    name: str
    steps: int
    status: str
    #: The sum, `~` before it when a local estimate went into it (a reply without usage).
    input_tokens: str
    output_tokens: int | None
    seconds: float
    trajectory: Path | None
    failed: bool = False
    usage: UsageTotals = attrs.field(factory=UsageTotals)


def _check_tasks(
    args: argparse.Namespace, config: AgentConfig, tasks: Sequence[Path], several: bool
) -> None:
    """Every task directory checked before any model is called: its instruction, its
    observations, and where it will be written (a folder of its own: two tasks whose
    task.json domain and id name the same result folder are refused, as `task_folders`
    refuses them in task lists); the error names the directory."""
    owner: dict[Path, Path] = {}
    for task in tasks:
        try:
            _replay.ReplayEnv(task, instruction=task_instruction(args.instruction, task))
            if args.format == "osharm":
                target = result_folder(args.out, config, *task_place(task))
                written = target.is_dir() and bool(folder_files(target))
                if target.is_dir():
                    check_writable(target)
                held = "holds a result folder"
            else:
                target = Path(args.out) / task.name if several else Path(args.out)
                old = recording_files(target)
                written, held = bool(old), "exists"
                if old and old[0].name != TRAJECTORY_FILE:
                    held = f"holds step files ({old[0].name}, ...)"
        except (UsageError, ObservationError, TrajectoryError) as exc:
            raise UsageError(f"task {task}: {_one_line(exc)}") from None
        other = owner.setdefault(target, task)
        if other is not task:
            raise UsageError(
                f"tasks {other} and {task} would share the result folder {target}; "
                "give each task.json its own domain/id"
            )
        if written and not args.overwrite:
            raise UsageError(
                f"task {task}: {target} already {held} (pass --overwrite to replace it)"
            )


def _overlap(out: Path, other: Path) -> str | None:
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


def _check_out(
    args: argparse.Namespace, tasks: Sequence[Path], config: AgentConfig | None = None
) -> None:
    """Refuse an --out that is, holds or is inside what the run reads: a task directory, the
    replay source or the --fork source (writing there, or --overwrite, would destroy it); for
    a --tasks run (`config` given), a task-folder root OUT/ACTION_SPACE/OBSERVATION_TYPE/MODEL
    that is or holds the --examples or --observations tree (its DOMAIN/ID folders written
    into desktops being served emptied them). `--out .` beside those trees is fine, and so
    is a root deeper inside them."""
    read = [(task, f"the task directory {task}") for task in tasks]
    source = replay_source(args.model)
    if source is not None:
        read.append((source, f"the replay source {source} (--model {args.model})"))
    if args.fork is not None:
        read.append((Path(args.fork), f"the --fork source {args.fork}"))
    out = Path(args.out)
    for path, what in read:
        relation = _overlap(out, path)
        if relation is not None:
            _refuse_out(out, relation, what)
    if config is None:
        return
    folders = result_folder(out, config, "_", "_").parents[1]
    for option in ("examples", "observations"):
        given = getattr(args, option, None)
        relation = None if given is None else _overlap(folders, Path(given))
        if relation in ("is", "holds"):
            where = f"puts its task folders in {folders}, which {relation}"
            _refuse_out(out, where, f"--{option} {given}")


def _refuse_out(out: Path, relation: str, what: str) -> NoReturn:
    raise UsageError(
        f"--out {out} {relation} {what}; write the run to a folder outside what it reads"
    )


def _task_client_model(args: argparse.Namespace, task: Path, several: bool) -> str:
    """The model name for one task: `replay:DIR` with per-task subdirectories picks the task's one."""
    model: str = args.model
    base = replay_source(model) if several else None
    if base is None:
        return model
    if (base / task.name).is_dir():
        return f"{_replay.REPLAY_SCHEME}{base / task.name}"
    if base.is_dir() and not _replay.is_recording(base):
        raise UsageError(
            f"--model {printable(model)} has no recording for the task {printable(str(task))} "
            f"(no folder {printable(str(base / task.name))})"
        )
    return model


def _run_task(
    args: argparse.Namespace,
    config: AgentConfig,
    task: Path,
    out_dir: Path,
    client: ModelClient,
    out: TextIO,
    budget: Budget,
) -> _Outcome:
    instruction = task_instruction(args.instruction, task)
    env = _replay.ReplayEnv(task, instruction=instruction)
    recorder = _LastStep(TrajectoryRecorder(out_dir, overwrite=args.overwrite))
    tap = _Tap(client)
    agent = PromptAgent.from_config(config, client=tap, recorder=recorder, budget=budget)
    done, tokens_in, tokens_out, seconds = 0, 0, 0, 0.0
    out_known, estimated, failed, status = True, False, False, "reached --max-steps"
    obs: dict[str, Any] = {}
    try:
        obs = env.reset()
    except (ObservationError, TrajectoryError) as exc:  # this task fails, the run goes on
        status, failed = _unreadable(env, exc), True
    while done < args.max_steps and not failed:
        try:
            _, actions = agent.predict(instruction, obs)
        except ModelCallError as exc:
            status, failed = f"model call failed: {_one_line(exc)}", True
            break
        except BudgetExceeded as exc:
            status = f"ended by the {exc.scope} budget: {exc.reason}"
            break
        except ObservationError as exc:
            status, failed = _unreadable(env, exc), True
            break
        done += 1
        last, request = recorder.last, tap.last
        assert last is not None
        assert request is not None
        usage = last.response.usage
        if usage.input_tokens is not None:
            step_in = usage.input_tokens
        else:
            step_in = sum(_message_tokens(m) for m in request.messages)
        step_out = usage.output_tokens
        # A fork's replayed step was paid for by the run that recorded it: shown, not summed.
        replayed = last.response.prepaid is True
        if not replayed:
            tokens_in += step_in
            estimated = estimated or usage.input_tokens is None
            if step_out is None:
                out_known = False
            else:
                tokens_out += step_out
        seconds += last.latency
        shown = "unparsable" if actions is None else str(len(actions))
        cost = "" if last.cost_usd is None else f", cost ${last.cost_usd:.4f}"
        note = " (replayed: not counted)" if replayed else ""
        _line(
            out,
            f"[{task.name}] step {done}: observation {env.observation_name}, actions {shown}, "
            f"tokens in {'~' if usage.input_tokens is None else ''}{step_in} out "
            f"{'-' if step_out is None else step_out}{cost}{note}, "
            f"latency {last.latency:.3f}s",
        )
        terminal = [a for a in actions or () if _replay.is_terminal(a)]
        if terminal:
            final = terminal[0]
            status = "ended with " + (
                final if isinstance(final, str) else str(final["action_type"])
            )
            break
        try:
            obs, ran_out = env.advance()
        except (ObservationError, TrajectoryError) as exc:
            status, failed = _unreadable(env, exc), True
            break
        if ran_out:
            status = "observations ran out"
            break
    assert recorder.inner is not None
    return _Outcome(
        task.name,
        done,
        status,
        f"~{tokens_in}" if estimated else str(tokens_in),
        tokens_out if out_known else None,
        seconds,
        recorder.inner.path,
        failed,
        agent.usage_totals,
    )


def _unreadable(env: _replay.ReplayEnv, exc: Exception) -> str:
    return f"observation {printable(env.observation_name)} unreadable: {_one_line(exc)}"


def _run_osharm(
    args: argparse.Namespace,
    config: AgentConfig,
    tasks: Sequence[Path],
    clients: Sequence[ModelClient],
    out: TextIO,
    budget: Budget,
) -> int:
    """Each task as an OSWorld-shaped episode written to its OS-Harm result folder."""
    failed = False
    for task, client in zip(tasks, clients, strict=True):
        if _run_budget_spent(budget, task.name, out):
            continue
        instruction = task_instruction(args.instruction, task)
        domain, example_id = task_place(task)
        folder = result_folder(args.out, config, domain, example_id)
        writer = ResultWriter(
            folder,
            config=config,
            task=TaskInfo(instruction=instruction, domain=domain, example_id=example_id),
            max_steps=args.max_steps,
            overwrite=args.overwrite,
            fork=None if args.fork is None else {"source": args.fork, "at": args.at},
        )
        env = _replay.ReplayEnv(task, instruction=instruction, per_turn=True)
        agent = PromptAgent.from_config(config, client=client, budget=budget)
        try:
            score = run_episode(agent, env, env.reset(), writer, max_steps=args.max_steps)
        except ModelCallError as exc:
            failed = True
            _line(out, f"[{task.name}] model call failed: {_one_line(exc)}; folder {folder}")
            continue
        except ObservationError as exc:
            failed = True
            _line(out, f"[{task.name}] {_unreadable(env, exc)}; folder {folder}")
            continue
        ended = "" if writer.ended_by is None else f"; ended early: {writer.ended_by}"
        scored = "" if score is None else f", score {score}"
        _line(
            out,
            f"[{task.name}] {len(agent.state)} step(s), {len(env.actions)} action(s)"
            f"{scored}{usage_summary(agent.usage_totals)}{ended}; folder {folder}",
        )
    return 1 if failed else 0


def _run_budget_spent(budget: Budget, name: str, out: TextIO) -> bool:
    """Whether the run's cap is reached (then the task is reported as not started)."""
    reason = budget.run_exceeded()
    if reason is not None:
        _line(out, f"[{name}] not started: run budget exceeded: {reason}")
    return reason is not None


def _task_list_only(args: argparse.Namespace) -> tuple[tuple[str, bool], ...]:
    """The options that only a task-list run reads, and whether each was given."""
    return (
        ("--examples", args.examples is not None),
        ("--domain", args.domain is not None),
        ("--observations", args.observations is not None),
        ("--progress", args.progress),
        ("--env-url", bool(args.env_url)),
        ("--env-revert", args.env_revert is not None),
        ("--env-ready-timeout", args.env_ready_timeout is not None),
        ("--settle", args.settle is not None),
        ("--record", args.record),
        ("--workers", args.workers is not None),
        ("--ray", args.ray is not None),
        ("--ray-cpus-per-worker", args.ray_cpus_per_worker is not None),
        ("--continue-unfinished", args.continue_unfinished),
        ("--episode-timeout", args.episode_timeout is not None),
        ("--requests-per-minute", args.requests_per_minute is not None),
        ("--tokens-per-minute", args.tokens_per_minute is not None),
    )


def _cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    if args.max_steps < 1:
        raise UsageError("--max-steps must be at least 1")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is a file; runs are written into a directory")
    config = agent_config(args)
    budget = run_budget(args, config.model)
    if args.task_list is not None:
        _check_out(args, [], config)
        return run_task_list_command(args, config, out, budget)
    if not args.tasks:
        raise UsageError("give task directories, or --tasks META.json with --examples")
    for flag, given in _task_list_only(args):
        if given:
            raise UsageError(f"{flag} belongs to --tasks META.json runs, not to task directories")
    if args.at is not None and args.fork is None:
        raise UsageError("--at K says how many steps of --fork RECORDED to replay: give --fork")
    args.format = args.format or "jsonl"
    args.at = args.at or 0
    tasks = [Path(t) for t in args.tasks]
    for task in tasks:
        if not task.is_dir():
            raise UsageError(f"no such task directory: {task}")
    several = len(tasks) > 1
    if several and len({t.name for t in tasks}) != len(tasks):
        raise UsageError(
            "task directories must have different names (each gets its own --out subdirectory)"
        )
    _check_out(args, tasks)
    _check_tasks(args, config, tasks, several)
    kept = ModelClients(args)
    try:
        return _run_task_dirs(args, config, tasks, kept, out, budget)
    finally:
        kept.close()


def _run_task_dirs(
    args: argparse.Namespace,
    config: AgentConfig,
    tasks: list[Path],
    kept: ModelClients,
    out: TextIO,
    budget: Budget,
) -> int:
    several = len(tasks) > 1
    clients = [kept.get(_task_client_model(args, t, several)) for t in tasks]
    if args.fork is not None:
        if several:
            raise UsageError("--fork replays one recorded run: give one task directory")
        clients = [_replay.ForkClient(args.fork, clients[0], at=args.at)]
    if args.format == "osharm":
        return _run_osharm(args, config, tasks, clients, out, budget)
    outcomes = []
    for task, client in zip(tasks, clients, strict=True):
        out_dir = Path(args.out) / task.name if several else Path(args.out)
        if _run_budget_spent(budget, task.name, out):
            outcomes.append(_Outcome(task.name, 0, "not started (run budget)", "0", 0, 0.0, None))
            continue
        outcomes.append(_run_task(args, config, task, out_dir, client, out, budget))
    for o in outcomes:
        tokens_out = "-" if o.output_tokens is None else str(o.output_tokens)
        where = "none" if o.trajectory is None else str(o.trajectory)
        _line(
            out,
            f"summary [{o.name}]: {o.steps} step(s), {o.status}; tokens in {o.input_tokens} "
            f"out {tokens_out}{usage_summary(o.usage)}; model time {o.seconds:.3f}s; "
            f"trajectory {where}",
        )
    if several:
        out.write(f"summary (run): {budget.run_totals.describe()}\n")
    return 1 if any(o.failed for o in outcomes) else 0


def _normalized(actions: Sequence[Any] | None) -> str:
    return json.dumps(None if actions is None else list(actions), sort_keys=True)


def _cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    loaded = open_trajectory(args.trajectory)
    entries = loaded.entries
    rows: list[tuple[TrajectoryEntry, list[Any] | None, bool | None]] = []
    for entry in entries:
        try:
            config = AgentConfig(
                model=entry.model or "gpt-4o",
                observation_type=entry.observation_type,  # type: ignore[arg-type]
                action_space=entry.action_space,  # type: ignore[arg-type]
                platform=entry.platform,  # type: ignore[arg-type]
            )
        except ValueError as exc:
            raise TrajectoryError(f"step {entry.step}: {exc}") from None
        if config.observation_type == "som" and entry.masks is None:
            # A folder the reference wrote keeps no boxes: tag_N cannot be read as it was.
            rows.append((entry, None, None))
            continue
        now = parse_reply(config, entry.response, entry.masks, entry.read_frame)
        rows.append((entry, now, _normalized(entry.actions) == _normalized(now)))
    differ = sum(1 for *_, same in rows if same is False)
    apart = [e.step for e, _, same in rows if same is None]
    if args.json:
        report = {
            "steps": len(rows),
            "differ": differ,
            "torn_tail": loaded.torn_tail,
            "differences": [
                {"step": e.step, "recorded": e.actions, "now": now}
                for e, now, same in rows
                if same is False
            ],
            **({"not_comparable": apart} if apart else {}),
        }
        out.write(json_for_terminal(report) + "\n")
    else:
        for entry, now, same in rows:
            if same is None:
                out.write(
                    f"step {entry.step}: not comparable (set-of-marks, and the recording kept "
                    "no mark boxes to read tag_N with)\n"
                )
            elif same:
                count = "unparsable" if now is None else f"{len(now)} action(s)"
                out.write(f"step {entry.step}: same ({count})\n")
            else:
                out.write(
                    f"step {entry.step}: DIFFERS\n  recorded: {_normalized(entry.actions)}\n"
                    f"  now:      {_normalized(now)}\n"
                )
        if loaded.torn_tail is not None:
            out.write(f"note: {printable(loaded.torn_tail)}\n")
        note = f", {len(apart)} not comparable" if apart else ""
        out.write(f"{len(rows)} step(s) replayed, {differ} differ{note}\n")
    return 1 if differ else 0


_COMMANDS: Final[dict[str, Callable[[argparse.Namespace, TextIO], int]]] = {
    "predict": _cmd_predict,
    "render": _cmd_render,
    "run": _cmd_run,
    "replay": _cmd_replay,
}


def _one_line(exc: BaseException | str) -> str:
    """An error or its message on one line: lines joined with "; " (after a colon, with a space),
    other control characters escaped (`printable`: a message can quote a hostile task or desktop)."""
    message = exc if isinstance(exc, str) else error_text(exc)
    lines = [" ".join(line.split()) for line in message.splitlines()]
    text = ""
    for line in filter(None, lines):
        text += (" " if not text or text.endswith(":") else "; ") + line
    return printable(text.strip()) or type(exc).__name__


def _line(out: TextIO, text: str) -> None:
    """`text` as one output line: names from task.json, observation file names and folders
    quoted in it may hold control characters; they are escaped (see `printable`)."""
    out.write(f"{printable(text)}\n")


def _for_reader(text: str, stream: TextIO) -> str:
    """`text` (a reply, a page's words, an instruction) as written to `stream`: on a terminal
    its control characters but newlines and tabs are escaped, so it cannot send the terminal
    an escape sequence; piped or redirected, it is the exact text."""
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError, OSError):  # a closed or unusual stream
        terminal = False
    return printable(text, keep="\n\t") if terminal else text


def _failed(err: TextIO, message: str, status: int) -> int:
    """Report `message` as the one error line on `err`; return the exit `status`."""
    print(f"{PROG}: error: {message}", file=err)
    return status


def _tolerant(stream: TextIO) -> TextIO:
    """`stream`, writing what its encoding cannot hold (lone surrogates in a reply) as escapes."""
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(errors="backslashreplace")
    return stream


class _ReportedHere(logging.Filter):
    """Keeps the agent's "Model call failed" record off the CLI's stderr: every command
    reports the failure itself (its error line, or the task's line), so it would show twice.
    The agent's other records (a request cut down, a budget reached) pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != FAILED_CALL_MESSAGE


#: The most characters of a log record's text the CLI prints (before escaping).
MAX_LOG_TEXT: Final = 2000


class _LogLine(logging.Formatter):
    """Each log record as one line: its text (message, and any traceback) cut after
    `MAX_LOG_TEXT` characters, control characters escaped (`printable`). Records quote what
    a model, a server or a desktop sent; printed raw, a megabyte-long one was one line of a
    megabyte, and an escape sequence in it reached the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if len(text) > MAX_LOG_TEXT:
            text = f"{text[:MAX_LOG_TEXT]}... ({len(text):,} characters)"
        return printable(text)


def _log_handler(err: TextIO) -> logging.Handler:
    """The CLI's handler of last resort: what prints a log record of warning level or above
    when no handler is configured (the CLI configures none), as Python's own does, but each
    record escaped and cut by `_LogLine`. Set as `logging.lastResort`, so a program that
    calls `main` with logging of its own configured keeps it, and sees nothing twice."""
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_LogLine("%(message)s"))
    return handler


def _cli_hooks(err: TextIO) -> Callable[[], None]:
    """stamina's retry hooks and logging's last-resort handler writing to `err` (both are
    process-wide); returns how to put back what was there."""
    hooks, last_resort = get_on_retry_hooks(), logging.lastResort
    set_on_retry_hooks([functools.partial(_say_retry, err)])
    logging.lastResort = _log_handler(err)

    def undo() -> None:
        set_on_retry_hooks(hooks)
        logging.lastResort = last_resort

    return undo


#: The CLI's hooks, set while any `main` runs (calls of `main` may overlap, in threads).
_PROCESS_HOOKS: Final = ProcessWide()


def main(argv: Sequence[str] | None = None) -> int:
    """Run `osharm-agent` with `argv` (default: the process arguments); returns the exit status."""
    out, err = _tolerant(sys.stdout), _tolerant(sys.stderr)
    agent_log, reported = logging.getLogger(DEFAULT_LOGGER), _ReportedHere()
    agent_log.addFilter(reported)
    try:
        with _PROCESS_HOOKS.held(functools.partial(_cli_hooks, err)):
            return _main(argv, out, err)
    finally:
        agent_log.removeFilter(reported)


def _main(argv: Sequence[str] | None, out: TextIO, err: TextIO) -> int:
    terminate = _TermAsInterrupt()
    try:
        args = build_parser().parse_args(argv)
        with terminate:
            return _COMMANDS[args.command](args, out)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except (UsageError, ConfigurationError, ConfigError, TrajectoryError, ObservationError) as exc:
        return _failed(err, _one_line(exc), 2)
    except TrajectoryExistsError as exc:
        return _failed(err, f"{_one_line(exc)} (pass --overwrite to replace it)", 2)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as shell tools do
        _drop_stdout()
        return 141
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return _failed(err, f"{exc.strerror or exc}{where}", 2)
    except ModelCallError as exc:
        return _failed(err, f"model call failed: {_one_line(exc)}", 1)
    except OsharmError as exc:
        return _failed(err, _one_line(exc), 1)
    except KeyboardInterrupt:
        if terminate.received:
            print(f"{PROG}: terminated", file=err)
            return 128 + signal.SIGTERM
        print(f"{PROG}: interrupted", file=err)
        return 130


class _TermAsInterrupt:
    """While a command runs (in the main thread), SIGTERM is handled as Ctrl-C: schedulers
    (Slurm, Kubernetes, `timeout`) stop a job with it, and without a handler the process
    died at once, leaving environments unclosed (VMs still recording) and episode calls cut
    off; now episodes stop, environments close and whole steps are kept, as on Ctrl-C."""

    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None

    def __enter__(self) -> _TermAsInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *_: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = True
        on_interrupt = signal.getsignal(signal.SIGINT)
        if callable(on_interrupt) and _stops_on_interrupt(on_interrupt):
            on_interrupt(signal.SIGINT, frame)  # asyncio's graceful stop, or Python's own
        else:  # SIGINT ignored (a job started in the background) or a caller's own handler
            raise KeyboardInterrupt


def _stops_on_interrupt(handler: object) -> bool:
    """Whether `handler` is Python's own SIGINT handler or asyncio's (which cancels the run's
    main task), the ones that stop a command; a caller's own handler might only set a flag."""
    if handler is signal.default_int_handler:
        return True
    owner = getattr(getattr(handler, "func", None), "__self__", None)
    return isinstance(handler, functools.partial) and isinstance(owner, asyncio.Runner)


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush finds no broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


def _say_retry(err: TextIO, details: RetryDetails) -> None:
    """One line on stderr for each retry (a model call or a VM call): when, and why."""
    err.write(
        f"{PROG}: trying again in {details.wait_for:.1f} s (retry {details.retry_num}): "
        f"{_one_line(details.caused_by)}\n"
    )
    err.flush()
