"""Task lists on a local Ray cluster: two worker actors, a loopback model, resume, the CLI's --ray."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import shlex
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stamina
from stamina.instrumentation import RetryDetails, get_on_retry_hooks, set_on_retry_hooks

from adapters.accounting import Budget, UsageTotals
from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.engine.limits import Limiter
from adapters.errors import (
    BudgetExceeded,
    ConfigurationError,
    EnvironmentFailure,
    ModelCallError,
    RetryableError,
    UsageError,
    error_line,
    error_text,
)
from adapters.registry import REGISTRY
from adapters.runs import (
    OsworldTask,
    TaskOutcome,
    arun_task_list,
    in_thread,
    is_finished,
    load_task_list,
    run_task_list,
)
from adapters.testing import FakeClient
from adapters.trajectories.osharm import load_result_folder, result_folder
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig, ConfigError, RuleScreen
from tests.adapters.loopback import (
    LoopbackServer,
    Received,
    Reply,
    chat_completion,
    openai_error,
)
from tests.facade.helpers import (
    Killed,
    KillingEnv,
    observation_folder,
    snapshot,
    write_task_list,
)
from tests.facade.test_environments import serve_vm, vm_server  # noqa: F401  (the fixture)

ray = pytest.importorskip(
    "ray", reason="the ray extra is not installed (pip install 'osharm-core[ray]')"
)
if any(c.isspace() for c in sys.executable + ray.__file__):
    # Its workers crash at start ("bash: /tmp/a: No such file or directory" in the raylet's
    # logs) and Ray starts new ones every minute: each test would wait out start_timeout.
    pytest.skip(
        "Ray runs its workers' command through a shell unquoted: a Python or Ray installed "
        f"under a path holding whitespace ({sys.executable}) cannot start them",
        allow_module_level=True,
    )
from adapters.runs import _relay, ray_runner  # noqa: E402
from adapters.runs.locks import FolderLock, take_lock  # noqa: E402
from adapters.runs.manifest import read_manifest  # noqa: E402
from adapters.runs.ray_actors import RayLimiter, _Raised, _sendable  # noqa: E402
from adapters.runs.ray_runner import run_task_list_on_ray  # noqa: E402
from adapters.runs.screening import Screening  # noqa: E402
from tests.facade.test_screening import WIPE  # noqa: E402  (the screen's own harmful reply)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = AgentConfig(model="m", observation_type="a11y_tree", action_space="pyautogui")
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
IDS = {"os": ["_a", "_b", "_c"], "chrome": ["_d"]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A local Ray cluster with two CPUs for this module, shut down at its end; its workers'
    retries do not wait. Its HOME is a temporary folder: a new cluster writes its token to
    ~/.ray/auth_token, which failed the module where HOME cannot be written (and wrote into
    the user's HOME elsewhere).

    The workers inherit the node's environment (a local cluster's node is this process): a
    `runtime_env` (its env_vars or a worker_process_setup_hook) would have Ray start a fresh
    worker for every actor, about 2 s each against 0.2-0.8 s from the pool. A sitecustomize
    on the workers' path sets stamina's testing mode in each of them instead of the hook, and
    imports the actors' module there as a pool worker starts, before an actor needs it (the
    module 107 s -> 97 s)."""
    site = tmp_path_factory.mktemp("ray-site")
    (site / "sitecustomize.py").write_text(
        "import stamina\n\nimport adapters.runs.ray_actors\n\n"
        "stamina.set_testing(True, attempts=1000, cap=True)\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(tmp_path_factory.mktemp("ray-home")))
        patch.setenv("PYTHONPATH", os.pathsep.join((str(site), str(ROOT))))
        # The key variable is set on the node (here: this process), never sent.
        patch.setenv("LOOPBACK_KEY", "k")
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _node_ip_address="127.0.0.1",
        )
        try:
            yield
        finally:
            ray.shutdown()


def _click_then_done(received: Received) -> Reply:
    messages = received.json()["messages"]
    answered = sum(m["role"] == "assistant" for m in messages)
    return Reply(200, chat_completion(CLICK if answered == 0 else "DONE"))


@pytest.fixture(scope="module")
def model_server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as server:
        server.route("POST", r".*/chat/completions", _click_then_done)
        yield server


def _task_list(root: Path) -> tuple[Path, Path]:
    return write_task_list(root, IDS)


def make_agent(base_url: str, task: OsworldTask, limiter: Limiter | None) -> PromptAgent:
    client = REGISTRY.client_for("compat/m", base_url=base_url, api_key="k", limiter=limiter)
    return PromptAgent.from_config(CONFIG, client=client)


def make_env(desktop: Path, task: OsworldTask) -> ReplayEnv:
    return ReplayEnv(desktop, instruction=task.instruction)


class DyingEnv(ReplayEnv):
    """A replayed desktop whose reset ends its process (as the OOM killer would) when `dies`."""

    def __init__(self, directory: Path, instruction: str, dies: bool) -> None:
        super().__init__(directory, instruction=instruction)
        self.dies = dies

    def reset(self, task_config: object = None, **extra: object) -> dict[str, Any]:
        if self.dies:
            os._exit(1)
        return super().reset(task_config, **extra)


def make_dying_env(desktop: Path, victims: str, marks: Path, task: OsworldTask) -> DyingEnv:
    """An environment that kills its actor for tasks in `victims`, once each (a mark in
    `marks` remembers the kill, so a rerun runs the task)."""
    mark = marks / task.example_id
    dies = task.example_id in victims.split() and not mark.exists()
    if dies:
        mark.touch()
    return DyingEnv(desktop, task.instruction, dies)


