"""A VM call ends by its deadline whatever the server drips, headers included, and `abort()`
(an episode's time limit, Ctrl-C) ends a call under way, its retries and their waits at once
(review findings 2 and 4). Bounds are generous: each drip or wait would take 20 s or more."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import stamina
from stamina.instrumentation import RetryDetails, set_on_retry_hooks

from adapters import EnvironmentFailure, OSWorldServerEnv, PromptAgent, in_thread
from adapters.runs.tasks import OsworldTask, arun_task_list
from adapters.runs.vm_http import vm_answer
from adapters.testing import FakeClient
from osharm_core import AgentConfig
from tests.adapters.drip import DripServer
from tests.adapters.loopback import LoopbackServer, Reply
from tests.facade.test_environments import VIDEO, serve_vm, vm_server  # noqa: F401

CONFIG = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
TASK = OsworldTask(domain="os", example_id="t0", instruction="x", config={"id": "t0"})


@pytest.fixture
def drip() -> Iterator[DripServer]:
    """A VM server whose answers' headers trickle in for 30 s."""
    with DripServer(seconds=30.0) as server:
        yield server


def _aborted_after(env: OSWorldServerEnv, call: Callable[[], object], seconds: float) -> str:
    """What `call()` raised when `env.abort()` came `seconds` into it (it must raise)."""
    timer = threading.Timer(seconds, env.abort)
    timer.start()
    try:
        with pytest.raises(EnvironmentFailure) as caught:
            call()
    finally:
        timer.cancel()
        timer.join()
    return str(caught.value)


def test_headers_that_trickle_in_end_at_the_calls_deadline(drip: DripServer) -> None:
    started = time.monotonic()
    with httpx.Client(timeout=1.0) as http, pytest.raises(EnvironmentFailure, match="deadline"):
        vm_answer(
            http,
            "GET",
            drip.base_url + "/screenshot",
            where="GET /screenshot",
            limit=100,
            seconds=1,
        )
    assert time.monotonic() - started < 8.0


def test_an_answer_that_never_comes_is_cut_off_by_abort(drip: DripServer) -> None:
    """The read under way ends when aborted, and no other try follows (reads are tried 3 times)."""
    env = OSWorldServerEnv(drip.base_url, timeout=30.0, retry_wait=30)
    started = time.monotonic()
    said = _aborted_after(env, env.observe, 0.5)
    assert time.monotonic() - started < 8.0
    assert said == "GET /screenshot: stopped (its episode was stopped)"
    assert drip.requests == 1
    # Later calls fail at once; close still runs (nothing to save here).
    with pytest.raises(EnvironmentFailure, match="stopped"):
        env.execute("pyautogui.click(1, 2)")
    assert drip.requests == 1
    env.close()


def test_abort_ends_the_wait_between_tries(vm_server: LoopbackServer) -> None:  # noqa: F811
    vm_server.route("GET", r"/screenshot", lambda _: Reply(500, b"down"))
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, retry_wait=30)
    started = time.monotonic()
    said = _aborted_after(env, env.observe, 0.5)
    assert time.monotonic() - started < 8.0
    assert "stopped while waiting on the VM" in said
    assert [r.path for r in vm_server.requests] == ["/screenshot"]
    env.close()


def test_abort_ends_a_setup_download_whose_headers_trickle(drip: DripServer) -> None:
    with LoopbackServer() as vm:
        env = OSWorldServerEnv(vm.base_url, timeout=5.0)
        step = {"files": [{"url": drip.base_url + "/f.txt", "path": "/home/user/f.txt"}]}
        started = time.monotonic()
        said = _aborted_after(
            env, lambda: env.reset({"config": [{"type": "download", "parameters": step}]}), 0.5
        )
        assert time.monotonic() - started < 8.0
        assert "stopped (its episode was stopped)" in said
        assert drip.requests == 1  # not fetched again
        assert vm.requests == []
        env.close()


def test_close_after_an_abort_still_saves_the_recording(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, recording=tmp_path / "r.mp4")
    env.reset()
    env.abort()
    env.close()
    assert (tmp_path / "r.mp4").read_bytes() == VIDEO


def _episode(env: Callable[[], OSWorldServerEnv], tmp_path: Path) -> tuple[str, str, float]:
    """One episode on `env()` with a 1 s limit: its status, detail and how long it took."""
    started = time.monotonic()
    (outcome,) = asyncio.run(
        arun_task_list(
            [TASK],
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=lambda t: PromptAgent.from_config(CONFIG, client=FakeClient(["DONE"])),
            make_env=lambda t: in_thread(env()),
            max_steps=3,
            workers=1,
            episode_timeout=1,
        )
    )
    return outcome.status, outcome.detail, time.monotonic() - started


def test_an_episode_limit_ends_a_call_whose_headers_trickle(
    drip: DripServer, tmp_path: Path
) -> None:
    status, detail, took = _episode(
        lambda: OSWorldServerEnv(drip.base_url, timeout=2.0, retries=3), tmp_path
    )
    assert (status, detail) == ("failed", "episode took longer than 1 s")
    assert took < 8.0
    assert drip.requests == 1


def test_an_episode_limit_ends_a_slow_read_and_its_retries(
    vm_server: LoopbackServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    vm_server.route("GET", r"/screenshot", lambda _: Reply(200, b"\x89PNG\r\n\x1a\n", delay=20))
    status, detail, took = _episode(
        lambda: OSWorldServerEnv(vm_server.base_url, timeout=30.0, retries=3, retry_wait=30),
        tmp_path,
    )
    assert (status, detail) == ("failed", "episode took longer than 1 s")
    assert took < 8.0
    assert [r.path for r in vm_server.requests] == ["/screenshot"]


def test_retries_are_still_announced_to_stamina_hooks(
    vm_server: LoopbackServer,  # noqa: F811
) -> None:
    """The CLI's "trying again" line comes from these hooks; stamina's switches still apply."""
    vm_server.enqueue(Reply(503, b"busy"), path="/screenshot")
    seen: list[RetryDetails] = []

    def hook(details: RetryDetails) -> Any:
        seen.append(details)

    set_on_retry_hooks([hook])
    try:
        env = OSWorldServerEnv(vm_server.base_url, timeout=5.0, retry_wait=0.01)
        env.observe()
        with stamina.set_testing(True, attempts=1000, cap=True):
            vm_server.enqueue(Reply(503, b"busy"), path="/accessibility")
            env.observe()
        stamina.set_active(False)
        vm_server.enqueue(Reply(503, b"busy"), path="/screenshot")
        with pytest.raises(EnvironmentFailure, match="HTTP 503"):
            env.observe()
        env.close()
    finally:
        stamina.set_active(True)
        set_on_retry_hooks(None)
    assert [(d.name, d.retry_num, d.wait_for) for d in seen] == [
        ("GET /screenshot", 1, 0.01),
        ("GET /accessibility", 1, 0.0),
    ]
    assert "HTTP 503" in str(seen[0].caused_by)
