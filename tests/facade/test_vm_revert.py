"""Restoring a VM to its snapshot before each task: `RevertCommand`, `OSWorldServerEnv(revert=...)`
and `osharm-agent run --env-revert`, against loopback VM servers and real shell commands."""

from __future__ import annotations

import asyncio
import pickle
import shlex
import shutil
import threading
import time
from pathlib import Path

import pytest

from adapters import EnvironmentFailure, OSWorldServerEnv, RevertCommand, TaskSetupError
from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.runs import OsworldTask, arun_task_list, in_thread
from adapters.runs.environments import READY_POLL
from adapters.testing import FakeClient
from osharm_core import AgentConfig, ConfigError
from tests.adapters.loopback import LoopbackServer, Reply
from tests.facade.helpers import load
from tests.facade.test_env_url import _args
from tests.facade.test_environments import serve_vm, vm_server  # noqa: F401  (the fixture)

CONFIG = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")


def test_the_vm_is_reverted_before_the_setup_and_waited_for(
    vm_server: LoopbackServer,  # noqa: F811
) -> None:
    vm_server.route("POST", "/setup/launch", lambda _: Reply(200, {"status": "success"}))
    reverts: list[int] = []

    def revert() -> None:  # the VM reboots: its server answers again after a while
        reverts.append(len(vm_server.requests))
        vm_server.enqueue(Reply(hangup=True), Reply(503, b"booting"), path="/screenshot")

    slept: list[float] = []
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, sleep=slept.append, revert=revert)
    task = {"id": "t", "config": [{"type": "launch", "parameters": {"command": ["gedit"]}}]}
    assert env.reset(task)["screenshot"] == load("mousepad_notes")["screenshot"]
    assert reverts == [0]
    assert [r.path for r in vm_server.requests] == [
        *["/screenshot"] * 3,  # two looks while it boots, the third shows the desktop
        "/setup/launch",
        "/screenshot",
        "/accessibility",
    ]
    assert slept == [READY_POLL, READY_POLL, env.settle]
    env.reset(task)
    assert reverts == [0, 6]
    env.close()


def test_a_vm_that_does_not_come_back_or_a_failing_revert_is_an_environment_failure(
    vm_server: LoopbackServer,  # noqa: F811
) -> None:
    vm_server.route("GET", "/screenshot", lambda _: Reply(503, b"still booting"))
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, revert=lambda: None, ready_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(EnvironmentFailure, match=r"did not show a screenshot within 0\.3 s") as e:
        env.reset({"config": []})
    assert time.monotonic() - started < 5
    assert "last: GET /screenshot: HTTP 503" in str(e.value)
    assert not [r for r in vm_server.requests if r.method == "POST"]  # no setup on a dead VM
    env.close()

    def broken() -> None:
        raise RuntimeError("hypervisor gone")

    env = OSWorldServerEnv(vm_server.base_url, revert=broken)
    with pytest.raises(EnvironmentFailure, match="RuntimeError: hypervisor gone") as e:
        env.reset()
    assert isinstance(e.value.__cause__, RuntimeError)  # the callable's own traceback is kept
    env.close()

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text for this one")

    def unprintable() -> None:
        raise Unprintable

    env = OSWorldServerEnv(vm_server.base_url, revert=unprintable)
    with pytest.raises(EnvironmentFailure, match=r"Unprintable: <unprintable>$"):
        env.reset()
    env.close()
    for bad in ({"revert": "vmrun revert"}, {"ready_timeout": 0}, {"ready_timeout": True}):
        with pytest.raises(ConfigError):
            OSWorldServerEnv(vm_server.base_url, **bad)  # type: ignore[arg-type]


def test_a_revert_command_runs_in_a_shell_that_knows_its_vm(tmp_path: Path) -> None:
    said = tmp_path / "said"
    command = RevertCommand(
        f'echo "$OSHARM_VM_INDEX $OSHARM_VM_URL" >> {shlex.quote(str(said))}',
        vm_url="http://vm:5000",
        vm_index=2,
    )
    command()
    command()
    assert said.read_text(encoding="utf-8") == "2 http://vm:5000\n" * 2
    assert pickle.loads(pickle.dumps(command)) == command  # a Ray worker can run it


