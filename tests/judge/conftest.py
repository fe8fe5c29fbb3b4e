"""Fixtures of the judge tests: a judge model on the loopback server, instant retries, result trees."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import stamina

from tests.adapters.loopback import LoopbackServer
from tests.judge.simulator import JudgeSimulator


@pytest.fixture(scope="session")
def judge_server() -> Iterator[tuple[LoopbackServer, JudgeSimulator]]:
    """One loopback server for the session, answering as a judge model."""
    simulator = JudgeSimulator()
    with LoopbackServer() as server:
        simulator.install(server)
        yield server, simulator


@pytest.fixture
def judge(judge_server: tuple[LoopbackServer, JudgeSimulator]) -> Iterator[JudgeSimulator]:
    """The session's judge with an empty script and request logs; every scripted reply used."""
    server, simulator = judge_server
    server.reset()
    simulator.reset()
    yield simulator
    left = len(simulator.script) + server.pending()
    server.reset()
    simulator.reset()
    assert left == 0, f"{left} scripted replies were never requested"


@pytest.fixture
def base_url(judge_server: tuple[LoopbackServer, JudgeSimulator]) -> str:
    """The judge server's address (OpenAI-style clients add /v1 themselves here)."""
    return judge_server[0].base_url


@pytest.fixture(autouse=True)
def instant_retries() -> Iterator[None]:
    """Retries without waiting; each client's own attempt limit still applies."""
    with stamina.set_testing(True, attempts=1000, cap=True):
        yield
