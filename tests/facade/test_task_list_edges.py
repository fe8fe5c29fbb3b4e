"""Task lists at their edges: colliding folders, bad task files, environments that close badly,
time out or take their time, and episodes that cannot all share six threads."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, ClassVar

import pytest

from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.errors import BudgetExceeded, EnvironmentFailure, SafetyCheckPending, TrajectoryError
from adapters.runs import (
    OsworldTask,
    Progress,
    RunResult,
    TaskOutcome,
    arun_task_list,
    in_thread,
    is_finished,
    load_task_list,
    run_task_list,
)
from adapters.runs.episode import arun_episode, run_episode
from adapters.runs.ray_runner import run_task_list_on_ray
from adapters.testing import FakeClient
from adapters.trajectories.osharm import (
    ResultWriter,
    TaskInfo,
)
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig, ConfigError
from osharm_core.errors import excerpt
from tests.facade.helpers import observation_folder, write_task_list

CONFIG = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"


def _tasks(*ids: str, domain: str = "os") -> list[OsworldTask]:
    return [OsworldTask(domain=domain, example_id=i, instruction=f"Do {i}") for i in ids]


def _agent(_: OsworldTask) -> PromptAgent:
    return PromptAgent.from_config(CONFIG, client=FakeClient([CLICK, "DONE"]))


def _done_agent(_: OsworldTask) -> PromptAgent:
    return PromptAgent.from_config(CONFIG, client=FakeClient(["DONE"]))


def _listed(
    tasks: list[OsworldTask],
    results: Path,
    make_env: Callable[[OsworldTask], Any],
    *,
    make_agent: Callable[[OsworldTask], Any] = _agent,
    **more: Any,
) -> Coroutine[Any, Any, RunResult]:
    """`arun_task_list` of `tasks` with this file's settings (CONFIG, at most 3 steps)."""
    return arun_task_list(
        tasks,
        config=CONFIG,
        result_dir=results,
        make_agent=make_agent,
        make_env=make_env,
        max_steps=3,
        **more,
    )


class ClosingEnv(ReplayEnv):
    """A replayed desktop that counts its closes, and fails the close when told to."""

    closed: ClassVar[list[str]] = []

    def __init__(self, folder: Path, name: str, *, fail_close: bool = False) -> None:
        super().__init__(folder)
        self.name, self.fail_close = name, fail_close

    def close(self) -> None:
        ClosingEnv.closed.append(self.name)
        if self.fail_close:
            raise EnvironmentFailure("POST /end_recording: HTTP 500")


def test_tasks_that_would_share_a_folder_are_refused_before_any_runs(tmp_path: Path) -> None:
    desktop = observation_folder(tmp_path / "obs")
    ran: list[str] = []

    def make_env(task: OsworldTask) -> ReplayEnv:
        ran.append(task.example_id)
        return ReplayEnv(desktop)

    for ids, message in (
        (("t1", "t2", "t1"), "tasks os/t1 and os/t1 would share the result folder"),
        (("x:1", "x_1"), "tasks os/x:1 and os/x_1 would share"),
        (("ok", ".."), "'..' cannot name a result folder"),
    ):
        results = tmp_path / "r"
        with pytest.raises(TrajectoryError, match=message):
            run_task_list(
                _tasks(*ids),
                config=CONFIG,
                result_dir=results,
                make_agent=_agent,
                make_env=make_env,
                max_steps=3,
            )
        with pytest.raises(TrajectoryError, match=message):
            asyncio.run(_listed(_tasks(*ids), results, lambda t: in_thread(make_env(t)), workers=2))
    assert ran == []


