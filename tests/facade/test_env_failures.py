"""What a desktop's failure costs a run of many episodes (loopback VM servers).

A model's action the VM cannot run, and a command `/execute` fails or answers
unreadably, are reported in the step's info and the episode goes on; an
observation that cannot be read fails only its episode; a VM that gives no
answer at all, or cannot be reverted, stops the run. Lone surrogates (a model's
reply, a task file) reach the VM, and the model, as JSON escapes.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters import (
    DesktopEnvAdapter,
    EnvironmentFailure,
    OSWorldServerEnv,
    RevertFailure,
    TaskSetupError,
    in_thread,
)
from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.errors import TrajectoryError, UnwritableRecord
from adapters.registry import client_for
from adapters.runs import OsworldTask, RunResult, arun_task_list, run_task_list
from adapters.runs.episode import stops_run as _stops_run
from adapters.runs.vm_http import VmUnanswered
from adapters.runs.vm_json import json_body
from adapters.runs.vm_setup import plan_setup
from adapters.testing import FakeClient
from osharm_core import AgentConfig
from tests.adapters.loopback import LoopbackServer, Received, Reply, chat_completion
from tests.adapters.raw import RawServer, answer
from tests.facade.helpers import load, write_task_list
from tests.facade.test_environments import (  # noqa: F401  (vm_server: the fixture)
    FakeDesktopEnv,
    serve_vm,
    vm_server,
)

C13 = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="computer_13")
PYAUTOGUI = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
PRESS = '```json\n{"action_type": "PRESS", "key": "enter"}\n```'
OVERRUN = '```json\n{"action_type": "TYPING", "text": "overrun"}\n```'
NOTHING = "```python\npass\n```"
OFF_SCREEN = '```json\n{"action_type": "CLICK", "x": 99999, "y": 5}\n```'
NOTES_TREE = load("mousepad_notes")["accessibility_tree"]
OK = {"status": "success", "output": "", "error": "", "returncode": 0}


def _tasks(count: int) -> list[OsworldTask]:
    return [
        OsworldTask(domain="os", example_id=f"t{i}", instruction=f"Do t{i}", config={"id": f"t{i}"})
        for i in range(count)
    ]


def _run(
    tmp_path: Path,
    config: AgentConfig,
    replies: Callable[[OsworldTask], list[str]],
    url: Callable[[OsworldTask], str],
    *,
    concurrent: bool = True,
) -> RunResult:
    """Three tasks, each with its agent's replies and its VM, as `arun_task_list` (three workers)
    or `run_task_list` runs them."""

    def agent(task: OsworldTask) -> PromptAgent:
        return PromptAgent.from_config(config, client=FakeClient(replies(task)))

    def env(task: OsworldTask) -> OSWorldServerEnv:
        return OSWorldServerEnv(url(task), timeout=5.0, settle=0, retry_wait=0)

    common: dict[str, Any] = {"config": config, "result_dir": tmp_path, "max_steps": 4}
    if not concurrent:
        return run_task_list(_tasks(3), make_agent=agent, make_env=env, **common)
    return asyncio.run(
        arun_task_list(
            _tasks(3),
            make_agent=agent,
            make_env=lambda task: in_thread(env(task)),
            workers=3,
            **common,
        )
    )


def _done(_: OsworldTask) -> list[str]:
    return ["DONE"]


def _url(server: LoopbackServer) -> Callable[[OsworldTask], str]:
    """Every task on `server`."""
    return lambda _: server.base_url


def _traj(result: RunResult, index: int) -> list[dict[str, Any]]:
    text = (result[index].folder / "traj.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def _executed(server: LoopbackServer) -> list[str]:
    return [r.json()["command"][2] for r in server.requests if r.path == "/execute"]


def _sync_and_async(
    tmp_path: Path, env: Callable[[OsworldTask], Any], **common: Any
) -> list[RunResult]:
    """Three tasks on `env` with `run_task_list`, then with `arun_task_list` (in threads)."""
    return [
        run_task_list(_tasks(3), result_dir=tmp_path / "sync", make_env=env, **common),
        asyncio.run(
            arun_task_list(
                _tasks(3),
                result_dir=tmp_path / "async",
                make_env=lambda task: in_thread(env(task)),
                **common,
            )
        ),
    ]


def test_a_models_bad_computer_13_action_is_reported_and_the_run_goes_on(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    def replies(task: OsworldTask) -> list[str]:
        return [OFF_SCREEN, "DONE"] if task.example_id == "t0" else [PRESS, PRESS, "DONE"]

    result = _run(tmp_path, C13, replies, _url(vm_server))
    assert [o.status for o in result] == ["finished"] * 3
    assert (result.summary.finished, result.summary.failed) == (3, 0)
    first = _traj(result, 0)[0]
    assert first["action"] == {"action_type": "CLICK", "x": 99999, "y": 5}
    assert first["done"] is False
    assert "CLICK.x: 99999 is outside 0..1920" in first["info"]["error"]
    assert not any("Error" in line for line in _traj(result, 0))
    # Only the other episodes' presses ran.
    assert len(_executed(vm_server)) == 4
    assert all(code.endswith("pyautogui.press('enter')") for code in _executed(vm_server))


def test_a_failed_or_unreadable_execute_is_reported_and_the_episode_goes_on(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    """OSWorld's server answers 500 for a command that overran; its controller logs it and the
    episode goes on. So here: the step's info says what came back, and nothing is sent twice."""

    def execute(received: Received) -> Reply:
        code = received.json()["command"][2]
        if "time.sleep(300)" in code:
            return Reply(500, {"status": "error", "message": "Command timed out"})
        if "garbage" in code:
            return Reply(200, b"<html>proxy error</html>")
        return Reply(200, OK)

    vm_server.route("POST", r"/execute", execute)
    code = {"t0": "time.sleep(300)", "t1": "pyautogui.typewrite('garbage')", "t2": "pass"}

    def replies(task: OsworldTask) -> list[str]:
        return [f"```python\n{code[task.example_id]}\n```", "DONE"]

    for concurrent in (True, False):
        vm_server.reset()
        folder = tmp_path / str(concurrent)
        result = _run(folder, PYAUTOGUI, replies, _url(vm_server), concurrent=concurrent)
        assert [o.status for o in result] == ["finished"] * 3
        assert _traj(result, 0)[0]["info"] == {"error": "POST /execute: HTTP 500"}
        assert _traj(result, 1)[0]["info"] == {"error": "POST /execute did not return JSON"}
        assert _traj(result, 2)[0]["info"] == {"execute": OK}
        assert len(_executed(vm_server)) == 3  # each sent once: it may have run