class Heard:
    """A `RunListener` noting what it hears, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []

    def started(self, task: OsworldTask) -> None:
        self.events.append(("started", task.example_id, 0))

    def stepped(self, task: OsworldTask, step: int, max_steps: int) -> None:
        assert max_steps == 5
        self.events.append(("stepped", task.example_id, step))

    def ended(self, outcome: TaskOutcome) -> None:
        self.events.append((outcome.status, outcome.task.example_id, outcome.steps))


def test_a_task_list_runs_on_two_actors_and_resumes(
    cluster: None, model_server: LoopbackServer, tmp_path: Path
) -> None:
    meta, examples = _task_list(tmp_path)
    tasks = load_task_list(meta, examples)
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    ended: list[str] = []
    common: dict[str, Any] = {
        "config": CONFIG,
        "result_dir": results,
        "make_agent": functools.partial(make_agent, model_server.base_url + "/v1"),
        "make_env": functools.partial(make_env, desktop),
        "max_steps": 5,
        "actors": 2,
        "requests_per_minute": 6000,
    }
    # One task already finished: it is never scheduled.
    first = result_folder(results, CONFIG, "os", "_a")
    first.mkdir(parents=True)
    (first / "result.txt").write_text("1.0\n", encoding="utf-8")
    result = run_task_list_on_ray(tasks, report=lambda o: ended.append(o.task.example_id), **common)
    assert [o.status for o in result] == ["skipped", "finished", "finished", "finished"]
    assert sorted(ended) == ["_a", "_b", "_c", "_d"]
    assert result.summary.steps == 6
    assert result.summary.total_tokens == 6 * 14
    for task in tasks[1:]:
        folder = result_folder(results, CONFIG, task.domain, task.example_id)
        assert is_finished(folder)
        assert [e.response for e in load_result_folder(folder)] == [CLICK, "DONE"]
    again = run_task_list_on_ray(tasks, **common)
    assert again.summary.skipped == 4
    assert again.summary.steps == 0


def make_wiping_agent(task: OsworldTask, limiter: Limiter | None) -> PromptAgent:
    """An agent whose first reply types a destructive command, then is done."""
    return PromptAgent.from_config(CONFIG, client=FakeClient([WIPE, "DONE"]))


def test_on_ray_the_screen_runs_in_the_actors_and_blocks_there(
    cluster: None, tmp_path: Path
) -> None:
    """`screening` travels to the Ray actors: the rule screen flags the rm -rf there, the
    block policy keeps it from running, and the step's event is in better_log.json. The
    folder lock holds on Ray too: a task whose folder a live run of this host holds (this
    test's own process) is skipped by the actor, which writes nothing there."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a", "_b"]})
    held = result_folder(tmp_path / "results", CONFIG, "os", "_b")
    lock = take_lock(held, "another run")
    assert isinstance(lock, FolderLock)
    try:
        result = run_task_list_on_ray(
            load_task_list(meta, examples),
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=make_wiping_agent,
            make_env=functools.partial(make_env, observation_folder(tmp_path / "obs")),
            max_steps=5,
            actors=1,
            screening=Screening(screen=RuleScreen(), on_flag="block"),
        )
    finally:
        lock.release()
    outcome, skipped = result
    assert skipped.status == "skipped"
    assert skipped.detail.startswith(f"held by another run (host {socket.gethostname()}")
    assert not held.exists()  # nothing written, and the lock given back
    assert outcome.status == "finished"
    assert outcome.safety.total >= 1
    traj = (outcome.folder / "traj.jsonl").read_text(encoding="utf-8")
    assert "rm -rf" not in traj
    log = json.loads((outcome.folder / "better_log.json").read_text(encoding="utf-8"))
    assert log["steps"][0]["safety_events"][0]["code"] == "recursive-delete"


def test_the_cli_runs_a_task_list_with_ray(
    cluster: None,
    model_server: LoopbackServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    meta, examples = _task_list(tmp_path)
    desktop = observation_folder(tmp_path / "obs")
    monkeypatch.setenv("LOOPBACK_KEY", "k")
    argv = [
        "run-tasks",
        "--tasks", str(meta),
        "--examples", str(examples),
        "--observations", str(desktop),
        "--model", "compat/m",
        "--base-url", model_server.base_url + "/v1",
        "--api-key-env", "LOOPBACK_KEY",
        "--observation-type", "a11y_tree",
        "--action-space", "pyautogui",
        "--out", str(tmp_path / "results"),
        "--workers", "2",
        "--domain", "chrome",
        "--ray", "auto",
        "--ray-cpus-per-worker", "0.5",
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "summary: 1 task(s): 1 finished, 0 skipped (already finished), 0 failed" in out
    assert "steps          2" in out
    # The driver writes the run's manifest at the shared result root: Ray's address, its workers.
    manifest = read_manifest(tmp_path / "results")
    assert manifest is not None
    assert (manifest["ray_address"], manifest["workers"], manifest["tasks"]) == ("auto", 2, 1)
    assert [o["status"] for o in manifest["outcomes"]] == ["finished"]
    assert manifest["ended"] is not None


def test_with_ray_each_actor_reverts_its_own_vm_before_each_task(
    cluster: None,
    model_server: LoopbackServer,
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with LoopbackServer() as other:
        meta, examples = _task_list(tmp_path)
        monkeypatch.setenv("LOOPBACK_KEY", "k")
        reverts = tmp_path / "reverts"
        argv = [
            "run-tasks",
            "--tasks", str(meta),
            "--examples", str(examples),
            "--model", "compat/m",
            "--base-url", model_server.base_url + "/v1",
            "--api-key-env", "LOOPBACK_KEY",
            "--observation-type", "a11y_tree",
            "--action-space", "pyautogui",
            "--out", str(tmp_path / "results"),
            "--workers", "2",
            "--domain", "os",
            "--env-url", vm_server.base_url,
            "--env-url", serve_vm(other).base_url,
            "--settle", "0",
            "--env-revert", f'echo "$OSHARM_VM_INDEX $PPID" >> {shlex.quote(str(reverts))}',
            "--ray", "auto",
            "--ray-cpus-per-worker", "0.5",
        ]  # fmt: skip
        assert main(argv) == 0
        assert "summary: 3 task(s): 3 finished" in capsys.readouterr().out
        ran = [line.split() for line in reverts.read_text(encoding="utf-8").splitlines()]
        assert len(ran) == 3
        assert {index for index, _ in ran} <= {"0", "1"}
        assert str(os.getpid()) not in {parent for _, parent in ran}  # in the actors, not here


def test_budgets_hold_on_ray_episode_caps_in_the_actors_run_cap_at_the_driver(
    cluster: None, model_server: LoopbackServer, tmp_path: Path
) -> None:
    """Each episode stops at its token cap in its actor; the run's cap is kept per request
    across the cluster (by its budget actor), so 14 tokens a step and a 20-token cap send
    2 requests, as one agent would, and the driver stops handing out tasks. A third episode
    may have started before the cap was reached: it waited, then ended without a step."""
    meta, examples = _task_list(tmp_path)
    desktop = observation_folder(tmp_path / "obs")
    budget = Budget(max_episode_tokens=14, max_run_tokens=20)
    sent = len(model_server.requests)
    result = run_task_list_on_ray(
        load_task_list(meta, examples),
        config=CONFIG,
        result_dir=tmp_path / "results",
        make_agent=functools.partial(make_agent, model_server.base_url + "/v1"),
        make_env=functools.partial(make_env, desktop),
        max_steps=5,
        actors=2,
        budget=budget,
    )
    # Which tasks the two actors get first depends on how fast each starts: the counts are
    # fixed, the order is not (a slow actor may leave `_b` stopped while `_c` finished).
    finished = [o for o in result if o.status == "finished"]
    stopped = [o for o in result if o.status == "stopped"]
    ran = len(finished)
    assert ran in (2, 3)
    assert len(stopped) == 4 - ran
    assert all("ended early" in o.detail for o in finished)
    assert all("run budget exceeded" in o.detail for o in stopped)
    assert sorted(o.steps for o in finished) == sorted([1, 1, 0][:ran])
    assert result.summary.steps == 2
    assert result.summary.stopped == 4 - ran
    assert budget.run_totals.tokens == 2 * 14
    assert len(model_server.requests) - sent == 2


def test_on_ray_the_run_caps_count_what_the_budget_had_spent_before(
    cluster: None, model_server: LoopbackServer, tmp_path: Path
) -> None:
    """One `Budget` over two task lists (OS-Harm's categories one after another): 84 of its
    100 tokens spent before, steps of 14. The cluster's budget actor starts from those 84, so
    2 requests go, as `arun_task_list` sends (it started from 0 and let 8 go, 168 tokens)."""
    meta, examples = _task_list(tmp_path)
    desktop = observation_folder(tmp_path / "obs")
    budget = Budget(max_run_tokens=100)
    budget.charge(UsageTotals(steps=6, tokens=84))
    sent = len(model_server.requests)
    result = run_task_list_on_ray(
        load_task_list(meta, examples),
        config=CONFIG,
        result_dir=tmp_path / "results",
        make_agent=functools.partial(make_agent, model_server.base_url + "/v1"),
        make_env=functools.partial(make_env, desktop),
        max_steps=5,
        actors=2,
        budget=budget,
    )
    assert len(model_server.requests) - sent == 2
    assert budget.run_totals.tokens == 84 + 2 * 14
    assert result.summary.steps == 2
    assert sum(o.status == "stopped" for o in result) >= 2


def test_more_actors_than_the_cluster_has_room_for_run_on_those_that_start(
    cluster: None, model_server: LoopbackServer, tmp_path: Path
) -> None:
    """Three one-CPU actors on two CPUs: the third never starts and is never handed a task
    (it used to take one and the run waited for it forever)."""
    meta, examples = _task_list(tmp_path)
    desktop = observation_folder(tmp_path / "obs")
    result = run_task_list_on_ray(
        load_task_list(meta, examples),
        config=CONFIG,
        result_dir=tmp_path / "results",
        make_agent=functools.partial(make_agent, model_server.base_url + "/v1"),
        make_env=functools.partial(make_env, desktop),
        max_steps=5,
        actors=3,
    )
    assert [o.status for o in result] == ["finished"] * 4


def test_a_cpu_share_fits_more_actors_and_one_too_big_is_refused_not_awaited(
    cluster: None, model_server: LoopbackServer, tmp_path: Path
) -> None:
    meta, examples = _task_list(tmp_path)
    desktop = observation_folder(tmp_path / "obs")
    common: dict[str, Any] = {
        "config": CONFIG,
        "make_agent": functools.partial(make_agent, model_server.base_url + "/v1"),
        "make_env": functools.partial(make_env, desktop),
        "max_steps": 5,
        "actors": 4,
    }
    tasks = load_task_list(meta, examples)
    result = run_task_list_on_ray(
        tasks, result_dir=tmp_path / "shared", cpus_per_actor=0.25, **common
    )
    assert [o.status for o in result] == ["finished"] * 4
    with pytest.raises(ConfigurationError, match=r"no Ray actor started within 2 s.*4 CPU"):
        run_task_list_on_ray(
            tasks, result_dir=tmp_path / "big", cpus_per_actor=4, start_timeout=2, **common
        )
    for bad in (1.5, 0, -1, True, "1"):
        with pytest.raises(ConfigError, match="cpus_per_actor"):
            run_task_list_on_ray(tasks, result_dir=tmp_path / "x", cpus_per_actor=bad, **common)


def test_factories_that_cannot_travel_to_the_workers_are_a_configuration_error(
    cluster: None, model_server: LoopbackServer, tmp_path: Path
) -> None:
    meta, examples = _task_list(tmp_path)
    lock = threading.Lock()  # a lock does not pickle

    def make_env_holding_a_lock(task: OsworldTask) -> ReplayEnv:
        assert lock is not None
        return ReplayEnv(tmp_path)

    with pytest.raises(ConfigurationError, match=r"must pickle .*Could not serialize the argument"):
        run_task_list_on_ray(
            load_task_list(meta, examples),
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=functools.partial(make_agent, model_server.base_url + "/v1"),
            make_env=make_env_holding_a_lock,
            max_steps=5,
        )


def test_an_actor_that_cannot_start_is_a_configuration_error(
    cluster: None, model_server: LoopbackServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A factory from a module only the driver can import: the actors fail to unpickle it."""
    meta, examples = _task_list(tmp_path)
    (tmp_path / "driver_only_factories.py").write_text(
        "def make_env(task):\n    raise AssertionError('never called')\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import driver_only_factories  # type: ignore[import-not-found]

    with pytest.raises(
        ConfigurationError, match=r"could not start .*driver_only_factories"
    ) as caught:
        run_task_list_on_ray(
            load_task_list(meta, examples),
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=functools.partial(make_agent, model_server.base_url + "/v1"),
            make_env=driver_only_factories.make_env,
            max_steps=5,
            start_timeout=60,
        )
    assert str(caught.value).endswith(
        "ModuleNotFoundError: No module named 'driver_only_factories'"
    )


def make_keyless_agent(task: OsworldTask, limiter: Limiter | None) -> PromptAgent:
    """A node without the API key: the agent's factory refuses, as the CLI's does."""
    raise UsageError("the environment variable KEY (--api-key-env) is not set")


def test_an_error_an_episode_raises_on_an_actor_reaches_the_driver_as_raised(
    cluster: None, tmp_path: Path
) -> None:
    """Not wrapped in Ray's RayTaskError, whose message is the actor's whole traceback: the
    CLI prints the error's message as its one line."""
    meta, examples = _task_list(tmp_path)
    with pytest.raises(UsageError) as caught:
        run_task_list_on_ray(
            load_task_list(meta, examples),
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=make_keyless_agent,
            make_env=functools.partial(make_env, observation_folder(tmp_path / "obs")),
            max_steps=5,
        )
    assert type(caught.value) is UsageError
    assert str(caught.value) == "the environment variable KEY (--api-key-env) is not set"


def test_a_worker_that_dies_fails_its_task_and_the_others_go_on(
    cluster: None, model_server: LoopbackServer, tmp_path: Path
) -> None:
    """Task _b's environment ends its actor's process: _b is failed with Ray's reason and
    left unfinished, the other actor runs the rest (the listener hears each step from the
    actors), and a rerun finishes _b."""
    meta, examples = _task_list(tmp_path)
    tasks = load_task_list(meta, examples)
    results = tmp_path / "results"
    (tmp_path / "marks").mkdir()
    common: dict[str, Any] = {
        "config": CONFIG,
        "result_dir": results,
        "make_agent": functools.partial(make_agent, model_server.base_url + "/v1"),
        "make_env": functools.partial(
            make_dying_env, observation_folder(tmp_path / "obs"), "_b", tmp_path / "marks"
        ),
        "max_steps": 5,
        "actors": 2,
    }
    heard, reported = Heard(), []
    result = run_task_list_on_ray(tasks, listener=heard, report=reported.append, **common)
    assert [o.status for o in result] == ["finished", "failed", "finished", "finished"]
    died = result[1].detail
    assert died.startswith("the Ray worker running it died: ")
    assert "\n" not in died
    assert len(died) < 250
    assert "worker process has died" in died  # Ray's own words (2.x)
    assert result.summary.failed == 1
    assert result.summary.steps == 6
    assert sorted(o.task.example_id for o in reported) == ["_a", "_b", "_c", "_d"]
    assert ("failed", "_b", 0) in heard.events
    for name in ("_a", "_c", "_d"):
        assert [e for e in heard.events if e[1] == name] == [
            ("started", name, 0),
            ("stepped", name, 1),
            ("stepped", name, 2),
            ("finished", name, 2),
        ]
    killed = result_folder(results, CONFIG, "os", "_b")
    assert not is_finished(killed)  # died in reset: its folder was never started
    again = run_task_list_on_ray(tasks, **common)
    assert [o.status for o in again] == ["skipped", "finished", "skipped", "skipped"]
    assert is_finished(killed)


class DyingClient:
    """A model client whose call ends its process (the actor dies holding a place in the run's caps)."""

    def complete(self, request: object) -> object:
        os._exit(1)

    async def acomplete(self, request: object) -> object:
        os._exit(1)


def make_dying_agent(
    base_url: str, victim: str, task: OsworldTask, limiter: Limiter | None
) -> PromptAgent:
    if task.example_id == victim:
        return PromptAgent.from_config(CONFIG, client=DyingClient())  # type: ignore[arg-type]
    return make_agent(base_url, task, limiter)


def test_a_worker_that_dies_mid_request_gives_its_place_in_the_run_caps_back(
    cluster: None, model_server: LoopbackServer, tmp_path: Path
) -> None:
    """_a's actor dies during its model call: whatever the order, some later request must
    wait for the place it held (nothing was charged yet, or 14 + 14 + 14 tokens reach the
    cap of 30); the driver gives that place back, so the run ends instead of hanging."""
    meta, examples = _task_list(tmp_path)
    budget = Budget(max_run_tokens=30)
    result = run_task_list_on_ray(
        load_task_list(meta, examples),
        config=CONFIG,
        result_dir=tmp_path / "results",
        make_agent=functools.partial(make_dying_agent, model_server.base_url + "/v1", "_a"),
        make_env=functools.partial(make_env, observation_folder(tmp_path / "obs")),
        max_steps=5,
        actors=2,
        budget=budget,
    )
    assert result[0].status == "failed"
    assert {o.status for o in result[1:]} <= {"finished", "stopped"}
    assert result[1].status == "finished"
    assert 28 <= budget.run_totals.tokens <= 30 + 14


def test_when_every_worker_has_died_the_run_stops_with_an_environment_failure(
    cluster: None, model_server: LoopbackServer, tmp_path: Path
) -> None:
    meta, examples = _task_list(tmp_path)
    (tmp_path / "marks").mkdir()
    desktop = observation_folder(tmp_path / "obs")
    reported: list[TaskOutcome] = []
    with pytest.raises(
        EnvironmentFailure,
        match=r"^2 Ray worker actor\(s\) died, so no worker is left for the 2 task\(s\) not "
        r"started; a rerun resumes the run .*Last death: \S",
    ):
        run_task_list_on_ray(
            load_task_list(meta, examples),
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=functools.partial(make_agent, model_server.base_url + "/v1"),
            make_env=functools.partial(make_dying_env, desktop, "_a _b _c _d", tmp_path / "marks"),
            max_steps=5,
            actors=2,
            report=reported.append,
        )
    assert sorted((o.task.example_id, o.status) for o in reported) == [
        ("_a", "failed"),
        ("_b", "failed"),
    ]


def test_a_cluster_address_where_nothing_answers_is_refused_not_waited_for() -> None:
    from adapters.runs.ray_runner import _check_reachable

    with socket.socket() as held:  # bound, never listening: refused, and no one else gets it
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}", "127.0.0.1:99999"):
            with pytest.raises(ConfigurationError, match=f"no Ray cluster answers at {address}"):
                _check_reachable(address)
    for address in (None, "auto", "local"):
        _check_reachable(address)


class MarkingEnv(ReplayEnv):
    """A replayed desktop that notes its reset and its close in `marks`, whose first action
    waits until every task's desktop is reset (so both episodes are under way), whose
    actions take a while, and whose actions fail (an error that is no `OsharmError`) for
    the task `fails`."""

    def __init__(self, directory: Path, marks: Path, task: OsworldTask, fails: str) -> None:
        super().__init__(directory, instruction=task.instruction)
        self.marks, self.name, self.fails = marks, task.example_id, task.example_id == fails

    def reset(self, task_config: object = None, **extra: object) -> dict[str, Any]:
        (self.marks / f"reset{self.name}").touch()
        return super().reset(task_config, **extra)

    def step(self, action: Any, pause: float = 0) -> Any:
        waited = time.monotonic() + 60
        while len(list(self.marks.glob("reset_*"))) < 2 and time.monotonic() < waited:
            time.sleep(0.05)
        time.sleep(0.3)
        if self.fails:
            raise ValueError("the desktop driver broke")
        return super().step(action, pause)

    def close(self) -> None:
        (self.marks / f"closed{self.name}").touch()
        super().close()


def make_marking_env(desktop: Path, marks: Path, fails: str, task: OsworldTask) -> MarkingEnv:
    return MarkingEnv(desktop, marks, task, fails)


def make_clicking_agent(task: OsworldTask, limiter: Limiter | None) -> PromptAgent:
    return PromptAgent.from_config(CONFIG, client=FakeClient([CLICK] * 4 + ["DONE"]))


class Interrupting(Heard):
    """Ctrl-C at the driver when `_a`'s second model step is heard (its first action has
    waited for both desktops to be reset)."""

    def stepped(self, task: OsworldTask, step: int, max_steps: int) -> None:
        super().stepped(task, step, max_steps)
        if (task.example_id, step) == ("_a", 2):
            raise KeyboardInterrupt


@pytest.mark.parametrize("stop", ["an episode raises", "ctrl-c"])
def test_a_stopping_run_closes_the_environments_of_the_episodes_under_way(
    cluster: None, tmp_path: Path, stop: str
) -> None:
    """The other actors' episodes are cancelled and close their environments (a VM stopped, a
    recording saved) before the actors are killed; they used to be killed mid-episode."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a", "_b"]})
    marks = tmp_path / "marks"
    marks.mkdir()
    fails = "_a" if stop == "an episode raises" else ""
    with pytest.raises(ValueError if fails else KeyboardInterrupt):
        run_task_list_on_ray(
            load_task_list(meta, examples),
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=make_clicking_agent,
            make_env=functools.partial(
                make_marking_env, observation_folder(tmp_path / "obs"), marks, fails
            ),
            max_steps=5,
            actors=2,
            cpus_per_actor=0.5,
            listener=None if fails else Interrupting(),
        )
    assert sorted(p.name for p in marks.glob("closed_*")) == ["closed_a", "closed_b"]


class Unprintable(ValueError):
    """An error whose message cannot be read: its `__str__` raises."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ broke")


class UnprintableEnv(ReplayEnv):
    """A replayed desktop whose actions raise `Unprintable`."""

    def step(self, action: Any, pause: float = 0) -> Any:
        raise Unprintable("the desktop driver broke")


def make_unprintable_env(desktop: Path, task: OsworldTask) -> UnprintableEnv:
    return UnprintableEnv(desktop, instruction=task.instruction)


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "stream"])
def test_an_error_whose_message_cannot_be_read_reaches_the_driver_as_on_asyncio(
    cluster: None, tmp_path: Path, streamed: bool
) -> None:
    """Raised as `arun_task_list` raises it (an error that is no `OsharmError` stops the run),
    its type kept. Ray formats what an actor raises, so the driver used to get the
    RuntimeError of that `__str__` instead, the episode's own error lost."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
    tasks = load_task_list(meta, examples)
    desktop = observation_folder(tmp_path / "obs")
    with pytest.raises(Unprintable) as on_asyncio:
        asyncio.run(
            arun_task_list(
                tasks,
                config=CONFIG,
                result_dir=tmp_path / "asyncio",
                make_agent=lambda t: make_clicking_agent(t, None),
                make_env=lambda t: in_thread(make_unprintable_env(desktop, t)),
                max_steps=5,
                workers=1,
            )
        )
    with pytest.raises(Unprintable) as on_ray:
        run_task_list_on_ray(
            tasks,
            config=CONFIG,
            result_dir=tmp_path / "ray",
            make_agent=make_clicking_agent,
            make_env=functools.partial(make_unprintable_env, desktop),
            max_steps=5,
            actors=1,
            cpus_per_actor=0.5,
            listener=Heard() if streamed else None,
        )
    assert type(on_ray.value) is type(on_asyncio.value) is Unprintable
    assert error_line(on_ray.value) == error_line(on_asyncio.value) == "Unprintable: <unprintable>"


def test_an_unreadable_error_that_cannot_travel_is_named_by_its_type_and_task() -> None:
    """One that does not pickle either: a `RuntimeError` naming its type and the task, never
    the error of its `__str__`."""

    class Locked(Unprintable):
        def __init__(self) -> None:
            super().__init__()
            self.lock = threading.Lock()

    async def episode() -> TaskOutcome:
        raise Locked()

    task = OsworldTask(domain="os", example_id="_a", instruction="Do it")
    sent = asyncio.run(_sendable(task, episode()))
    assert isinstance(sent, _Raised)
    assert type(sent.error) is RuntimeError
    assert str(sent.error) == (
        "Locked: <unprintable> (raised by the episode of os/_a; "
        "it cannot be sent from its Ray worker)"
    )


class SpentRun(Budget):
    """The run's cap, spent by other workers: every live request is refused."""

    def reserve(self, episode: Any) -> Any:
        raise BudgetExceeded("max_run_tokens 1000 reached (1200 tokens)", scope="run")

    async def areserve(self, episode: Any) -> Any:
        return self.reserve(episode)


def make_spent_agent(task: OsworldTask, limiter: Limiter | None) -> PromptAgent:
    return PromptAgent.from_config(CONFIG, client=FakeClient(["DONE"]), budget=SpentRun())


def test_on_ray_a_continuation_stopped_at_its_first_live_request_leaves_its_folder_as_it_was(
    cluster: None, tmp_path: Path
) -> None:
    """Its replayed steps used to be written again (new timestamps, a `fork` entry)."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
    tasks = load_task_list(meta, examples)
    desktop = observation_folder(tmp_path / "obs")
    results = tmp_path / "results"
    with pytest.raises(Killed):
        run_task_list(
            tasks,
            config=CONFIG,
            result_dir=results,
            make_agent=lambda t: PromptAgent.from_config(
                CONFIG, client=FakeClient([CLICK, CLICK, "DONE"])
            ),
            make_env=lambda t: KillingEnv(desktop, 2),
            max_steps=5,
        )
    folder = result_folder(results, CONFIG, "os", "_a")
    before = snapshot(folder)
    (outcome,) = run_task_list_on_ray(
        tasks,
        config=CONFIG,
        result_dir=results,
        make_agent=make_spent_agent,
        make_env=functools.partial(make_env, desktop),
        max_steps=5,
        actors=1,
        cpus_per_actor=0.5,
        continue_unfinished=True,
    )
    assert (outcome.status, outcome.steps) == ("stopped", 2)
    assert snapshot(folder) == before


class KillingLimiter:
    """The run's `RayLimiter`, whose actor is killed (as the OOM killer would) before the
    second turn it is asked for."""

    def __init__(self, limiter: Any) -> None:
        self.limiter, self.turns = limiter, 0

    def reserve(self, *, deadline: float | None = None, provider: str = "") -> float:
        self.turns += 1
        if self.turns == 2:
            ray.kill(self.limiter.actor)
        return float(self.limiter.reserve(deadline=deadline, provider=provider))

    def admit(self, *, deadline: float | None = None) -> float:
        return float(self.limiter.admit(deadline=deadline))

    def release(self) -> None:
        self.limiter.release()

    def hold(self) -> float:
        return float(self.limiter.hold())

    def unreserve(self, *, due: float) -> None:
        self.limiter.unreserve(due=due)

    def observe(self, status: int, headers: Any, tokens: int | None = None) -> None:
        self.limiter.observe(status, headers, tokens)


def test_the_clusters_limiter_holds_requests_in_flight_against_the_token_budget(
    cluster: None,
) -> None:
    """The token budget's holds live in the limiter actor: a second request waits while the
    first (of unknown size) is out, goes once that one is given back, and the usage a reply
    reports spaces the next."""
    from adapters.engine.limits import TOKEN_SLICE
    from adapters.runs.ray_runner import LimiterActor, RayLimiter

    actor = ray.remote(num_cpus=0)(LimiterActor).remote(None, 600)  # 10 tokens a second
    shared = RayLimiter(actor)
    try:
        assert shared.admit(deadline=time.monotonic() + 60) == 0.0
        assert shared.admit() == TOKEN_SLICE
        shared.release()
        assert shared.admit() == 0.0
        shared.observe(200, {}, 15)  # the bucket held 10: 5 in debt
        assert shared.admit() == pytest.approx(0.5, abs=0.05)
    finally:
        ray.kill(actor)


def test_the_clusters_limiter_gives_a_turn_given_back_to_the_next_caller(
    cluster: None,
) -> None:
    """A caller that stops waiting for its turn gives it back through the handle: the next
    turn taken is due when that one was, not a turn later."""
    from adapters.runs.ray_runner import LimiterActor, RayLimiter

    actor = ray.remote(num_cpus=0)(LimiterActor).remote(60, None)  # a turn a second
    shared = RayLimiter(actor, counts_tokens=False)
    try:
        assert shared.reserve() == 0.0
        wait = shared.reserve()
        assert 0.0 < wait <= 1.05  # the next second, less the time the call took
        shared.unreserve(due=time.monotonic() + wait)
        assert shared.reserve() < 1.2  # its place; 2 s without it
    finally:
        ray.kill(actor)


def make_limiter_killing_agent(
    base_url: str, task: OsworldTask, limiter: Limiter | None
) -> PromptAgent:
    wrapped = KillingLimiter(limiter) if task.example_id == "_a" else limiter
    return make_agent(base_url, task, wrapped)  # type: ignore[arg-type]


def test_a_shared_actor_that_dies_stops_the_run_with_one_line_and_closes_environments(
    cluster: None, model_server: LoopbackServer, tmp_path: Path
) -> None:
    """The rate limiter actor dies while both episodes are under way (its first action waits
    for both resets): Ray's ActorDiedError, a multi-line dump, used to reach the CLI as a
    traceback; now an `EnvironmentFailure` naming the limiter, the other episode cancelled
    and both environments closed. A dead run-budget actor reads the same at the driver."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a", "_b"]})
    tasks = load_task_list(meta, examples)
    marks = tmp_path / "marks"
    marks.mkdir()
    with pytest.raises(EnvironmentFailure) as caught:
        run_task_list_on_ray(
            tasks,
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=functools.partial(make_limiter_killing_agent, model_server.base_url + "/v1"),
            make_env=functools.partial(
                make_marking_env, observation_folder(tmp_path / "obs"), marks, ""
            ),
            max_steps=5,
            actors=2,
            cpus_per_actor=0.5,
        )
    assert type(caught.value) is EnvironmentFailure
    message = str(caught.value)
    assert message.startswith("the cluster's rate limiter actor died: ")
    assert "ray.kill" in message  # Ray's reason, in one line
    assert message.endswith(
        "; a rerun resumes the run (finished tasks are skipped, the others redone)"
    )
    assert "\n" not in message
    assert sorted(p.name for p in marks.glob("closed_*")) == ["closed_a", "closed_b"]

    from adapters.runs.ray_runner import BudgetActor, _Stop

    holder = ray.remote(num_cpus=0)(BudgetActor).remote(20, None)
    ray.kill(holder)
    with pytest.raises(EnvironmentFailure, match=r"^the cluster's run budget actor died: \S"):
        _Stop(CONFIG, tmp_path / "results", Budget(max_run_tokens=20), holder).before(tasks[0])