def test_bad_task_files_and_domains_are_named(tmp_path: Path) -> None:
    meta, examples = write_task_list(tmp_path, {"os": ["_a"], "chrome": ["_b"]})
    with pytest.raises(TrajectoryError, match=r"has no domain 'Chrome' \(it has: chrome, os\)"):
        load_task_list(meta, examples, domain="Chrome")
    (examples / "os" / "_a.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(TrajectoryError, match=r"_a\.json: its JSON is nested too deeply"):
        load_task_list(meta, examples)


def test_every_environment_is_closed_and_a_failing_close_is_noted_not_fatal(
    tmp_path: Path,
) -> None:
    desktop = observation_folder(tmp_path / "obs")

    def make_env(task: OsworldTask) -> ClosingEnv:
        return ClosingEnv(desktop, task.example_id, fail_close=task.example_id == "_a")

    ClosingEnv.closed = []
    result = run_task_list(
        _tasks("_a", "_b"),
        config=CONFIG,
        result_dir=tmp_path / "sync",
        make_agent=_agent,
        make_env=make_env,
        max_steps=3,
    )
    assert ClosingEnv.closed == ["_a", "_b"]
    assert [o.status for o in result] == ["finished", "finished"]
    assert result[0].detail == "closing its environment failed: EnvironmentFailure: " + (
        "POST /end_recording: HTTP 500"
    )
    ClosingEnv.closed = []
    result = asyncio.run(
        _listed(
            _tasks("_a", "_b"),
            tmp_path / "async",
            lambda t: in_thread(make_env(t)),
            workers=1,
        )
    )
    assert ClosingEnv.closed == ["_a", "_b"]
    assert [o.status for o in result] == ["finished", "finished"]
    assert "closing its environment failed" in result[0].detail


class Unprintable(Exception):
    """An exception whose `str()` raises: environments are user code, and may raise anything."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this one")


class UnprintableFailure(EnvironmentFailure):
    def __str__(self) -> str:
        raise RuntimeError("no text for this one")


class UnprintableEnv(ReplayEnv):
    """A desktop whose close raises `Unprintable`, and whose actions, for task `_b`, raise an
    `EnvironmentFailure` that cannot be printed either."""

    def __init__(self, folder: Path, name: str) -> None:
        super().__init__(folder)
        self.name = name

    def step(self, action: Any, pause: float = 0) -> Any:
        if self.name == "_b":
            raise UnprintableFailure
        return super().step(action, pause)

    def close(self) -> None:
        raise Unprintable


def test_exceptions_that_cannot_be_printed_are_noted_by_their_type_not_fatal(
    tmp_path: Path,
) -> None:
    """Their notes used to call `str()`, which raised out of the runner and stopped the run."""
    desktop = observation_folder(tmp_path / "obs")

    def make_env(task: OsworldTask) -> UnprintableEnv:
        return UnprintableEnv(desktop, task.example_id)

    closing = "closing its environment failed: Unprintable: <unprintable>"
    for result in (
        run_task_list(
            _tasks("_a", "_b"),
            config=CONFIG,
            result_dir=tmp_path / "sync",
            make_agent=_agent,
            make_env=make_env,
            max_steps=3,
        ),
        asyncio.run(
            _listed(_tasks("_a", "_b"), tmp_path / "async", lambda t: in_thread(make_env(t)))
        ),
    ):
        assert [(o.status, o.detail) for o in result] == [
            ("finished", closing),
            ("failed", f"<unprintable UnprintableFailure>; {closing}"),
        ]


class SlowStepEnv(ReplayEnv):
    """A desktop whose steps block their thread for `seconds`; it notes any call that overlaps
    one under way (two episodes driving one VM)."""

    def __init__(self, folder: Path, seconds: float, log: list[str]) -> None:
        super().__init__(folder)
        self.seconds, self.log = seconds, log
        self.busy = threading.Lock()

    def _enter(self, what: str) -> None:
        if not self.busy.acquire(blocking=False):
            self.log.append(f"overlap: {what}")
            return
        self.busy.release()

    def step(self, action: Any, pause: float = 0) -> Any:
        with self.busy:
            time.sleep(self.seconds)
            return super().step(action, pause)

    def close(self) -> None:
        self._enter("close")
        self.log.append("closed")


def test_the_time_limit_waits_for_an_environment_call_under_way_before_closing(
    tmp_path: Path,
) -> None:
    desktop = observation_folder(tmp_path / "obs")
    log: list[str] = []
    started = time.monotonic()
    result = asyncio.run(
        _listed(
            _tasks("_slow"),
            tmp_path / "r",
            lambda t: in_thread(SlowStepEnv(desktop, 2.0, log)),
            episode_timeout=0.8,
        )
    )
    assert time.monotonic() - started >= 2.0
    assert (result[0].status, result[0].detail) == ("failed", "episode took longer than 0.8 s")
    assert log == ["closed"]  # closed after the step returned, never under it


class TimingOutEnv(ReplayEnv):
    def step(self, action: Any, pause: float = 0) -> Any:
        raise TimeoutError("the VM's socket timed out")


def test_an_environments_own_timeout_is_not_taken_for_the_episode_limit(tmp_path: Path) -> None:
    desktop = observation_folder(tmp_path / "obs")
    with pytest.raises(TimeoutError, match="the VM's socket timed out"):
        asyncio.run(
            _listed(
                _tasks("_a"),
                tmp_path / "r",
                lambda t: in_thread(TimingOutEnv(desktop)),
            )
        )
    lines = (next((tmp_path / "r").rglob("traj.jsonl"))).read_text(encoding="utf-8").splitlines()
    assert lines == [json.dumps({"Error": "Time limit exceeded in os/_a"})]  # written once


def test_an_episode_whose_last_file_is_written_as_the_limit_passes_is_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    desktop = observation_folder(tmp_path / "obs")
    finish = ResultWriter.finish

    def slow_finish(self: ResultWriter, score: float | None) -> None:
        finish(self, score)
        time.sleep(2.0)  # a slow shared disk: the limit passes right after result.txt

    monkeypatch.setattr(ResultWriter, "finish", slow_finish)
    (outcome,) = asyncio.run(
        _listed(
            _tasks("_a"),
            tmp_path / "r",
            lambda t: in_thread(ReplayEnv(desktop)),
            make_agent=_done_agent,
            episode_timeout=1.5,
        )
    )
    assert (outcome.status, outcome.score) == ("finished", None)
    assert is_finished(outcome.folder)
    assert "Error" not in (outcome.folder / "traj.jsonl").read_text(encoding="utf-8")


class WaitingEnv(ReplayEnv):
    """A desktop whose reset waits on a slow VM; counts the resets under way at once."""

    lock = threading.Lock()
    now = most = 0

    def reset(self, task_config: Any = None, **kwargs: Any) -> Any:
        with WaitingEnv.lock:
            WaitingEnv.now += 1
            WaitingEnv.most = max(WaitingEnv.most, WaitingEnv.now)
        time.sleep(0.5)
        with WaitingEnv.lock:
            WaitingEnv.now -= 1
        return super().reset(task_config, **kwargs)


def test_each_worker_has_a_thread_for_its_environment(tmp_path: Path) -> None:
    """The loop's default executor has min(32, cores + 4) threads (6 here); 12 workers on 12
    slow desktops must not queue behind each other for them."""
    desktop = observation_folder(tmp_path / "obs")
    WaitingEnv.now = WaitingEnv.most = 0
    result = asyncio.run(
        _listed(
            _tasks(*(f"_{i}" for i in range(12))),
            tmp_path / "r",
            lambda t: in_thread(WaitingEnv(desktop)),
            make_agent=_done_agent,
            workers=12,
        )
    )
    assert result.summary.finished == 12
    assert WaitingEnv.most == 12


def test_limits_that_make_no_sense_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for bad in (0, -1, float("nan"), True):
        with pytest.raises(ConfigError, match="episode_timeout must be a number of seconds"):
            asyncio.run(
                _listed(
                    _tasks("_a"),
                    tmp_path,
                    lambda t: None,
                    episode_timeout=bad,
                )
            )
    meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
    argv = ["run-tasks", "--tasks", str(meta), "--examples", str(examples), "--model", "replay:x"]
    argv += ["--out", str(tmp_path / "out")]
    assert main([*argv, "--observations", str(tmp_path), "--episode-timeout", "nan"]) == 2
    assert "--episode-timeout takes a number of seconds above 0" in capsys.readouterr().err
    assert main([*argv, "--observations", str(tmp_path), "--domain", "oss"]) == 2
    assert "has no domain 'oss' (it has: os)" in capsys.readouterr().err


def _replayed(tmp_path: Path) -> Callable[[OsworldTask], ReplayEnv]:
    folder = observation_folder(tmp_path / "obs")
    return lambda _: ReplayEnv(folder, per_turn=True)


@pytest.mark.parametrize("tasks", ["abc", ["os/t1"], [{"domain": "os", "example_id": "t1"}]])
def test_tasks_that_are_not_osworld_tasks_are_refused_before_anything_runs(
    tmp_path: Path, tasks: Any
) -> None:
    """run_task_list("abc") failed on a character's missing `domain` (a raw AttributeError)."""
    common: dict[str, Any] = {
        "config": CONFIG,
        "result_dir": tmp_path / "results",
        "make_env": _replayed(tmp_path),
        "make_agent": _agent,
        "max_steps": 2,
    }
    with pytest.raises(ConfigError, match=r"tasks(\[0\])? must be .*OsworldTask"):
        run_task_list(tasks, **common)
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("max_steps", [0, -1, True, "15", 3.0, None])
def test_a_step_limit_that_is_not_a_positive_int_is_refused_before_anything_runs(
    tmp_path: Path, max_steps: object
) -> None:
    """max_steps <= 0 marked every task finished with no step (for good: the rerun skipped it),
    True ran one step, "15" failed mid-episode with a raw TypeError. Every runner now refuses
    it up front, writing nothing and building no agent."""
    made: list[OsworldTask] = []

    def agent(task: OsworldTask) -> PromptAgent:
        made.append(task)
        return _agent(task)

    results = tmp_path / "results"
    env = _replayed(tmp_path)
    common: dict[str, Any] = {"config": CONFIG, "result_dir": results, "make_env": env}
    with pytest.raises(ConfigError, match="max_steps must be an integer >= 1; got"):
        run_task_list(_tasks("_a"), make_agent=agent, max_steps=max_steps, **common)
    with pytest.raises(ConfigError, match="max_steps must be an integer >= 1"):
        asyncio.run(
            arun_task_list(
                _tasks("_a"),
                make_agent=agent,
                max_steps=max_steps,  # type: ignore[arg-type]
                **{**common, "make_env": lambda t: in_thread(env(t))},
            )
        )
    with pytest.raises(ConfigError, match="max_steps must be an integer >= 1"):
        run_task_list_on_ray(
            _tasks("_a"),
            make_agent=lambda t, _: agent(t),
            max_steps=max_steps,  # type: ignore[arg-type]
            **common,
        )
    writer = ResultWriter(
        tmp_path / "one",
        config=CONFIG,
        task=TaskInfo(instruction="do", domain="os", example_id="_a"),
        max_steps=3,
    )
    task = _tasks("_a")[0]
    replay = env(task)
    with pytest.raises(ConfigError, match="max_steps must be an integer >= 1"):
        run_episode(_agent(task), replay, replay.reset(), writer, max_steps=max_steps)  # type: ignore[arg-type]

    async def episode() -> object:
        return await arun_episode(
            _agent(task),
            in_thread(replay),
            writer,
            instruction="do",
            config=CONFIG,
            observation=replay.reset(),
            max_steps=max_steps,  # type: ignore[arg-type]
        )

    with pytest.raises(ConfigError, match="max_steps must be an integer >= 1"):
        asyncio.run(episode())
    assert made == []
    assert not results.exists()
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == []


def test_run_arguments_of_the_wrong_kind_are_refused_before_anything_runs(tmp_path: Path) -> None:
    """continue_unfinished="no" (truthy), a budget given as a dict and a config given as its
    to_json are refused with the parameter named, before any task runs."""
    results = tmp_path / "results"
    common: dict[str, Any] = {
        "result_dir": results,
        "make_agent": _agent,
        "make_env": _replayed(tmp_path),
        "max_steps": 3,
    }
    with pytest.raises(ConfigError, match="continue_unfinished must be true or false; got 'no'"):
        run_task_list(_tasks("_a"), config=CONFIG, continue_unfinished="no", **common)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="budget must be a Budget or None"):
        run_task_list(_tasks("_a"), config=CONFIG, budget={"max_run_tokens": 5}, **common)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="config must be an AgentConfig"):
        run_task_list(_tasks("_a"), config=CONFIG.to_json(), **common)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="workers must be an integer >= 1; got '4'"):
        asyncio.run(_listed(_tasks("_a"), results, lambda t: None, workers="4"))
    assert not results.exists()