def test_an_unreadable_observation_fails_only_its_episode(tmp_path: Path) -> None:
    """t0's desktop starts answering /accessibility with something that is not JSON after its
    first observation: t0 fails with OSWorld's error line, the others finish."""
    with LoopbackServer() as broken, LoopbackServer() as good:
        serve_vm(good)
        serve_vm(broken)
        looks: list[int] = []

        def tree(_: Received) -> Reply:
            looks.append(1)
            return Reply(200, {"AT": NOTES_TREE} if len(looks) == 1 else b"{nope")

        broken.route("GET", r"/accessibility", tree)

        def url(task: OsworldTask) -> str:
            return broken.base_url if task.example_id == "t0" else good.base_url

        for concurrent in (True, False):
            looks.clear()
            folder = tmp_path / str(concurrent)
            result = _run(
                folder, PYAUTOGUI, lambda _: [NOTHING, "DONE"], url, concurrent=concurrent
            )
            assert [o.status for o in result] == ["failed", "finished", "finished"]
            assert result[0].detail == 'GET /accessibility did not return {"AT": ...}'
            assert _traj(result, 0)[-1] == {"Error": "Time limit exceeded in os/t0"}
            assert (result.summary.finished, result.summary.failed) == (2, 1)
            assert len(looks) == 4  # the first observation, then three tries after the step