class SlowToStart:
    """Unpickled in an actor as it starts: notes its process id in `pidfile`, then takes long
    (a cold node, a large runtime environment)."""

    def __init__(self, pidfile: str) -> None:
        self.pidfile = pidfile

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (slow_start, (self.pidfile,))


def slow_start(pidfile: str) -> None:
    Path(pidfile).write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(60)


def make_env_slow_to_start(slow: object, desktop: Path, task: OsworldTask) -> ReplayEnv:
    return make_env(desktop, task)


def make_env_once_killed(killed: Path, desktop: Path, task: OsworldTask) -> ReplayEnv:
    """`make_env`, once `killed` exists (so the run is still going when the other dies)."""
    waited = time.monotonic() + 60
    while not killed.exists() and time.monotonic() < waited:
        time.sleep(0.05)
    return make_env(desktop, task)


def test_an_actor_killed_while_starting_costs_no_task_and_the_others_run_them_all(
    cluster: None, model_server: LoopbackServer, tmp_path: Path
) -> None:
    """Its process is killed before its `__init__` ran: the run used to stop with a
    `ConfigurationError` blaming importability, though the other actor was running."""
    meta, examples = _task_list(tmp_path)
    desktop = observation_folder(tmp_path / "obs")
    pidfile, killed = tmp_path / "starting.pid", tmp_path / "killed"

    def kill_it() -> None:
        waited = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < waited:
            time.sleep(0.05)
        time.sleep(0.2)
        os.kill(int(pidfile.read_text(encoding="utf-8")), 9)
        killed.touch()

    killer = threading.Thread(target=kill_it, daemon=True)
    killer.start()
    result = run_task_list_on_ray(
        load_task_list(meta, examples),
        config=CONFIG,
        result_dir=tmp_path / "results",
        make_agent=functools.partial(make_agent, model_server.base_url + "/v1"),
        make_env=[
            functools.partial(make_env_once_killed, killed, desktop),
            functools.partial(make_env_slow_to_start, SlowToStart(str(pidfile)), desktop),
        ],
        max_steps=5,
        actors=2,
        cpus_per_actor=0.5,
    )
    killer.join()
    assert [o.status for o in result] == ["finished"] * 4