def test_the_progress_line_counts_tasks_the_run_budget_stopped() -> None:
    stream = io.StringIO()
    progress = Progress(stream, 2, live=False)
    (task,) = _tasks("_a")
    progress.ended(TaskOutcome(task, Path("x"), "stopped", detail="run budget exceeded"))
    assert "1/2 episodes: 0 done, 0 failed, 0 skipped, 1 not started (run budget)" in (
        stream.getvalue()
    )


def test_a_cancelled_run_returns_only_when_no_environment_call_is_left_running(
    tmp_path: Path,
) -> None:
    """gather returns at the first cancelled episode; the others are waited for, so a rerun
    never finds the last run's threads still driving its desktops."""
    desktop = observation_folder(tmp_path / "obs")
    log: list[str] = []
    envs: list[SlowStepEnv] = []

    def make_env(task: OsworldTask) -> Any:
        envs.append(SlowStepEnv(desktop, 0.3, log))
        return in_thread(envs[-1])

    async def go() -> None:
        job = asyncio.ensure_future(
            _listed(
                _tasks(*(f"_{i}" for i in range(6))),
                tmp_path / "r",
                make_env,
                workers=3,
            )
        )
        deadline = time.monotonic() + 30
        while not (len(envs) == 3 and all(env.busy.locked() for env in envs)):
            assert time.monotonic() < deadline, "three steps never ran at once"
            await asyncio.sleep(0.01)
        job.cancel()
        await job

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(go())
    assert len(envs) == 3
    assert all(not env.busy.locked() for env in envs)  # no step still running
    assert log.count("closed") == 3
    assert not [line for line in log if line.startswith("overlap")]


