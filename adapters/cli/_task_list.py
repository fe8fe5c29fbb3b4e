"""`osharm-agent run-tasks`: an OSWorld task list on this machine (`--workers`) or a Ray cluster (`--ray`).

Each task runs into its OS-Harm result folder under `--out`, against a
replayed desktop (`--observations`) or a live OSWorld VM (`--env-url`, one
per worker); finished folders are skipped, so a rerun resumes. The clients of
the model share one rate limiter (cluster-wide with `--ray`). A progress
line goes to stderr (on a terminal, or with `--progress`) and a summary table
to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import attrs
import httpx

from adapters._wire import printable
from adapters.accounting.budget import Budget
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
)
from adapters.cli._manifest import add_manifest_option, command_manifest
from adapters.cli._output import PROG, one_line
from adapters.cli._run import check_out, left_tidy, overlap, refuse_out
from adapters.cli._safety import add_safety_options, safety_line, screening
from adapters.engine import calls_in_flight, connections_for
from adapters.engine.limits import Limiter, RateLimiter
from adapters.errors import UsageError
from adapters.runs.environments import (
    DEFAULT_READY_TIMEOUT,
    DEFAULT_SETTLE,
    AsyncEnv,
    Env,
    OSWorldServerEnv,
    in_thread,
)
from adapters.runs.progress import Progress, RunResult, task_name
from adapters.runs.screening import Screening
from adapters.runs.tasks import (
    OsworldTask,
    TaskOutcome,
    arun_task_list,
    is_finished,
    load_task_list,
)
from adapters.runs.vm_http import VmUnanswered
from adapters.runs.vm_revert import RevertCommand
from adapters.runs.vm_setup import DEFAULT_CLIENT_PASSWORD
from adapters.trajectories import replay as _replay
from adapters.trajectories.osharm import RECORDING_FILE, result_folder
from osharm_core import AgentConfig


def add_command(commands: Any, formatter: type[argparse.HelpFormatter], models: str) -> None:
    """The `run-tasks` subcommand (also reached as `run --tasks`, for a release)."""
    run = commands.add_parser(
        "run-tasks",
        help="an OSWorld task list, into OS-Harm result folders, resumable",
        epilog=models,
        formatter_class=formatter,
    )
    run.description = (
        "Run an OSWorld task list ({domain: [id, ...]}, e.g. test_all.json) into OS-Harm "
        "result folders under --out (OUT/ACTION_SPACE/OBSERVATION_TYPE/MODEL/DOMAIN/ID), "
        "against replayed desktops (--observations) or live OSWorld VMs (--env-url). "
        "Finished folders (with result.txt, or unscored.txt) are skipped and unfinished ones "
        "redone, so a rerun resumes."
    )
    run.add_argument(
        "--tasks", dest="task_list", required=True, metavar="META.json", help="the task list"
    )
    run.add_argument(
        "--examples",
        required=True,
        type=path_option,
        metavar="DIR",
        help="the examples directory holding DOMAIN/ID.json task configs",
    )
    run.add_argument("--domain", default="all", help="run only this domain")
    run.add_argument(
        "--out", required=True, type=path_option, metavar="DIR", help="where the folders go"
    )
    run.add_argument(
        "--max-steps", type=positive_count, default=15, metavar="N", help="turns per episode"
    )
    run.add_argument(
        "--workers",
        type=positive_count,
        metavar="N",
        help="episodes run at once (default 1, or one per --env-url VM)",
    )
    run.add_argument(
        "--episode-timeout",
        type=float,
        metavar="SECONDS",
        help="stop an episode after this long (it counts as failed)",
    )
    run.add_argument(
        "--continue-unfinished",
        action="store_true",
        help="an unfinished task's recorded model steps are replayed (the environment "
        "re-executes their actions) and only the rest asks the model, instead of redoing "
        "the task from its start",
    )
    run.add_argument(
        "--progress",
        action="store_true",
        help="a progress line over the episodes and a line per model step on stderr (shown "
        "anyway when stderr is a terminal)",
    )
    _add_desktop_options(run)
    _add_scale_options(run)
    add_agent_options(run)
    add_model_options(run)
    add_budget_options(run)
    add_safety_options(run)
    add_manifest_option(run)
    run.set_defaults(handler=run_tasks_command)


def _add_desktop_options(run: argparse.ArgumentParser) -> None:
    """Where the desktops come from: replayed observations or live OSWorld VMs."""
    group = run.add_argument_group("desktops")
    group.add_argument(
        "--observations",
        type=path_option,
        metavar="DIR",
        help="the desktop each task sees, DIR/DOMAIN/ID when it exists, else DIR; one "
        "observation per model turn, as for task directories",
    )
    group.add_argument(
        "--env-url",
        action="append",
        metavar="URL",
        help="drive the OSWorld VM whose server listens at URL (http://HOST:5000) instead of "
        "replaying --observations; repeat it for one VM per worker",
    )
    group.add_argument(
        "--settle",
        type=float,
        metavar="SECONDS",
        help="with --env-url: seconds a VM's desktop is left to settle after a task's setup "
        f"steps before the first observation (default {DEFAULT_SETTLE:g}, as OS-Harm's "
        "runner waits; OSWorld's waits 60)",
    )
    group.add_argument(
        "--env-revert",
        metavar="COMMAND",
        help="with --env-url: a shell command that restores a VM to its clean snapshot, run "
        "before each task (e.g. 'vmrun -T ws revertToSnapshot VM.vmx init_state && vmrun -T ws "
        "start VM.vmx nogui'); it sees OSHARM_VM_URL and OSHARM_VM_INDEX (the VM's place among "
        "--env-url, from 0) and may take 10 minutes. Without it each task starts from the "
        "desktop the previous one left",
    )
    group.add_argument(
        "--env-ready-timeout",
        type=float,
        metavar="SECONDS",
        help="with --env-revert: how long a reverted VM's server may take to answer again "
        f"(default {DEFAULT_READY_TIMEOUT:g})",
    )
    group.add_argument(
        "--record",
        action="store_true",
        help="with --env-url: record each episode's screen on the VM and save it as "
        "recording.mp4 in the task's result folder, as OSWorld's runner does",
    )


def _add_scale_options(run: argparse.ArgumentParser) -> None:
    """Shared rate limits and Ray."""
    group = run.add_argument_group("rate limits and Ray")
    group.add_argument(
        "--requests-per-minute",
        type=float,
        metavar="N",
        help="the model's request budget, shared by all workers (the provider's rate-limit "
        "headers and 429s are followed in any case)",
    )
    group.add_argument(
        "--tokens-per-minute",
        type=float,
        metavar="N",
        help="the model's token budget, shared by all workers",
    )
    group.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="spread the episodes over a Ray cluster (auto, HOST:6379 or ray://HOST:10001), "
        "--workers actors each with its own environment; needs pip install "
        "'osharm-core[ray]' and an --out every node sees",
    )
    group.add_argument(
        "--ray-cpus-per-worker",
        type=float,
        metavar="CPUS",
        help="with --ray: the CPUs each worker actor asks Ray for (default 1; a fraction such "
        "as 0.25 fits more workers on a node when episodes mostly wait on a remote model)",
    )


def replay_env(observations: Path, task: OsworldTask) -> Env:
    """The replayed desktop of `task`: OBSERVATIONS/DOMAIN/ID when it exists, else OBSERVATIONS,
    one observation per model turn (as `run TASK_DIR` shows them)."""
    own = observations / task.domain / task.example_id
    where = own if own.is_dir() else observations
    return _replay.ReplayEnv(where, instruction=task.instruction, per_turn=True)


def vm_env(
    url: str,
    task: OsworldTask,
    recording_in: RecordingPlace | None = None,
    settle: float = DEFAULT_SETTLE,
    client_password: str = DEFAULT_CLIENT_PASSWORD,
    revert: RevertCommand | None = None,
    ready_timeout: float = DEFAULT_READY_TIMEOUT,
) -> Env:
    """The OSWorld VM at `url`; with `recording_in`, it records each episode into the task's
    folder; with `revert`, it is restored to its snapshot before the task."""
    recording = None if recording_in is None else recording_in.path(task)
    env = OSWorldServerEnv(
        url,
        recording=recording,
        settle=settle,
        client_password=client_password,
        revert=revert,
        ready_timeout=ready_timeout,
    )
    return NamedVm(env, url)


class NamedVm:
    """An `OSWorldServerEnv` whose "no answer at all" (`VmUnanswered`, which stops the run)
    names its --env-url: with several VMs, which one went away. Everything else is the VM's."""

    def __init__(self, env: OSWorldServerEnv, url: str) -> None:
        self.env, self.url = env, url

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (a copy being made): no lookup through itself
            raise AttributeError(name)
        return getattr(self.env, name)

    def _named(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except VmUnanswered as exc:
            raise VmUnanswered(f"--env-url {self.url}: {exc}", sent=exc.sent) from exc

    def reset(self, task_config: Any = None, **kwargs: Any) -> Any:
        return self._named(self.env.reset, task_config, **kwargs)

    def step(self, action: Any, pause: float = 0) -> Any:
        return self._named(self.env.step, action, pause)

    def evaluate(self) -> float | None:
        return self.env.evaluate()

    def close(self) -> None:
        self._named(self.env.close)


@attrs.frozen
class RecordingPlace:
    """Where `--record` saves an episode's screen recording: `recording.mp4` in its result folder."""

    out: str
    config: AgentConfig

    def path(self, task: OsworldTask) -> Path:
        folder = result_folder(self.out, self.config, task.domain, task.example_id)
        return folder / RECORDING_FILE


def task_agent(
    args: argparse.Namespace,
    config: AgentConfig,
    clients: ModelClients,
    task: OsworldTask,
    limiter: Limiter | None,
) -> PromptAgent:
    """The agent of `task`: --model (replay:DIR/DOMAIN/ID when it exists), sharing `limiter`
    and, with the run's other tasks, its model's client from `clients`."""
    model: str = args.model
    source = replay_source(model)
    if source is not None:
        own = source / task.domain / task.example_id
        if own.is_dir():
            model = f"{_replay.REPLAY_SCHEME}{own}"
    return PromptAgent.from_config(config, client=clients.get(model, limiter=limiter))


def _check_replay_sources(
    args: argparse.Namespace, config: AgentConfig, tasks: Sequence[OsworldTask]
) -> None:
    """Refuse `--model replay:ROOT` when ROOT is a tree of recordings (not one itself) without
    `ROOT/DOMAIN/ID` for a task the run would play (not finished in --out): that task could
    only fail, and would stop the run part-way through."""
    source = replay_source(args.model)
    if source is None or not source.is_dir() or _replay.is_recording(source):
        return
    missing = [
        task
        for task in tasks
        if not (source / task.domain / task.example_id).is_dir()
        and not is_finished(result_folder(args.out, config, task.domain, task.example_id))
    ]
    if missing:
        names = ", ".join(task_name(task) for task in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        first = source / missing[0].domain / missing[0].example_id
        raise UsageError(
            f"--model {printable(args.model)} has no recording for {names}{more} "
            f"(no folder {printable(str(first))}); give --domain or a task list without them"
        )


class _Returned:
    """An environment whose `close()` also gives its VM back to the pool."""

    def __init__(self, env: AsyncEnv, release: Callable[[], None]) -> None:
        self.env, self._release = env, release

    async def reset(self, task_config: Any = None, **kwargs: Any) -> Any:
        return await self.env.reset(task_config, **kwargs)

    async def step(self, action: Any, pause: float = 0) -> Any:
        return await self.env.step(action, pause)

    async def evaluate(self) -> float | None:
        return await self.env.evaluate()

    async def close(self) -> None:
        try:
            await self.env.close()
        finally:
            self._release()


def _env_factories(
    args: argparse.Namespace, config: AgentConfig
) -> Sequence[Callable[[OsworldTask], Env]]:
    """One environment factory per worker (each VM of --env-url), or one for all (replays)."""
    if args.record and not args.env_url:
        raise UsageError("--record records a live VM's screen: give --env-url URL")
    if args.env_revert is not None and not args.env_url:
        raise UsageError("--env-revert restores live VMs: give --env-url URL")
    if args.settle is not None and not args.env_url:
        raise UsageError("--settle waits after a live VM's task setup: give --env-url URL")
    if args.env_ready_timeout is not None and args.env_revert is None:
        raise UsageError(
            "--env-ready-timeout bounds the wait for a reverted VM: give --env-revert COMMAND"
        )
    if args.env_url:
        if args.observations is not None:
            raise UsageError("give --observations DIR or --env-url URL, not both")
        _check_vm_urls(args.env_url)
        if args.workers > len(args.env_url):
            raise UsageError(
                f"--workers {args.workers} needs as many --env-url VMs (one environment per "
                f"episode); got {len(args.env_url)}"
            )
        settle = DEFAULT_SETTLE if args.settle is None else args.settle
        if not 0 <= settle <= 3600:
            raise UsageError(f"--settle takes 0 to 3600 seconds; got {settle:g}")
        ready = DEFAULT_READY_TIMEOUT if args.env_ready_timeout is None else args.env_ready_timeout
        if not 0 < ready <= 86400:
            raise UsageError(f"--env-ready-timeout takes 0 to 86400 seconds; got {ready:g}")
        if args.env_revert is not None and not args.env_revert.strip():
            raise UsageError("--env-revert needs a command")
        place = RecordingPlace(args.out, config) if args.record else None
        return [
            functools.partial(
                vm_env,
                url,
                recording_in=place,
                settle=settle,
                client_password=config.client_password,
                revert=(
                    None
                    if args.env_revert is None
                    else RevertCommand(args.env_revert, vm_url=url, vm_index=index)
                ),
                ready_timeout=ready,
            )
            for index, url in enumerate(args.env_url[: args.workers])
        ]
    if args.observations is None:
        raise UsageError("--tasks needs --observations DIR (or --env-url URL)")
    return [functools.partial(replay_env, Path(args.observations))]


def _check_out(args: argparse.Namespace, config: AgentConfig) -> None:
    """Refuse an --out that is, holds or is inside the replay source, and one whose task-folder
    root OUT/ACTION_SPACE/OBSERVATION_TYPE/MODEL is or holds the --examples or --observations
    tree (its DOMAIN/ID folders written into desktops being served would empty them). `--out .`
    beside those trees is fine, and so is a root deeper inside them."""
    check_out(args, [])
    folders = result_folder(args.out, config, "_", "_").parents[1]
    for option, given in (("examples", args.examples), ("observations", args.observations)):
        relation = None if given is None else overlap(folders, Path(given))
        if relation in ("is", "holds"):
            where = f"puts its task folders in {folders}, which {relation}"
            refuse_out(Path(args.out), where, f"--{option} {given}")


def _check_vm_url(url: str) -> tuple[str, str, int | None, str]:
    """The VM server `url` names (scheme, host, port, path), or a `UsageError` unless it is
    an http(s) URL with a host."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise UsageError(f"--env-url {url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise UsageError(f"--env-url {url!r} must be http://HOST:PORT (the VM server's address)")
    default_port = 80 if parsed.scheme == "http" else 443
    return parsed.scheme, parsed.host, parsed.port or default_port, parsed.path.rstrip("/")


def _check_vm_urls(urls: Sequence[str]) -> None:
    """Each of `urls` checked, and none naming a VM another one names: two episodes would
    drive one desktop at once."""
    seen: dict[tuple[str, str, int | None, str], str] = {}
    for url in urls:
        place = _check_vm_url(url)
        if place in seen:
            raise UsageError(
                f"--env-url {url!r} names the same VM as --env-url {seen[place]!r}: each "
                "episode needs a VM of its own (give one --env-url per VM)"
            )
        seen[place] = url


def _pooled(factories: Sequence[Callable[[OsworldTask], Env]]) -> Callable[[OsworldTask], AsyncEnv]:
    """An async environment per episode from a free factory (a VM is used by one episode at once)."""
    if len(factories) == 1:
        return lambda task: in_thread(factories[0](task))
    free = collections.deque(factories)

    def pooled(task: OsworldTask) -> AsyncEnv:
        factory = free.popleft()
        return _Returned(in_thread(factory(task)), lambda: free.append(factory))

    return pooled


def _rate_limiter(args: argparse.Namespace) -> RateLimiter:
    for flag, value in (
        ("--requests-per-minute", args.requests_per_minute),
        ("--tokens-per-minute", args.tokens_per_minute),
    ):
        if value is not None and not value > 0:
            raise UsageError(f"{flag} must be a number above 0")
    return RateLimiter(
        requests_per_minute=args.requests_per_minute, tokens_per_minute=args.tokens_per_minute
    )


def _cpus_per_worker(args: argparse.Namespace) -> float:
    """--ray-cpus-per-worker (default 1): a fraction in (0, 1] or a whole number, as Ray takes."""
    cpus = args.ray_cpus_per_worker
    if cpus is None:
        return 1.0
    if args.ray is None:
        raise UsageError("--ray-cpus-per-worker sizes Ray's worker actors: give --ray ADDRESS")
    if not (0 < cpus <= 1 or (cpus > 1 and float(cpus).is_integer())):
        raise UsageError(
            f"--ray-cpus-per-worker takes a fraction in (0, 1] or a whole number; got {cpus:g}"
        )
    return float(cpus)


#: The library CPU one process spends on a whole episode step (its prompt, the model call's
#: both ends, the reply, the desktop, the result folder): 10.5 ms measured by
#: `tests/benchmarks/test_bench_runner.py` (32 workers, screenshot_a11y_tree), rounded up. It
#: bounds how many episodes one process keeps busy at a given model latency.
STEP_CPU_SECONDS: Final = 0.012
#: The model latency (seconds) the one-process hint assumes.
TYPICAL_LATENCY: Final = 5.0


def run_tasks_command(args: argparse.Namespace, out: TextIO) -> int:
    """`run-tasks --tasks META.json`; the exit status (1 when an episode failed)."""
    config = agent_config(args)
    budget = run_budget(args, config.model)
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is a file; runs are written into a directory")
    _check_out(args, config)
    if args.workers is None:
        args.workers = len(args.env_url) if args.env_url else 1
    timeout = args.episode_timeout
    if timeout is not None and not 0 < timeout < float("inf"):
        raise UsageError(f"--episode-timeout takes a number of seconds above 0; got {timeout:g}")
    cpus = _cpus_per_worker(args)
    screens = screening(args)
    factories = _env_factories(args, config)
    tasks = load_task_list(args.task_list, args.examples, domain=args.domain)
    _check_replay_sources(args, config, tasks)
    one_process = calls_in_flight(TYPICAL_LATENCY, STEP_CPU_SECONDS)
    if args.ray is None and args.workers > one_process:
        print(
            f"{PROG}: note: one process keeps about {one_process} episodes busy at a "
            f"{TYPICAL_LATENCY:g} s model latency before its own CPU is the limit; "
            f"--workers {args.workers} past that waits on it: --ray spreads episodes over "
            "processes",
            file=sys.stderr,
        )

    def report(outcome: TaskOutcome) -> None:
        score = "" if outcome.score is None else f", score {outcome.score}"
        detail = f": {one_line(outcome.detail)}" if outcome.detail else ""
        usage = "" if outcome.usage is None else usage_summary(outcome.usage)
        safety = safety_line(outcome.safety)
        out.write(f"[{task_name(outcome.task)}] {outcome.status}{score}{detail}{usage}{safety}\n")

    err = sys.stderr
    shown = args.progress or err.isatty()
    progress = Progress(err, len(tasks), live=err.isatty()) if shown else None
    run = _RunTasks(args, config, budget, tasks, report, progress, screens)
    folders = [result_folder(args.out, config, t.domain, t.example_id) for t in tasks]
    try:
        with left_tidy(Path(args.out), folders):
            result = run.on_ray(factories, cpus) if args.ray is not None else run.here(factories)
    finally:
        if progress is not None:
            progress.close()
    summary = result.summary
    stopped = f", {summary.stopped} not started (run budget)" if summary.stopped else ""
    held = sum(o.status == "skipped" and o.detail.startswith("held by") for o in result)
    busy = f", {held} held by another run" if held else ""
    out.write(
        f"summary: {summary.episodes} task(s): {summary.finished} finished, "
        f"{summary.skipped - held} skipped (already finished){busy}, {summary.failed} failed"
        f"{stopped}; {summary.usage.describe()}\n"
    )
    out.write(summary.table())
    return 1 if summary.failed else 0


@attrs.frozen
class _RunTasks:
    """A task list run here (`--workers` on one event loop) or over a Ray cluster (`--ray`)."""

    args: argparse.Namespace
    config: AgentConfig
    budget: Budget
    tasks: Sequence[OsworldTask]
    report: Callable[[TaskOutcome], None]
    progress: Progress | None
    screening: Screening | None = None

    def clients(self) -> ModelClients:
        """The run's model clients, each pool holding a connection per worker."""
        return ModelClients(self.args, max_connections=connections_for(self.args.workers))

    def on_ray(self, factories: Sequence[Callable[[OsworldTask], Env]], cpus: float) -> RunResult:
        from adapters.runs.ray_runner import run_task_list_on_ray

        args = self.args
        return run_task_list_on_ray(
            self.tasks,
            config=self.config,
            result_dir=args.out,
            make_agent=functools.partial(task_agent, args, self.config, self.clients()),
            make_env=factories * args.workers if len(factories) == 1 else factories,
            max_steps=args.max_steps,
            actors=args.workers,
            cpus_per_actor=cpus,
            address=args.ray,
            episode_timeout=args.episode_timeout,
            requests_per_minute=args.requests_per_minute,
            tokens_per_minute=args.tokens_per_minute,
            report=self.report,
            listener=self.progress,
            continue_unfinished=args.continue_unfinished,
            budget=self.budget,
            # The retry lines and warnings, printed here as a run without --ray prints them.
            relay_messages=True,
            screening=self.screening,
            manifest=command_manifest(args, self.config, args.out, "osharm"),
        )

    def here(self, factories: Sequence[Callable[[OsworldTask], Env]]) -> RunResult:
        args, clients, limiter = self.args, self.clients(), _rate_limiter(self.args)

        async def run() -> RunResult:
            try:
                return await arun_task_list(
                    self.tasks,
                    config=self.config,
                    result_dir=args.out,
                    make_agent=lambda task: task_agent(args, self.config, clients, task, limiter),
                    make_env=_pooled(factories),
                    max_steps=args.max_steps,
                    workers=args.workers,
                    episode_timeout=args.episode_timeout,
                    report=self.report,
                    listener=self.progress,
                    continue_unfinished=args.continue_unfinished,
                    budget=self.budget,
                    screening=self.screening,
                    manifest=command_manifest(args, self.config, args.out, "osharm"),
                )
            finally:
                await clients.aclose()

        return asyncio.run(run())