def test_a_failing_or_overrunning_revert_command_is_an_environment_failure(
    tmp_path: Path,
) -> None:
    failing = RevertCommand("echo 'snapshot init_state' ; echo 'not found' >&2 ; exit 3")
    with pytest.raises(EnvironmentFailure, match="exited with status 3") as e:
        failing()
    assert "it said: snapshot init_state / not found" in str(e.value)
    # Killed at its timeout with everything it started, even a child holding its output open.
    marker = tmp_path / "survived"
    slow = RevertCommand(f"(sleep 3; touch {marker}) & sleep 30", timeout=0.5)
    started = time.monotonic()
    with pytest.raises(EnvironmentFailure, match=r"did not finish within 0\.5 s; it was killed"):
        slow()
    assert time.monotonic() - started < 5
    time.sleep(3.5)
    assert not marker.exists()
    for bad in (
        {"command": " "},
        {"command": "true", "timeout": 0},
        {"command": "true", "timeout": "1"},
    ):
        with pytest.raises(ConfigError):
            RevertCommand(**bad)  # type: ignore[arg-type]


def test_env_revert_restores_each_vm_before_each_task(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with LoopbackServer() as other:
        said = tmp_path / "reverts"
        revert = f'echo "$OSHARM_VM_INDEX" >> {shlex.quote(str(said))}'
        urls = ("--env-url", vm_server.base_url, "--env-url", serve_vm(other).base_url)
        argv = _args(tmp_path, *urls, "--workers", "2")
        assert main([*argv, "--env-revert", revert]) == 0
        assert "summary: 3 task(s): 3 finished" in capsys.readouterr().out
        lines = said.read_text(encoding="utf-8").split()
        assert len(lines) == 3
        assert set(lines) <= {"0", "1"}

        shutil.rmtree(tmp_path / "results")
        # A VM that cannot be restored stops the run (the next task would start on a dirty desktop).
        assert main([*argv, "--env-revert", "echo cannot >&2; exit 1"]) == 1
        assert "exited with status 1; it said: cannot" in capsys.readouterr().err
        assert not list((tmp_path / "results").rglob("traj.jsonl"))
        assert main(_args(tmp_path, "--observations", str(tmp_path), "--env-revert", "true")) == 2
        assert "--env-revert restores live VMs: give --env-url URL" in capsys.readouterr().err
        assert main([*argv, "--env-revert", "true", "--env-ready-timeout", "0"]) == 2
        assert "--env-ready-timeout takes 0 to 86400 seconds" in capsys.readouterr().err


def test_a_revert_is_killed_when_its_episode_is_stopped(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The time limit (or Ctrl-C) stops a 30 s revert at once, with what it started."""
    marker = tmp_path / "reverted"
    task = OsworldTask(domain="os", example_id="_a", instruction="Do it")
    started = time.monotonic()
    (outcome,) = asyncio.run(
        arun_task_list(
            [task],
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=lambda t: PromptAgent.from_config(CONFIG, client=FakeClient(["DONE"])),
            make_env=lambda t: in_thread(
                OSWorldServerEnv(
                    vm_server.base_url, revert=RevertCommand(f"sleep 30 && touch {marker}")
                )
            ),
            max_steps=3,
            episode_timeout=0.5,
        )
    )
    assert time.monotonic() - started < 5
    assert (outcome.status, outcome.detail) == ("failed", "episode took longer than 0.5 s")
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(EnvironmentFailure, match="was killed: its episode was stopped"):
        RevertCommand(f"sleep 30 && touch {marker}")(cancel=cancel)
    assert not marker.exists()


def test_a_task_that_cannot_run_is_refused_before_the_vm_is_reverted(
    vm_server: LoopbackServer,  # noqa: F811
) -> None:
    reverts: list[str] = []
    env = OSWorldServerEnv(vm_server.base_url, revert=lambda: reverts.append("revert"))
    with pytest.raises(TaskSetupError, match="chrome_open_tabs needs Chrome DevTools"):
        env.reset({"id": "t", "config": [{"type": "chrome_open_tabs"}]})
    assert reverts == []
    assert vm_server.requests == []
    env.close()