class _Spent:
    """An agent whose first request finds a budget cap reached (another worker's step spent it)."""

    def __init__(self, scope: str) -> None:
        self.scope = scope

    def predict(self, instruction: str, obs: Any) -> Any:
        raise BudgetExceeded("max_run_tokens=10 reached (12 used)", scope=self.scope)

    async def apredict(self, instruction: str, obs: Any) -> Any:
        return self.predict(instruction, obs)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_run_cap_reached_before_an_episodes_first_request_stops_it_unfinished(
    tmp_path: Path, mode: str
) -> None:
    """Stopped, not finished: its folder has no result.txt, so a rerun with more budget runs it;
    an episode cap (its own) still ends the episode early and finished."""
    desktop = observation_folder(tmp_path / "desktop")
    for scope, status in (("run", "stopped"), ("episode", "finished")):
        results = tmp_path / scope
        tasks, agent = _tasks("a"), (lambda _, scope=scope: _Spent(scope))
        if mode == "sync":
            result = run_task_list(
                tasks,
                config=CONFIG,
                result_dir=results,
                make_agent=agent,
                make_env=lambda task: ReplayEnv(desktop),
                max_steps=3,
            )
        else:
            make_env = lambda task: in_thread(ReplayEnv(desktop))  # noqa: E731
            result = asyncio.run(_listed(tasks, results, make_env, make_agent=agent))
        (outcome,) = result
        assert outcome.status == status
        assert "budget exceeded" in outcome.detail
        assert is_finished(outcome.folder) == (scope == "episode")
        errors = (
            (outcome.folder / "traj.jsonl").read_text(encoding="utf-8")
            if scope == "episode"
            else ""
        )
        assert ("Budget exceeded" in errors) == (scope == "episode")


