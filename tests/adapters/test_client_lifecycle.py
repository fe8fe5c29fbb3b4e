"""An `HttpModelClient`'s connections over its life: event loops that end without shutting
down, and `close()` / `aclose()` with calls under way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.adapters.loopback import LoopbackServer, Reply, chat_completion

ROOT = Path(__file__).parents[2]


def _child(script: str, *args: str) -> tuple[list[str], str]:
    """`script` run by a Python of its own (so the tests' bookkeeping keeps none of its
    clients), ResourceWarnings as errors: the lines it printed, and its stderr."""
    child = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    return child.stdout.splitlines(), child.stderr


_CLOSED_LOOPS = """
import asyncio, gc, os, sys, threading
from adapters.contract import ModelRequest
from adapters.registry import client_for
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
