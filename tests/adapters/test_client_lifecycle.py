"""An `HttpModelClient`'s connections over its life: event loops that end without shutting
down, and `close()` / `aclose()` with calls under way."""

from __future__ import annotations

import asyncio
import copy
import multiprocessing
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters import Budget, PromptAgent, RateLimiter, TrajectoryRecorder
from adapters.contract import ModelRequest
from adapters.engine.client import HttpModelClient
from adapters.engine.retry import RetryPolicy
from adapters.errors import ClientClosedError, ConfigurationError
from adapters.providers.openai_chat import OpenAIChatProvider
from adapters.registry import REGISTRY, client_for
from adapters.trajectories import read_trajectory
from osharm_core import Message, TextPart
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import MODES, TIMEOUT, call, loopback_client
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion, openai_error
from tests.conftest import child_environment

ROOT = Path(__file__).parents[2]
REQUEST = ModelRequest(model="compat/m", messages=(Message("user", (TextPart("hi"),)),))
NOTES_TREE = (ROOT / "examples" / "task" / "01_mousepad_notes.xml").read_text(encoding="utf-8")


def _child(script: str, *args: str) -> tuple[list[str], str]:
    """`script` run by a Python of its own (so the tests' bookkeeping keeps none of its
    clients), ResourceWarnings as errors: the lines it printed, and its stderr."""
    child = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=child_environment(),
        check=False,
    )
    return child.stdout.splitlines(), child.stderr