@pytest.mark.parametrize(
    ("where", "name"),
    [
        ("id", "../../secret/x"),
        ("id", "/ABSOLUTE/abs"),
        ("id", "a\\b"),
        ("id", ".."),
        ("id", "."),
        ("id", "x\x00y"),
        ("id", "C:x"),
        ("id", ""),
        ("domain", "../secret"),
        ("domain", "/ABSOLUTE"),
        ("domain", ".."),
    ],
)
def test_a_task_list_naming_a_file_outside_its_examples_is_refused_before_any_is_read(
    tmp_path: Path, where: str, name: str
) -> None:
    """A domain or id joins the examples folder (and the CLI's observations and replay
    source): `../../secret/x` or an absolute path used to read a host file as a task, sent to
    the model and copied into the results. Refused, naming the meta file and the value, before
    any example is read (the good task listed before it included)."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "x.json").write_text(json.dumps({"instruction": "SECRET"}), encoding="utf-8")
    (tmp_path / "abs.json").write_text(json.dumps({"instruction": "SECRET"}), encoding="utf-8")
    name = name.replace("/ABSOLUTE", str(tmp_path))
    meta, examples = write_task_list(tmp_path, {"os": ["_good"]})
    index = {"os": ["_good", name]} if where == "id" else {"os": ["_good"], name: ["x"]}
    meta.write_text(json.dumps(index), encoding="utf-8")
    (examples / "os" / "_good.json").write_text(
        "not JSON: reading it would fail first", encoding="utf-8"
    )
    with pytest.raises(TrajectoryError) as caught:
        load_task_list(meta, examples)
    message = str(caught.value)
    assert message.startswith(f"{meta}: {where} ")
    assert excerpt(name) in message  # (an absolute path is cut at 80 characters)
    assert "is not a plain file name" in message


def test_the_cli_refuses_a_task_list_id_outside_its_examples_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the CLI the id also names the task's desktop (`--observations DIR/os/ID`):
    `../../private/leak` served a host directory's files to the model."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
    observation_folder(tmp_path / "private" / "leak")
    (tmp_path / "private" / "leak.json").write_text(
        json.dumps({"instruction": "outside"}), encoding="utf-8"
    )
    (tmp_path / "desktops" / "os").mkdir(parents=True)
    meta.write_text(json.dumps({"os": ["../../private/leak"]}), encoding="utf-8")
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    argv = [
        "run-tasks", "--tasks", str(meta), "--examples", str(examples),
        "--observations", str(tmp_path / "desktops"), "--model", f"replay:{script}",
        "--observation-type", "a11y_tree", "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{meta}: id '../../private/leak' of domain 'os' is not a plain file name" in err
    assert not (tmp_path / "out").exists()


def test_a_task_list_naming_a_domain_twice_is_refused(tmp_path: Path) -> None:
    """JSON readers keep a repeated key's last value: `{"os": ["a", "b"], "os": ["c"]}` ran only
    c, silently dropping a and b."""
    meta, examples = write_task_list(tmp_path, {"os": ["a", "b", "c"], "chrome": ["d"]})
    meta.write_text('{"os": ["a", "b"], "chrome": ["d"], "os": ["c"]}', encoding="utf-8")
    with pytest.raises(TrajectoryError, match=r"meta\.json names 'os' twice"):
        load_task_list(meta, examples)
    meta.write_text('{"os": ["a", "b"], "chrome": ["d"]}', encoding="utf-8")
    assert [t.example_id for t in load_task_list(meta, examples)] == ["a", "b", "d"]


@pytest.mark.parametrize("number", ["NaN", "-Infinity", "1e999"])
def test_a_task_file_holding_a_number_json_cannot_is_refused(tmp_path: Path, number: str) -> None:
    """Task files are read as strictly as the records are written: a `NaN` in an example's
    config would reach `env.reset` and then a result folder no strict reader takes."""
    meta, examples = write_task_list(tmp_path, {"os": ["_a"]})
    (examples / "os" / "_a.json").write_text(
        '{"id": "_a", "instruction": "x", "config": [{"type": "sleep", "parameters": {"seconds": '
        + number
        + "}}]}",
        encoding="utf-8",
    )
    with pytest.raises(TrajectoryError, match=rf"_a\.json: it holds '{number}', not a finite"):
        load_task_list(meta, examples)


class _Pending:
    """An agent whose continued chain has safety checks only a person may decide about."""

    def predict(self, instruction: str, obs: Any) -> Any:
        raise SafetyCheckPending([("sc_1", "malicious_instructions", "x")], provider="openai")

    async def apredict(self, instruction: str, obs: Any) -> Any:
        return self.predict(instruction, obs)


def test_pending_safety_checks_end_their_episode_not_the_run(tmp_path: Path) -> None:
    """A chain with safety checks pending raised out of the whole run; it now ends its own
    episode (blocked, evaluated, finished) and the run goes on to the next task."""
    desktop = observation_folder(tmp_path / "desktop")
    result = run_task_list(
        _tasks("_a", "_b"),
        config=CONFIG,
        result_dir=tmp_path / "results",
        make_agent=lambda _: _Pending(),
        make_env=lambda _: ReplayEnv(desktop),
        max_steps=3,
    )
    assert [(o.status, o.ended) for o in result] == [("finished", "blocked")] * 2
    assert "pending safety checks (malicious_instructions)" in result[0].detail