def test_ray_init_leaves_the_sigterm_handler_it_found(
    cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ray.init` installs its own SIGTERM handler (exit at once, with Ray's dump) over the
    CLI's, which stops the run as Ctrl-C does. Ray is already initialised in this process,
    so the `ray.init` the runner calls is one that installs a handler as Ray's does."""
    import signal

    def ours(signum: int, frame: object) -> None:
        raise AssertionError("never sent")

    def rays_init(**kwargs: object) -> None:
        signal.signal(signal.SIGTERM, lambda signum, frame: None)

    answers = iter([False])  # to the runner; Ray's own later checks hear the truth
    monkeypatch.setattr(ray, "is_initialized", lambda: next(answers, True))
    monkeypatch.setattr(ray, "init", rays_init)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    previous = signal.signal(signal.SIGTERM, ours)
    try:
        seen: list[object] = []
        meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
        result = run_task_list_on_ray(
            load_task_list(meta, examples),
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=make_clicking_agent,
            make_env=functools.partial(make_env, observation_folder(tmp_path / "obs")),
            max_steps=5,
            actors=1,
            cpus_per_actor=0.5,
            report=lambda _: seen.append(signal.getsignal(signal.SIGTERM)),
        )
        assert [o.status for o in result] == ["finished"]
        assert seen == [ours]  # during the run
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_limiter_handle_without_a_token_budget_asks_the_actor_nothing_for_room() -> None:
    """Without --tokens-per-minute there is no room to ask for: admit and release make no
    round trip to the actor (each try made one blocking call for nothing)."""
    handle = RayLimiter(object(), counts_tokens=False)  # an actor with no methods at all
    assert handle.admit(deadline=None) == 0.0
    handle.release()


# What an episode says in its actor (`relay_messages`, the CLI's --ray): the retry lines and
# warnings reach the driver as an episode run there gives them.

#: What a hostile server or model may put in a message: a terminal title, a screen wipe.
HOSTILE = "\x1b]0;owned\x07\x1b[2J"
#: The records a library caller would see: the library's loggers'.
OURS = ("adapters", "desktopenv")


def _reply(text: str, finish: str = "stop") -> Reply:
    body = chat_completion(text)
    body["choices"][0]["finish_reason"] = finish
    return Reply(200, body)


class Scripted:
    """A model answering by task and step: that step's replies in turn, one per try."""

    def __init__(self, script: dict[str, list[list[Reply]]]) -> None:
        self.script = script
        self.tries: dict[tuple[str, int], int] = {}
        self.lock = threading.Lock()

    def __call__(self, received: Received) -> Reply:
        messages = received.json()["messages"]
        system = messages[0]["content"]
        text = system if isinstance(system, str) else system[0]["text"]
        found = re.search(r"following task: Do (\S+)", text)
        assert found is not None
        task = found.group(1)
        step = sum(m["role"] == "assistant" for m in messages)
        with self.lock:
            tried = self.tries.get((task, step), 0)
            self.tries[(task, step)] = tried + 1
        replies = self.script[task][step]
        return replies[min(tried, len(replies) - 1)]


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start a loopback model answering as `Scripted(script)`; gives its base URL."""
    with LoopbackServer() as server:

        def start(script: dict[str, list[list[Reply]]]) -> str:
            server.route("POST", r".*/chat/completions", Scripted(script))
            return server.base_url + "/v1"

        yield start


@pytest.fixture
def retries() -> Iterator[list[RetryDetails]]:
    """This process's stamina hooks, for the test: each retry scheduled, noted."""
    kept = get_on_retry_hooks()
    heard: list[RetryDetails] = []
    set_on_retry_hooks([heard.append])
    try:
        yield heard
    finally:
        set_on_retry_hooks(kept)


# `_a`: a rate limit, then a step; the second step passes the 20-token cap (14 a step).
# `_b`: an empty reply whose finish reason is hostile; its second step passes the cap too.
CLI_SCRIPT = {
    "_a": [
        [openai_error(429, f"slow down {HOSTILE}", kind="rate_limit_error"), _reply(CLICK)],
        [_reply(CLICK)],
        [_reply("DONE")],
    ],
    "_b": [[_reply("", finish=f"stop{HOSTILE}")], [_reply(CLICK)], [_reply("DONE")]],
}


def test_on_ray_the_cli_prints_the_retry_lines_and_warnings_a_run_here_prints(
    cluster: None,
    serve: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same lines on stderr, escaped the same way. On Ray they used to stay in the
    worker actors (no retry hooks, no last-resort handler there): a run that stalled 30 s
    a retry said nothing, nor that a budget had ended an episode."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a", "_b"]})
    desktop = observation_folder(tmp_path / "obs")
    monkeypatch.setenv("LOOPBACK_KEY", "k")
    # No handler configured, as in a shell: the CLI's last-resort handler prints the records.
    monkeypatch.setattr(logging.root, "handlers", [])
    argv = [
        "run-tasks",
        "--tasks", str(meta),
        "--examples", str(examples),
        "--observations", str(desktop),
        "--model", "compat/m",
        "--api-key-env", "LOOPBACK_KEY",
        "--observation-type", "a11y_tree",
        "--action-space", "pyautogui",
        "--max-episode-tokens", "20",
        "--workers", "2",
    ]  # fmt: skip
    with stamina.set_testing(True, attempts=1000, cap=True):
        here = [*argv, "--base-url", serve(CLI_SCRIPT), "--out", str(tmp_path / "here")]
        assert main(here) == 0
    local = capsys.readouterr().err.splitlines()
    on_ray = [
        *argv,
        "--base-url", serve(CLI_SCRIPT),
        "--out", str(tmp_path / "ray"),
        "--ray", "auto",
        "--ray-cpus-per-worker", "0.5",
    ]  # fmt: skip
    assert main(on_ray) == 0
    relayed = capsys.readouterr().err.splitlines()
    assert sorted(relayed) == sorted(local)  # the episodes' lines interleave either way
    budget = (
        "Step 2: episode budget exceeded: 28 tokens used, cap 20; no further request will be sent"
    )
    assert sorted(relayed) == sorted(
        [
            "osharm-agent: trying again in 0.0 s (retry 1): compat HTTP 429: slow down "
            r"\x1b]0;owned\x07\x1b[2J (request id req-429)",
            r"Step 1: the model gave an empty reply (finish reason stop\x1b]0;owned\x07\x1b[2J)",
            budget,
            budget,
        ]
    )


# `_a`: a server error retried, then a call refused (the episode fails, the run goes on).
# `_b`: an empty reply cut short, then DONE.
LIBRARY_SCRIPT = {
    "_a": [[openai_error(500, "busy"), _reply(CLICK)], [openai_error(401, f"no {HOSTILE}")]],
    "_b": [[_reply("", finish="length")], [_reply("DONE")]],
}


def _heard(
    retries: list[RetryDetails], records: list[logging.LogRecord]
) -> tuple[list[Any], list[Any]]:
    """What the driver heard, in an order that does not depend on which episode ran first."""
    said = sorted(
        (d.retry_num, d.wait_for, type(d.caused_by).__name__, error_text(d.caused_by))
        for d in retries
    )
    logged = sorted(
        (r.name, r.levelname, re.sub(r"after [\d.]+s", "after Xs", r.getMessage()))
        for r in records
        if r.name.startswith(OURS)
    )
    return said, logged


@pytest.mark.parametrize("relaying", ["streamed", "as each episode ends", "off"])
def test_a_library_caller_hears_the_retries_and_records_a_run_here_gives(
    cluster: None,
    serve: Any,
    tmp_path: Path,
    retries: list[RetryDetails],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    relaying: str,
) -> None:
    """With `relay_messages`, the driver's stamina hooks and loggers get what they get from
    `arun_task_list` (as they come, or through Ray Client, which cannot stream, as each
    episode ends); without it (the default), nothing, as before."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a", "_b"]})
    tasks = load_task_list(meta, examples)
    desktop = observation_folder(tmp_path / "obs")
    with stamina.set_testing(True, attempts=1000, cap=True):
        asyncio.run(
            arun_task_list(
                tasks,
                config=CONFIG,
                result_dir=tmp_path / "here",
                make_agent=functools.partial(make_agent, serve(LIBRARY_SCRIPT), limiter=None),
                make_env=lambda t: in_thread(make_env(desktop, t)),
                max_steps=5,
                workers=2,
            )
        )
    local = _heard(retries, caplog.records)
    retries.clear()
    caplog.clear()
    if relaying == "as each episode ends":
        monkeypatch.setattr(ray_runner, "_client", lambda ray: True)
    result = run_task_list_on_ray(
        tasks,
        config=CONFIG,
        result_dir=tmp_path / "ray",
        make_agent=functools.partial(make_agent, serve(LIBRARY_SCRIPT)),
        make_env=functools.partial(make_env, desktop),
        max_steps=5,
        actors=2,
        cpus_per_actor=0.5,
        relay_messages=relaying != "off",
    )
    assert sorted(o.status for o in result) == ["failed", "finished"]
    relayed = _heard(retries, caplog.records)
    if relaying == "off":
        assert relayed == ([], [])
        return
    assert relayed == local
    said, logged = relayed
    assert said == [(1, 0.0, "RetryableError", "compat HTTP 500: busy (request id req-500)")]
    assert [level for _, level, _ in logged] == ["ERROR", "WARNING"]  # the failed call, the reply
    assert isinstance(retries[0].caused_by, RetryableError)
    assert (retries[0].args, retries[0].kwargs) == ((), {})  # they stay in the worker


def test_a_retry_reaches_the_driver_when_it_is_scheduled_not_when_the_episode_ends(
    cluster: None, serve: Any, tmp_path: Path, retries: list[RetryDetails]
) -> None:
    """The retry at the first step is heard while the second step (3 s) is still waited for:
    a run stalled on retries says so as it stalls."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
    slow_done = Reply(200, chat_completion("DONE"), delay=3.0)
    script = {"_a": [[openai_error(500, "busy"), _reply(CLICK)], [slow_done]]}
    heard_at: list[float] = []
    set_on_retry_hooks([lambda details: heard_at.append(time.monotonic())])
    ended_at: list[float] = []
    run_task_list_on_ray(
        load_task_list(meta, examples),
        config=CONFIG,
        result_dir=tmp_path / "ray",
        make_agent=functools.partial(make_agent, serve(script)),
        make_env=functools.partial(make_env, observation_folder(tmp_path / "obs")),
        max_steps=5,
        actors=1,
        cpus_per_actor=0.5,
        report=lambda outcome: ended_at.append(time.monotonic()),
        relay_messages=True,
    )
    assert len(heard_at) == len(ended_at) == 1
    assert heard_at[0] < ended_at[0] - 2.0


class ClosingEnv(ReplayEnv):
    """A replayed desktop whose close logs a warning (as the library's own environments log
    theirs), whose actions wait until every task's desktop is reset (so both episodes are
    under way), and fail (an error that is no `OsharmError`: the run stops) for `_a`."""

    def __init__(self, directory: Path, marks: Path, task: OsworldTask) -> None:
        super().__init__(directory, instruction=task.instruction)
        self.marks, self.name = marks, task.example_id

    def reset(self, task_config: object = None, **extra: object) -> dict[str, Any]:
        (self.marks / f"reset{self.name}").touch()
        return super().reset(task_config, **extra)

    def step(self, action: Any, pause: float = 0) -> Any:
        waited = time.monotonic() + 60
        while len(list(self.marks.glob("reset_*"))) < 2 and time.monotonic() < waited:
            time.sleep(0.05)
        time.sleep(0.3)
        if self.name == "_a":
            raise ValueError("the desktop driver broke")
        return super().step(action, pause)

    def close(self) -> None:
        logging.getLogger("adapters.runs.environments").warning("closing %s", self.name)
        super().close()


def make_closing_env(desktop: Path, marks: Path, task: OsworldTask) -> ClosingEnv:
    return ClosingEnv(desktop, marks, task)


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "as each episode ends"])
def test_what_a_failing_or_cancelled_episode_said_still_comes(
    cluster: None,
    serve: Any,
    tmp_path: Path,
    retries: list[RetryDetails],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    streamed: bool,
) -> None:
    """`_a` retries, then raises (the run stops); `_b`, under way on the other actor, is
    cancelled. The retry and both environments' closing words reach the driver, `_b`'s
    said while it was being cancelled, after its stream had ended."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a", "_b"]})
    marks = tmp_path / "marks"
    marks.mkdir()
    if not streamed:
        monkeypatch.setattr(ray_runner, "_client", lambda ray: True)
    busy = [openai_error(500, "busy"), _reply(CLICK)]
    script = {"_a": [busy], "_b": [[_reply(CLICK)]] * 5}
    with pytest.raises(ValueError, match="the desktop driver broke"):
        run_task_list_on_ray(
            load_task_list(meta, examples),
            config=CONFIG,
            result_dir=tmp_path / "ray",
            make_agent=functools.partial(make_agent, serve(script)),
            make_env=functools.partial(
                make_closing_env, observation_folder(tmp_path / "obs"), marks
            ),
            max_steps=5,
            actors=2,
            cpus_per_actor=0.5,
            relay_messages=True,
        )
    said, logged = _heard(retries, caplog.records)
    assert said == [(1, 0.0, "RetryableError", "compat HTTP 500: busy (request id req-500)")]
    assert logged == [
        ("adapters.runs.environments", "WARNING", "closing _a"),
        ("adapters.runs.environments", "WARNING", "closing _b"),
    ]


class Unpicklable(Exception):
    """An error that cannot travel: it holds a lock."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def test_episodes_sharing_a_process_each_get_their_own_words_once() -> None:
    """Stamina's hooks and the loggers are process-wide; what each episode says (on the
    event loop or in the threads it starts) goes to its own channel only, once; what is said
    outside an episode goes nowhere; once none runs, the process's hooks and handlers are
    as they were. A retry's error that cannot travel goes as its text."""
    hooks, handlers = get_on_retry_hooks(), list(logging.getLogger("adapters").handlers)
    said: dict[str, list[_relay.Said]] = {"one": [], "two": []}
    logger = logging.getLogger("adapters.runs.tasks")

    def retry(name: str) -> None:
        details = RetryDetails(
            name="call",
            args=(object(),),
            kwargs={},
            retry_num=1,
            wait_for=30.0,
            waited_so_far=0.0,
            caused_by=Unpicklable(f"busy {name}"),
        )
        for hook in get_on_retry_hooks():
            hook(details)

    async def episode(name: str) -> None:
        for _ in range(3):
            logger.warning("on the loop: %s", name)
            await asyncio.sleep(0)
        await asyncio.to_thread(logger.warning, "in a thread: %s", name)
        await asyncio.to_thread(retry, name)

    async def both() -> None:
        loop = asyncio.get_running_loop()
        await asyncio.gather(
            *(
                _relay.telling(_relay.Channel(loop, said[name].append), episode(name))
                for name in said
            )
        )

    asyncio.run(both())
    logger.warning("after the episodes")
    for name, heard in said.items():
        logged = [s.record().getMessage() for s in heard if isinstance(s, _relay.Logged)]
        assert logged == [f"on the loop: {name}"] * 3 + [f"in a thread: {name}"]
        (retried,) = [s for s in heard if isinstance(s, _relay.Retried)]
        assert type(retried.caused_by) is RuntimeError
        assert str(retried.caused_by) == f"busy {name}"
        assert retried.details().args == ()
    assert get_on_retry_hooks() == hooks
    assert logging.getLogger("adapters").handlers == handlers


def test_a_relayed_record_keeps_its_traceback_and_drops_what_cannot_travel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its message formatted where it was logged, its traceback as text; an `extra`
    attribute that does not pickle is left out, one that does is kept."""
    said: list[_relay.Said] = []

    async def episode() -> None:
        try:
            raise ModelCallError("boom", provider="p")
        except ModelCallError:
            logging.getLogger("desktopenv.agent").exception(
                "Step %d failed", 3, extra={"kept": "yes", "lock": threading.Lock()}
            )

    async def run() -> None:
        loop = asyncio.get_running_loop()
        await _relay.telling(_relay.Channel(loop, said.append), episode())

    asyncio.run(run())
    caplog.clear()
    _relay.relay(said)
    (record,) = caplog.records
    assert record.getMessage() == "Step 3 failed"
    assert record.kept == "yes"  # type: ignore[attr-defined]
    assert not hasattr(record, "lock")
    assert "ModelCallError: p: boom" in logging.Formatter().format(record)