_CLOSED_LOOPS = """
import asyncio, gc, os, sys, threading
from adapters.contract import ModelRequest
from adapters.registry import REGISTRY, client_for
from osharm_core import AgentConfig
from osharm_core.messages import Message, TextPart

request = ModelRequest.from_config(
    AgentConfig(model="m", observation_type="a11y_tree"), (Message("user", (TextPart("hi"),)),), None
)
client = client_for("compat/m", base_url=sys.argv[1], api_key="k")

def fds():
    gc.collect()
    return len(os.listdir("/proc/self/fd"))

async def calls():
    await asyncio.gather(*(client.acomplete(request) for _ in range(4)))

def steps(count):
    for _ in range(count):
        loop = asyncio.new_event_loop()  # as older harnesses step: no shutdown_asyncgens
        loop.run_until_complete(calls())
        loop.close()

base = fds()
steps(20)
print(fds() - base <= 4, len(client._own_async))  # the last loop's, until the next call
workers = [threading.Thread(target=steps, args=(2,)) for _ in range(5)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
client.close()  # from none of those loops
print(fds() - base, len(client._own_async))
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
def test_loops_closed_without_shutting_down_leave_no_socket_open() -> None:
    """A loop closed without `shutdown_asyncgens` never runs its watcher: its client's
    sockets are closed at the client's next call (20 such loops held 80 sockets, and a
    step-per-loop harness ran out of descriptors) and by `close()` from another thread."""
    with LoopbackServer() as server:
        server.route("POST", r".*/chat/completions", lambda _: Reply(200, chat_completion("ok")))
        printed = _child(_CLOSED_LOOPS, server.base_url + "/v1")
    assert printed == (["True 1", "0 0"], "")


# --- close() / aclose() with calls under way ----------------------------------------------------

#: The reference's waits: a call that retried after its client was closed would wait 30 s.
PATIENT = RetryPolicy(wait=30.0, attempts=10, timeout=120.0)


def _stalled(server: LoopbackServer) -> HttpModelClient:
    """A client of `server`, whose every reply takes 5 s."""
    server.route(
        "POST", r".*/chat/completions", lambda _: Reply(200, chat_completion("ok"), delay=5)
    )
    return loopback_client("compat/m", f"{server.base_url}/v1", retry=PATIENT)


def test_close_ends_a_sync_call_under_way_at_once_and_typed() -> None:
    """`close()` from another thread while a call waits on a stalled server: the call ends at
    once with a `ClientClosedError`, not tried again (it used to wait out the server, then
    the 30 s retry wait, then raise httpx's bare RuntimeError from the closed client)."""
    with LoopbackServer() as server:
        client = _stalled(server)
        ended: list[BaseException] = []

        def run() -> None:
            try:
                client.complete(REQUEST)
            except BaseException as exc:
                ended.append(exc)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        server.wait_for_requests(1)
        client.close()
        worker.join(3)
        assert not worker.is_alive()
        assert len(server.requests) == 1
    (error,) = ended
    assert type(error) is ClientClosedError
    assert not error.retryable
    assert "closed" in str(error)


def test_close_ends_sync_calls_waiting_to_retry_without_another_try() -> None:
    """Calls waiting out a retry wait when the client is closed end when it is over,
    without sending their next try."""
    with LoopbackServer() as server:
        server.route("POST", r".*/chat/completions", lambda _: openai_error(500, "boom"))
        client = loopback_client(
            "compat/m", f"{server.base_url}/v1", retry=RetryPolicy(wait=2.0, attempts=3)
        )
        ended: list[BaseException] = []

        def run() -> None:
            try:
                client.complete(REQUEST)
            except BaseException as exc:
                ended.append(exc)

        workers = [threading.Thread(target=run, daemon=True) for _ in range(4)]
        for worker in workers:
            worker.start()
        sent = len(server.wait_for_requests(4))  # (4, unless the machine stalled 2 s)
        client.close()
        for worker in workers:
            worker.join(6)
        assert len(server.requests) == sent
    assert [type(error) for error in ended] == [ClientClosedError] * 4


@pytest.mark.anyio
async def test_aclose_ends_an_async_call_under_way_at_once_and_typed() -> None:
    with LoopbackServer() as server:
        client = _stalled(server)
        call = asyncio.ensure_future(client.acomplete(REQUEST))
        await asyncio.to_thread(server.wait_for_requests, 1)
        await client.aclose()
        with pytest.raises(ClientClosedError, match="under way"):
            await asyncio.wait_for(call, 3)
        assert len(server.requests) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_given_http_client_its_owner_closed_is_a_typed_error_never_retried(mode: str) -> None:
    with LoopbackServer() as server:
        given: httpx.Client | httpx.AsyncClient
        if mode == "sync":
            given = httpx.Client()
            given.close()
        else:
            given = httpx.AsyncClient()
            asyncio.run(given.aclose())
        provider = OpenAIChatProvider(base_url=f"{server.base_url}/v1", api_key=FAKE_KEY)
        kind = "http_client" if mode == "sync" else "async_http_client"
        client = HttpModelClient(provider, retry=PATIENT, **{kind: given})  # type: ignore[arg-type]
        started = time.monotonic()
        with pytest.raises(ClientClosedError, match="before the try was sent"):
            call(client, REQUEST, mode)
        assert time.monotonic() - started < 10  # (a retry would wait 30 s)
        assert server.requests == []


# --- pickling: an agent handed to a worker process (OSWorld's run_multienv, spawn) -------------


def pickle_copy(value: Any) -> Any:
    return pickle.loads(pickle.dumps(value))


class Unlimited:
    """A `Limiter` that pickles (as a handle to a shared limiter such as `RayLimiter` does)."""

    def admit(self, *, deadline: float | None = None) -> float:
        return 0.0

    def release(self) -> None:
        pass

    def reserve(self, *, deadline: float | None = None, provider: str = "") -> float:
        return 0.0

    def hold(self) -> float:
        return 0.0

    def unreserve(self, *, due: float) -> None:
        pass

    def observe(self, status: int, headers: Any, tokens: int | None = None) -> None:
        pass


@pytest.mark.parametrize("copier", [pickle_copy, copy.deepcopy], ids=["pickle", "deepcopy"])
def test_a_used_client_copies_as_its_configuration_without_its_connections(
    server: LoopbackServer, copier: Callable[[Any], Any]
) -> None:
    """A client that has connections open (sync and async) pickled with the locks and pools
    it held and failed (a TypeError about an RLock; a fresh one on a WeakKeyDictionary): it
    goes as its configuration, and the copy builds its own connections when it calls."""
    policy = RetryPolicy(attempts=2, wait=0.0, timeout=30.0)
    provider = OpenAIChatProvider(base_url=f"{server.base_url}/v1", api_key=FAKE_KEY)
    client = HttpModelClient(
        provider, retry=policy, timeout=TIMEOUT, model="wire", limiter=Unlimited()
    )
    assert call(client, REQUEST, "sync").text == "loopback reply"
    client.complete(REQUEST)  # the sync pool left open

    async def used() -> HttpModelClient:
        await client.acomplete(REQUEST)  # and this loop's
        return copier(client)  # type: ignore[no-any-return]

    twin = asyncio.run(used())
    assert twin is not client
    assert (twin._own_client, len(twin._own_async)) == (None, 0)
    assert (twin.provider, twin.retry, twin.timeout) == (client.provider, policy, TIMEOUT)
    assert (twin.model, twin.max_response_bytes) == ("wire", client.max_response_bytes)
    assert isinstance(twin.limiter, Unlimited)
    with twin:
        assert twin.complete(REQUEST).text == "loopback reply"
    assert server.requests[-1].json()["model"] == "wire"
    client.close()


@pytest.mark.parametrize("copier", [pickle_copy, copy.deepcopy], ids=["pickle", "deepcopy"])
def test_limiters_budgets_and_given_connections_refuse_to_travel_in_one_typed_error(
    copier: Callable[[Any], Any],
) -> None:
    """A `RateLimiter` (a PicklingError on a lambda) and a `Budget` (a TypeError on a lock)
    count one process's calls: copied, each worker would have the whole rate or cap. Each
    refuses with a `ConfigurationError` saying to build it in the worker; so does a client
    sharing one, or given its own httpx client, and an agent holding any of them."""
    limiter = RateLimiter(requests_per_minute=60)
    base = "http://127.0.0.1:9/v1"
    refused = {
        "RateLimiter": limiter,
        "a Budget": Budget(max_run_tokens=1000),
        "sharing a RateLimiter": REGISTRY.client_for("compat/m", base_url=base, limiter=limiter),
        "its own http_client": HttpModelClient(
            OpenAIChatProvider(base_url=base, api_key=FAKE_KEY), http_client=httpx.Client()
        ),
    }
    for what, value in refused.items():
        with pytest.raises(ConfigurationError, match="does not pickle or copy") as caught:
            copier(value)
        assert what in str(caught.value)
        assert "in the worker" in str(caught.value)
    agent = PromptAgent(model="gpt-4o", client=refused["sharing a RateLimiter"])
    with pytest.raises(ConfigurationError, match="sharing a RateLimiter"):
        copier(agent)
    with pytest.raises(ConfigurationError, match="a Budget does not pickle"):
        copier(PromptAgent(model="gpt-4o", budget=Budget(max_run_tokens=1000)))
    refused["its own http_client"]._given_client.close()  # type: ignore[union-attr]


def test_an_agent_given_a_client_steps_in_a_spawned_worker(tmp_path: Path) -> None:
    """As OSWorld's run_multienv hands agents to spawned workers: an agent given
    `client_for(...)` (it failed to pickle) calls its model from the worker."""
    with LoopbackServer() as server:
        click = chat_completion("```python\npyautogui.click(19, 31)\n```")
        server.route("POST", r".*/chat/completions", lambda _: Reply(200, click))
        client = client_for("compat/m", base_url=f"{server.base_url}/v1", api_key=FAKE_KEY)
        agent = PromptAgent(
            model="compat/m",
            observation_type="a11y_tree",
            action_space="pyautogui",
            client=client,
            recorder=TrajectoryRecorder(tmp_path / "child"),
        )
        child = multiprocessing.get_context("spawn").Process(
            target=agent.predict, args=("t", {"accessibility_tree": NOTES_TREE})
        )
        child.start()
        child.join(timeout=120)
        assert child.exitcode == 0
        assert len(server.requests) == 1
    [entry] = read_trajectory(tmp_path / "child")
    assert list(entry.actions) == ["pyautogui.click(19, 31)"]