def test_a_vm_that_gives_no_answer_or_cannot_be_reverted_stops_the_run(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{closed.getsockname()[1]}"

    def url(task: OsworldTask) -> str:
        return nowhere if task.example_id == "t1" else vm_server.base_url

    for concurrent in (True, False):  # t1's VM is not there
        with pytest.raises(VmUnanswered, match="GET /screenshot: ConnectError"):
            _run(tmp_path / str(concurrent), PYAUTOGUI, _done, url, concurrent=concurrent)
        assert not list((tmp_path / str(concurrent)).rglob("t1"))  # left for the next run

    def gone() -> None:  # a revert that fails
        raise RuntimeError("hypervisor gone")

    with pytest.raises(RevertFailure, match=r"task 't0': revert .*RuntimeError: hypervisor gone"):
        run_task_list(
            _tasks(3)[:1],
            config=PYAUTOGUI,
            result_dir=tmp_path / "revert",
            make_agent=lambda _: PromptAgent.from_config(PYAUTOGUI, client=FakeClient(["DONE"])),
            make_env=lambda _: OSWorldServerEnv(vm_server.base_url, revert=gone, settle=0),
            max_steps=2,
        )


def test_a_run_stopped_by_one_episode_starts_no_task_waiting_for_a_worker(
    tmp_path: Path,
) -> None:
    """One worker, three tasks, the first VM gives no answer: the task that gets the worker it
    leaves must not begin (its first VM call would be abandoned half-way, its retry announced)."""
    began: list[str] = []

    class Gone:
        def __init__(self, task: OsworldTask) -> None:
            self.task = task

        async def reset(self, task_config: Any = None) -> Any:
            began.append(self.task.example_id)
            raise VmUnanswered("GET /screenshot: ConnectError", sent=False)

        def close(self) -> None:
            pass

    with pytest.raises(VmUnanswered):
        asyncio.run(
            arun_task_list(
                _tasks(3),
                config=PYAUTOGUI,
                result_dir=tmp_path,
                make_agent=lambda _: PromptAgent.from_config(PYAUTOGUI, client=FakeClient([])),
                make_env=Gone,
                max_steps=2,
                workers=1,
            )
        )
    assert began == ["t0"]


def test_the_cli_run_goes_on_past_a_bad_action_and_a_failed_command(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`run --tasks` on two VMs: one task's model clicks off the screen, another's command
    overruns on its VM (a 500); every task finishes and the summary is printed."""
    meta, examples = write_task_list(tmp_path, {"os": ["t0", "t1", "t2"]})

    def model(received: Received) -> Reply:
        body = received.json()
        said = json.dumps(body["messages"])
        if any(m["role"] == "assistant" for m in body["messages"]):
            return Reply(200, chat_completion("DONE"))
        if "Do t0" in said:
            return Reply(200, chat_completion(OFF_SCREEN))
        if "Do t1" in said:
            return Reply(200, chat_completion(OVERRUN))
        return Reply(200, chat_completion(PRESS))

    def execute(received: Received) -> Reply:
        if "overrun" in received.json()["command"][2]:
            return Reply(500, {"status": "error", "message": "Command timed out"})
        return Reply(200, OK)

    monkeypatch.setenv("LOOPBACK_KEY", "k")
    with LoopbackServer() as vm1, LoopbackServer() as vm2, LoopbackServer() as llm:
        for vm in (vm1, vm2):
            serve_vm(vm).route("POST", r"/execute", execute)
        llm.route("POST", r".*/chat/completions", model)
        status = main(
            [
                "run-tasks", "--tasks", str(meta), "--examples", str(examples),
                "--out", str(tmp_path / "out"), "--model", "compat/m",
                "--base-url", llm.base_url + "/v1", "--api-key-env", "LOOPBACK_KEY",
                "--action-space", "computer_13", "--observation-type", "a11y_tree",
                "--env-url", vm1.base_url, "--env-url", vm2.base_url, "--settle", "0",
            ]
        )  # fmt: skip
        executed = _executed(vm1) + _executed(vm2)
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "summary: 3 task(s): 3 finished" in captured.out
    assert "Traceback" not in captured.err
    folders = {p.parent.name: p for p in (tmp_path / "out").rglob("traj.jsonl")}
    lines = {name: path.read_text(encoding="utf-8").splitlines() for name, path in folders.items()}
    assert "outside 0..1920" in json.loads(lines["t0"][0])["info"]["error"]
    assert json.loads(lines["t1"][0])["info"] == {"error": "POST /execute: HTTP 500"}
    assert json.loads(lines["t2"][0])["info"] == {"execute": OK}
    assert len(executed) == 2  # t1's typing (once) and t2's press


class StrictDesktopEnv(FakeDesktopEnv):
    """A DesktopEnv whose controller raises on an action (one the vocabulary admits: the
    adapter refuses the others before they reach it)."""

    def step(self, action: Any, pause: float = 2) -> Any:
        if isinstance(action, dict) and action["action_type"] == "MOUSE_UP":
            raise Exception("Unknown action type: MOUSE_UP")
        return super().step(action, pause)


def test_a_wrapped_desktop_env_raising_on_an_action_fails_only_that_episode(
    tmp_path: Path,
) -> None:
    def agent(task: OsworldTask) -> PromptAgent:
        first = '{"action_type": "MOUSE_UP"}' if task.example_id == "t1" else PRESS
        return PromptAgent.from_config(C13, client=FakeClient([first, "DONE"]))

    result = run_task_list(
        _tasks(3),
        config=C13,
        result_dir=tmp_path,
        make_agent=agent,
        make_env=lambda _: DesktopEnvAdapter(StrictDesktopEnv()),
        max_steps=3,
    )
    assert [o.status for o in result] == ["finished", "failed", "finished"]
    assert result[1].detail == "step: Exception: Unknown action type: MOUSE_UP"
    assert _traj(result, 1)[-1] == {"Error": "Time limit exceeded in os/t1"}


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for this one")


class UnprintableDesktopEnv(FakeDesktopEnv):
    """A DesktopEnv whose step raises an exception that cannot be printed."""

    def step(self, action: Any, pause: float = 2) -> Any:
        raise Unprintable


def test_a_wrapped_desktop_env_raising_an_unprintable_exception_fails_only_that_episode(
    tmp_path: Path,
) -> None:
    """The wrapper names it by its type (it used to call `str()`, which raised past it)."""
    result = run_task_list(
        _tasks(2),
        config=C13,
        result_dir=tmp_path,
        make_agent=lambda _: PromptAgent.from_config(C13, client=FakeClient([PRESS, "DONE"])),
        make_env=lambda _: DesktopEnvAdapter(UnprintableDesktopEnv()),
        max_steps=3,
    )
    assert [(o.status, o.detail) for o in result] == [
        ("failed", "step: Unprintable: <unprintable>")
    ] * 2


class FailingSetupDesktopEnv(FakeDesktopEnv):
    """Like OSWorld's DesktopEnv when a task's setup fails: `reset` raises its own error."""

    def reset(self, task_config: Any = None, **kwargs: Any) -> Any:
        if task_config is not None and task_config.get("id") == "t1":
            raise RuntimeError("setup step 'launch' failed")
        return super().reset(task_config, **kwargs)


def test_a_wrapped_desktop_env_raising_in_reset_fails_only_that_task(tmp_path: Path) -> None:
    """As OSWorld's runner fails that example and goes on."""
    result = run_task_list(
        _tasks(3),
        config=C13,
        result_dir=tmp_path,
        make_agent=lambda _: PromptAgent.from_config(C13, client=FakeClient([PRESS, "DONE"])),
        make_env=lambda _: DesktopEnvAdapter(FailingSetupDesktopEnv()),
        max_steps=3,
    )
    assert [o.status for o in result] == ["finished", "failed", "finished"]
    assert result[1].detail == "reset: RuntimeError: setup step 'launch' failed"


# --- numbers JSON cannot carry, malformed answers ----------------------------------------------


def test_an_execute_answer_holding_nan_is_reported_and_the_run_goes_on(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Python's JSON reader takes NaN, Infinity and 1e999 (as inf); traj.jsonl is strict JSON,
    so such an answer in a step's info stopped the run (and every resume) as it was written."""
    bodies = {
        "t0": b'{"status": "success", "output": NaN, "returncode": 0}',
        "t1": b'{"status": "success", "output": "", "returncode": -Infinity}',
        "t2": b'{"status": "success", "output": [1e999], "returncode": 0}',
    }

    def execute(received: Received) -> Reply:
        return Reply(200, bodies[received.json()["command"][2].rsplit(" ", 1)[-1]])

    vm_server.route("POST", r"/execute", execute)

    def replies(task: OsworldTask) -> list[str]:
        return [f"```python\n# {task.example_id}\n```", "DONE"]

    for concurrent in (True, False):
        folder = tmp_path / str(concurrent)
        result = _run(folder, PYAUTOGUI, replies, _url(vm_server), concurrent=concurrent)
        assert [o.status for o in result] == ["finished"] * 3
        for index, number in enumerate(("'NaN'", "'-Infinity'", "'1e999'")):
            assert _traj(result, index)[0]["info"] == {
                "error": f"POST /execute did not return JSON: it holds {number}, "
                "not a finite number"
            }


def test_a_malformed_vm_answer_fails_only_its_episode(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    """t1's VM answers /execute with a body cut short: reported in the step, the episode goes
    on. t2's answers /accessibility with a bad header: t2 fails. Neither stops the run (both
    were taken for a VM that gives no answer at all)."""
    notes = load("mousepad_notes")
    good = {
        "/screenshot": answer(200, notes["screenshot"], "image/png"),
        "/accessibility": answer(200, json.dumps({"AT": notes["accessibility_tree"]}).encode()),
    }
    cut_short = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{}"
    bad_header = b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n{}"
    with (
        RawServer({**good, "/execute": cut_short}) as t1_vm,
        RawServer({**good, "/accessibility": bad_header}) as t2_vm,
    ):
        urls = {"t0": vm_server.base_url, "t1": t1_vm.base_url, "t2": t2_vm.base_url}
        for concurrent in (True, False):
            result = _run(
                tmp_path / str(concurrent),
                PYAUTOGUI,
                lambda _: [NOTHING, "DONE"],
                lambda task: urls[task.example_id],
                concurrent=concurrent,
            )
            assert [o.status for o in result] == ["finished", "finished", "failed"]
            assert _traj(result, 1)[0]["info"]["error"].startswith(
                "POST /execute: a malformed answer (RemoteProtocolError: peer closed connection"
            )
            assert result[2].detail == (
                "GET /accessibility: a malformed answer (RemoteProtocolError: bad Content-Length)"
            )
        assert t1_vm.paths.count("/execute") == 2  # sent once per run: it may have run


class NotFiniteEnv:
    """An environment of the user's own (no `DesktopEnvAdapter` to check it) whose step gives
    a NaN reward for task t1."""

    def __init__(self, task: OsworldTask) -> None:
        self.task = task

    def reset(self, task_config: Any = None, **_: Any) -> Any:
        return load("mousepad_notes")

    def step(self, action: Any, pause: float = 0) -> Any:
        reward = float("nan") if self.task.example_id == "t1" else 0.0
        return load("mousepad_notes"), reward, action == "DONE", {}

    def evaluate(self) -> float:
        return 1.0

    def close(self) -> None:
        pass


def test_a_step_record_json_cannot_hold_fails_only_its_episode(tmp_path: Path) -> None:
    """The backstop: the result writer refuses the NaN reward (traj.jsonl is strict JSON), and
    that episode fails instead of the run stopping there (and on every resume)."""

    def agent(_: OsworldTask) -> PromptAgent:
        return PromptAgent.from_config(PYAUTOGUI, client=FakeClient([NOTHING, "DONE"]))

    common: dict[str, Any] = {"config": PYAUTOGUI, "make_agent": agent, "max_steps": 3}
    results = _sync_and_async(tmp_path, NotFiniteEnv, **common)
    for result in results:
        assert [o.status for o in result] == ["finished", "failed", "finished"]
        assert result[1].detail.startswith("step 1's action cannot be written as JSON: ")
        assert _traj(result, 1) == [{"Error": "Time limit exceeded in os/t1"}]
        assert not (result[1].folder / "result.txt").exists()  # a rerun redoes it


def test_a_result_folder_that_cannot_be_written_still_stops_the_run(tmp_path: Path) -> None:
    """Unlike a value JSON cannot hold, a folder whose traj.jsonl is no regular file (here a
    link to /dev/null) or cannot be made would fail every later task the same way."""

    class Sabotaging(NotFiniteEnv):
        def step(self, action: Any, pause: float = 0) -> Any:
            (folder,) = tmp_path.rglob(self.task.example_id)
            (folder / "traj.jsonl").symlink_to("/dev/null")
            return load("mousepad_notes"), 0.0, True, {}

    def agent(_: OsworldTask) -> PromptAgent:
        return PromptAgent.from_config(PYAUTOGUI, client=FakeClient([NOTHING]))

    with pytest.raises(TrajectoryError, match="is not a regular file"):
        run_task_list(
            _tasks(2),
            config=PYAUTOGUI,
            result_dir=tmp_path,
            make_agent=agent,
            make_env=Sabotaging,
            max_steps=3,
        )
    assert not list(tmp_path.rglob("t1"))  # the run stopped before it
    full = TrajectoryError("cannot make the result folder /r/os/t1: [Errno 28] No space left")
    assert _stops_run(full)
    assert not _stops_run(UnwritableRecord("step 2's action cannot be written as JSON: x"))
    assert _stops_run(
        TrajectoryError("step 2's action cannot be written as JSON: x")
    )  # kind, not words


def test_a_wrapped_desktop_env_scoring_nan_fails_that_task_and_it_is_redone(
    tmp_path: Path,
) -> None:
    """A NaN score was written as `nan` in result.txt: the task counted as done, never redone."""

    def env(task: OsworldTask) -> DesktopEnvAdapter:
        score = float("nan") if task.example_id == "t1" else 1.0
        return DesktopEnvAdapter(FakeDesktopEnv(evaluate=score), settle=0)

    def run() -> RunResult:
        return run_task_list(
            _tasks(3),
            config=PYAUTOGUI,
            result_dir=tmp_path,
            make_agent=lambda _: PromptAgent.from_config(PYAUTOGUI, client=FakeClient(["DONE"])),
            make_env=env,
            max_steps=2,
        )

    first = run()
    assert [(o.status, o.score) for o in first] == [
        ("finished", 1.0),
        ("failed", None),
        ("finished", 1.0),
    ]
    assert first[1].detail == "evaluate returned nan, not a finite number"
    assert not (first[1].folder / "result.txt").exists()
    assert [o.status for o in run()] == ["skipped", "failed", "skipped"]


class ScoringEnv(NotFiniteEnv):
    """An environment of the user's own scoring task t1 with `bad` (no adapter checks it)."""

    bad: Any = float("nan")

    def step(self, action: Any, pause: float = 0) -> Any:
        return load("mousepad_notes"), 0.0, action == "DONE", {}

    def evaluate(self) -> Any:
        return self.bad if self.task.example_id == "t1" else 1


@pytest.mark.parametrize(
    ("bad", "detail"),
    [
        (float("nan"), "evaluate returned nan, not a finite number"),
        (float("-inf"), "evaluate returned -inf, not a finite number"),
        (10**400, "evaluate returned 10000000000000000000...(401 characters), not a finite number"),
        ("oops", "evaluate returned str, not a number"),
        (True, "evaluate returned bool, not a number"),
    ],
    ids=["nan", "inf", "huge", "str", "bool"],
)
def test_any_environment_scoring_no_finite_number_fails_that_task_and_it_is_redone(
    tmp_path: Path, bad: Any, detail: str
) -> None:
    """Only `DesktopEnvAdapter` checked the score: an environment of one's own (or a `ReplayEnv`
    whose evaluator gives NaN) had `nan` or `oops` written to result.txt and the task counted
    as finished, never redone. The episode now fails with the error line; an integer score is
    still written as it was given."""

    class Env(ScoringEnv):
        pass

    Env.bad = bad

    def run(where: Path, concurrent: bool) -> RunResult:
        common: dict[str, Any] = {"config": PYAUTOGUI, "result_dir": where, "max_steps": 2}

        def agent(_: OsworldTask) -> PromptAgent:
            return PromptAgent.from_config(PYAUTOGUI, client=FakeClient(["DONE"]))

        if not concurrent:
            return run_task_list(_tasks(3), make_agent=agent, make_env=Env, **common)
        return asyncio.run(
            arun_task_list(
                _tasks(3), make_agent=agent, make_env=lambda t: in_thread(Env(t)), **common
            )
        )

    for concurrent in (False, True):
        where = tmp_path / str(concurrent)
        first = run(where, concurrent)
        assert [(o.status, o.score) for o in first] == [
            ("finished", 1),
            ("failed", None),
            ("finished", 1),
        ]
        assert first[1].detail == detail
        assert [line.get("Error") for line in _traj(first, 1)] == [
            None,  # DONE's line
            "Time limit exceeded in os/t1",
        ]
        assert not (first[1].folder / "result.txt").exists()
        assert (first[0].folder / "result.txt").read_text(encoding="utf-8") == "1\n"
        assert [o.status for o in run(where, concurrent)] == ["skipped", "failed", "skipped"]


def test_a_replay_env_whose_evaluator_gives_nan_writes_no_result(tmp_path: Path) -> None:
    from adapters.runs.episode import run_episode
    from adapters.trajectories.osharm import ResultWriter, TaskInfo
    from adapters.trajectories.replay import ReplayEnv
    from tests.facade.helpers import observation_folder

    env = ReplayEnv(observation_folder(tmp_path / "obs"), evaluator=lambda _: float("nan"))
    folder = tmp_path / "result"
    task = TaskInfo(instruction="x", domain="os", example_id="t")
    writer = ResultWriter(folder, config=PYAUTOGUI, task=task, max_steps=2)
    agent = PromptAgent.from_config(PYAUTOGUI, client=FakeClient(["DONE"]))
    with pytest.raises(EnvironmentFailure, match="evaluate returned nan, not a finite number"):
        run_episode(agent, env, env.reset(), writer, max_steps=2)
    assert not writer.finished
    assert not (folder / "result.txt").exists()
    lines = (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[-1]) == {"Error": "Time limit exceeded in os/t"}


class NotJsonAgent:
    """An agent of the user's own whose action for task t1 holds a NaN."""

    def __init__(self, task: OsworldTask) -> None:
        self.task = task

    def predict(self, instruction: str, obs: Any) -> tuple[str, list[Any]]:
        x = float("nan") if self.task.example_id == "t1" else 1.0
        return "reply", [{"action_type": "MOVE_TO", "x": x, "y": 1}, "DONE"]

    async def apredict(self, instruction: str, obs: Any) -> tuple[str, list[Any]]:
        return self.predict(instruction, obs)


def test_a_step_better_log_cannot_hold_fails_only_its_episode(tmp_path: Path) -> None:
    """better_log.json's writer was a bare `json.dumps`: a NaN in an agent's action raised a
    raw ValueError naming nothing and the whole task list stopped there. It is now an
    `UnwritableRecord` naming the file and the step, raised before the step is written."""
    common: dict[str, Any] = {"config": C13, "make_agent": NotJsonAgent, "max_steps": 3}
    results = _sync_and_async(tmp_path, ScoringEnv, **common)
    for result in results:
        assert [o.status for o in result] == ["finished", "failed", "finished"]
        assert result[1].detail.startswith(
            "better_log.json's step 1 cannot be written as JSON: Out of range float values"
        )
        assert not (result[1].folder / "better_log.json").exists()  # nothing of that step
        assert _traj(result, 1) == [{"Error": "Time limit exceeded in os/t1"}]
        assert not (result[1].folder / "result.txt").exists()
    assert not _stops_run(UnwritableRecord("better_log.json's step 1 cannot be written"))


# --- lone surrogates ---------------------------------------------------------------------------


def test_lone_surrogates_reach_the_vm_as_json_escapes(
    vm_server: LoopbackServer,  # noqa: F811
) -> None:
    """A model's code, and a task's setup command, holding lone surrogates: the body is ASCII
    JSON (as OSWorld's controller sends it), which the server's JSON reader turns back."""
    vm_server.route("POST", r"/setup/.*", lambda _: Reply(200, {"status": "ok"}))
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, settle=0)
    code = "pyautogui.typewrite('a\ud800b')"
    assert env.step(code)[3] == {"execute": OK}
    command = ["echo", "caf\udce9"]
    env.reset({"id": "t", "config": [{"type": "execute", "parameters": {"command": command}}]})
    env.close()
    sent = {r.path: r for r in vm_server.requests if r.method == "POST"}
    for path in ("/execute", "/setup/execute"):
        assert sent[path].body.isascii()
        assert sent[path].headers["content-type"] == "application/json"
    assert b"a\\ud800b" in sent["/execute"].body
    assert sent["/execute"].json()["command"][2].endswith(code)
    assert sent["/setup/execute"].json() == {"command": command, "shell": False}
    assert json_body({"x": "\udce9"}) == {
        "content": b'{"x": "\\udce9"}',
        "headers": {"content-type": "application/json"},
    }


def test_a_download_path_with_a_lone_surrogate_is_refused_before_anything_runs() -> None:
    """The VM path of a download goes in a multipart form field, which cannot carry it."""
    files = [{"url": "http://127.0.0.1/f.pdf", "path": "/home/user/caf\udce9.pdf"}]
    with pytest.raises(TaskSetupError, match=r"files\[0\]\.path: holds a lone surrogate"):
        plan_setup([{"type": "download", "parameters": {"files": files}}])


def test_a_reply_with_a_lone_surrogate_goes_back_to_the_model_escaped() -> None:
    """The reply (its JSON held the escape `\\ud800`) comes back in the next request's
    history; UTF-8 cannot hold a lone surrogate, so it is sent as that JSON escape and the
    episode goes on."""
    reply = "```python\npyautogui.typewrite('a\ud800b')\n```"
    obs = load("mousepad_notes")
    with LoopbackServer() as llm:
        llm.enqueue(Reply(200, chat_completion(reply)), Reply(200, chat_completion("DONE")))
        client = client_for("compat/m", base_url=llm.base_url + "/v1", api_key="k")
        agent = PromptAgent.from_config(PYAUTOGUI, client=client)
        try:
            first = agent.predict("type", obs)[1]
            assert first is not None
            assert "a\ud800b" in first[0]
            assert agent.predict("type", obs)[1] == ["DONE"]
        finally:
            client.close()  # type: ignore[attr-defined]
        second = llm.requests[1]
    assert b"a\\ud800b" in second.body  # the escape, once
    assert "a\ud800b" in json.dumps(second.json(), ensure_ascii=False)


def test_a_command_that_overruns_gets_the_servers_answer_not_a_read_timeout(
    vm_server: LoopbackServer,  # noqa: F811
) -> None:
    """OSWorld's server answers 500 once a command has run 120 s; a client read timeout no
    longer than that would call the VM unanswered (which stops the run) first. Here the
    client's timeout is 0.5 s and the command's answer takes 1 s."""
    vm_server.route(
        "POST",
        r"/execute",
        lambda _: Reply(500, {"status": "error", "message": "Command timed out"}, delay=1.0),
    )
    env = OSWorldServerEnv(vm_server.base_url, timeout=0.5, settle=0)
    try:
        _, _, done, info = env.step("time.sleep(300)")
    finally:
        env.close()
    assert not done
    assert info == {"error": "POST /execute: HTTP 500"}
    # Other calls keep the configured timeout.
    vm_server.route("GET", r"/screenshot", lambda _: Reply(200, b"", delay=1.0))
    other = OSWorldServerEnv(vm_server.base_url, timeout=0.5, retries=1)
    try:
        with pytest.raises(VmUnanswered):
            other.observe()
    finally:
        other.close()


# --- closing ----------------------------------------------------------------------------------


def test_close_ends_the_calls_under_way_and_later_ones_at_once_typed(
    vm_server: LoopbackServer,  # noqa: F811
) -> None:
    """`close()` from another thread while `observe()` waits on a stalled screenshot: it ends
    at once with an `EnvironmentFailure` saying the environment was closed, and so do
    `observe()` and `step()` after it, none tried again (each leaked httpx's bare
    RuntimeError from the closed client, after the retry waits)."""
    notes = load("mousepad_notes")
    vm_server.route(
        "GET",
        r"/screenshot",
        lambda _: Reply(200, notes["screenshot"], {"content-type": "image/png"}, delay=5),
    )
    env = OSWorldServerEnv(vm_server.base_url, timeout=10.0, settle=0, retry_wait=5)
    ended: list[BaseException] = []

    def observe() -> None:
        try:
            env.observe()
        except BaseException as exc:
            ended.append(exc)

    worker = threading.Thread(target=observe, daemon=True)
    worker.start()
    vm_server.wait_for_requests(1, path="/screenshot")
    env.close()
    worker.join(3)
    assert not worker.is_alive()
    started = time.monotonic()
    for after in (env.observe, lambda: env.step("pyautogui.click(1, 1)")):
        with pytest.raises(EnvironmentFailure, match="the environment was closed") as caught:
            after()
        ended.append(caught.value)
    assert time.monotonic() - started < 4  # (a retry would wait 5 s)
    assert [type(e) for e in ended] == [EnvironmentFailure] * 3
    assert "GET /screenshot: the environment was closed" in str(ended[0])
    assert len([r for r in vm_server.requests if r.path == "/screenshot"]) == 1
    assert not [r for r in vm_server.requests if r.path == "/execute"]


def test_an_http_client_its_owner_closed_is_an_environment_failure_never_retried(
    vm_server: LoopbackServer,  # noqa: F811
) -> None:
    given = httpx.Client()
    given.close()
    env = OSWorldServerEnv(vm_server.base_url, http_client=given, retry_wait=5)
    started = time.monotonic()
    with pytest.raises(EnvironmentFailure, match="closed"):
        env.observe()
    assert time.monotonic() - started < 4  # (a retry would wait 5 s)
    env.close()
