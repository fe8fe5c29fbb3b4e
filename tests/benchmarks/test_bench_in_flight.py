"""How many episodes' model calls one process keeps in flight at a 5 s model latency.

Each worker stands for one episode: it sends its step's model call, and the
next as soon as the last one answered, for as long as the window lasts. The
model is the loopback server in its own process, answering every call after
5 s (its threads and CPU stay out of this process's figures). The request is
a real step: `screenshot_a11y_tree` with three turns of history (four
screenshots and four trees, built by the core's `prepare_step`).

Measured in one run, 200 workers each time (the workers start spread over one
latency, as independent episodes do; the window is the next two latencies,
and the calls still out when it closes are cancelled):

* `default pool`: one client with its default pool of 128 connections: at
  most 128 calls reach the model at once, the other workers wait for a
  connection (the issue: `--workers 200` silently kept 128 in flight);
* `sized pool`: the same with `max_connections=connections_for(200)`.

Calls in flight are counted by Little's law (calls answered in the window x
the latency / the window), so only calls the model is working on count. This
process's CPU time per call in the window (sending the body, reading the
reply, the event loop) gives how many calls one process could keep in flight
before its one core of Python is the limit: the latency over that CPU time,
`adapters.engine.pools.calls_in_flight`, whose default per-call figure
(`MODEL_CALL_CPU_SECONDS`) is this benchmark's, rounded up. Past that many
workers, one process only queues: that is the point at which a runner should
spread its episodes over processes (`--ray`).

Asserted (ratios of this run): the sized pool keeps at least 0.9 of its
workers' calls in flight, the default pool at most 1.1 x 128. Printed: both
counts, the CPU per call, the calls in flight one process's CPU allows, and
the wall time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from adapters.contract import ModelRequest
from adapters.engine.client import HttpModelClient
from adapters.engine.pools import (
    DEFAULT_MAX_CONNECTIONS,
    MODEL_CALL_CPU_SECONDS,
    calls_in_flight,
    connections_for,
)
from adapters.engine.retry import RetryPolicy
from adapters.registry import REGISTRY
from osharm_core import AgentConfig, AgentState, Observation, complete_step, prepare_step
from tests.adapters import loopback
from tests.conftest import OBSERVATIONS
from tests.facade.helpers import SMALL

LATENCY = 5.0
WORKERS = 200
WINDOW = 2 * LATENCY
SIZED_TARGET = 0.9
CAPPED_TARGET = 1.1
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"


def step_request() -> ModelRequest:
    """The fourth step of an episode on the small fixtures: three turns of history and now."""
    config = AgentConfig(
        model="compat/bench", observation_type="screenshot_a11y_tree", action_space="pyautogui"
    )
    state = AgentState()
    for number in range(4):
        name = SMALL[number % len(SMALL)]
        observation = Observation(
            screenshot=(OBSERVATIONS / f"{name}.png").read_bytes(),
            accessibility_tree=(OBSERVATIONS / f"{name}.xml").read_text(encoding="utf-8"),
        )
        step = prepare_step(config, state, "Save the notes", observation)
        if number < 3:
            state, _ = complete_step(config, state, step, CLICK)
    return ModelRequest.from_config(config, step.messages)


@pytest.fixture(scope="module")
def slow_model() -> Iterator[str]:
    """A loopback model in a child process answering every call after 5 s; yields its base URL."""
    with loopback.in_child_process("--delay", str(LATENCY)) as base_url:
        yield base_url


async def episodes(client: HttpModelClient, request: ModelRequest) -> tuple[float, float]:
    """(calls in flight, this process's CPU seconds per call) over the window, WORKERS
    workers each calling again as soon as answered."""
    answered: list[float] = []
    start = time.perf_counter()
    opens, closes = start + LATENCY, start + LATENCY + WINDOW
    cpu: dict[str, float] = {}

    async def worker(index: int) -> None:
        await asyncio.sleep(index * LATENCY / WORKERS)
        while time.perf_counter() < closes:
            await client.acomplete(request)
            answered.append(time.perf_counter())

    async def clock() -> None:
        await asyncio.sleep(opens - time.perf_counter())
        cpu["opens"] = time.process_time()
        await asyncio.sleep(closes - time.perf_counter())
        cpu["closes"] = time.process_time()

    workers = [asyncio.ensure_future(worker(i)) for i in range(WORKERS)]
    try:
        await clock()
    finally:  # the calls still out are not counted: no need to wait for them
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        await client.aclose()
    counted = sum(opens <= t < closes for t in answered)
    return counted * LATENCY / WINDOW, (cpu["closes"] - cpu["opens"]) / max(counted, 1)


def pooled(base_url: str, max_connections: int | None) -> HttpModelClient:
    """A client of the bench model with a pool of `max_connections` (None: the default)."""
    client = REGISTRY.client_for(
        "compat/bench",
        base_url=f"{base_url}/v1",
        api_key="bench-key",
        retry=RetryPolicy(attempts=1),
        max_connections=max_connections,
    )
    assert isinstance(client, HttpModelClient)
    return client


@pytest.mark.benchmark_ratio
def test_calls_in_flight_at_a_5_s_model(slow_model: str) -> None:
    """A pool sized to 200 workers keeps >= 0.9 of their calls in flight; the default 128 caps them."""
    request = step_request()
    began = time.perf_counter()
    capped, _ = asyncio.run(episodes(pooled(slow_model, None), request))
    sized, cpu = asyncio.run(episodes(pooled(slow_model, connections_for(WORKERS)), request))
    wall = time.perf_counter() - began
    allows = calls_in_flight(LATENCY, cpu)
    body = sum(len(m.text) + sum(len(i.data) for i in m.images) for m in request.messages)
    report = "\n".join(
        [
            f"{WORKERS} workers, model latency {LATENCY} s, request ~{body / 1000:.0f} kB",
            f"default pool ({DEFAULT_MAX_CONNECTIONS}): {capped:.0f} calls in flight",
            f"sized pool ({connections_for(WORKERS)}): {sized:.0f} calls in flight = "
            f"{sized / WORKERS:.2f} of the workers (target >= {SIZED_TARGET})",
            f"CPU per call (this process): {cpu * 1000:.2f} ms "
            f"(MODEL_CALL_CPU_SECONDS {MODEL_CALL_CPU_SECONDS * 1000:.1f} ms)",
            f"one process's CPU allows ~{allows} calls in flight at {LATENCY} s "
            f"(calls_in_flight(): {calls_in_flight(LATENCY)})",
            f"wall time {wall:.1f} s",
        ]
    )
    print("\n" + report)
    assert sized / WORKERS >= SIZED_TARGET, report
    assert capped / DEFAULT_MAX_CONNECTIONS <= CAPPED_TARGET, report
