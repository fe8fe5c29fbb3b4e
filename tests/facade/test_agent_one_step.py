"""One step at a time per agent: a second step (or a reset) while one is in flight is refused
before any model call, and a step that ends in any way frees the agent."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from typing import Any

import attrs
import pytest

from adapters import AgentBusyError, PromptAgent, UsageError
from adapters.contract import ModelRequest, ModelResponse
from adapters.errors import AccessibilityTreeError, RetryableError
from osharm_core import Continuation

TREE = '<r xmlns:st="https://accessibility.ubuntu.example.org/ns/state"/>'
OBS = {"accessibility_tree": TREE}


class _Gated:
    """A client whose calls wait for `go` (async: an event; sync: a threading event)."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self.entered = threading.Event()
        self.go = threading.Event()

    def _reply(self) -> ModelResponse:
        self.calls += 1
        if self.fail:
            raise RetryableError("overloaded", provider="test")
        return ModelResponse(text=f"```\nstep{self.calls}()\n```", model="gpt-4o")

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.entered.set()
        assert self.go.wait(2)
        return self._reply()

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        self.entered.set()
        for _ in range(2000):  # at most ~2 s: a second call that got through fails, not hangs
            if self.go.is_set():
                return self._reply()
            await asyncio.sleep(0.001)
        raise AssertionError("the gate never opened")


def _agent(client: Any) -> PromptAgent:
    return PromptAgent(observation_type="a11y_tree", action_space="pyautogui", client=client)


@pytest.mark.anyio
async def test_two_concurrent_apredicts_refuse_the_second_before_its_call() -> None:
    client = _Gated()
    agent = _agent(client)

    async def second() -> None:
        while not client.entered.is_set():
            await asyncio.sleep(0.001)
        try:
            with pytest.raises(AgentBusyError, match="one step at a time"):
                await agent.apredict("i", OBS)
            with pytest.raises(AgentBusyError, match=r"reset\(\)"):
                agent.reset()
        finally:
            client.go.set()

    first, _ = await asyncio.gather(agent.apredict("i", OBS), second())
    assert first == ("```\nstep1()\n```", ["step1()"])
    assert client.calls == 1
    assert agent.thoughts == ["```\nstep1()\n```"]
    assert await agent.apredict("i", OBS) == ("```\nstep2()\n```", ["step2()"])  # freed
    assert len(agent.state) == 2
    assert issubclass(AgentBusyError, UsageError)


def test_predict_from_two_threads_refuses_the_second() -> None:
    client = _Gated()
    agent = _agent(client)
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(agent.predict("i", OBS)))
    worker.start()
    try:
        assert client.entered.wait(10)
        with pytest.raises(AgentBusyError, match=r"predict\(\)"):
            agent.predict("i", OBS)
        with pytest.raises(AgentBusyError):
            agent.reset()
    finally:
        client.go.set()
        worker.join()
    assert results == [("```\nstep1()\n```", ["step1()"])]
    assert client.calls == 1
    agent.reset()  # freed
    assert len(agent.state) == 0


def test_a_new_chain_or_another_model_holds_for_the_step_in_flight() -> None:
    """`start_new_chain()` and a model change (which drops the old model's conversation) used to
    be undone by the step in flight, whose end wrote back the state it began from: the old
    model's conversation id then went to the new model. Now the step's turn is kept and its
    conversation is not; from the step's own end (a recorder) the change is allowed too."""

    class Chained(_Gated):
        def _reply(self) -> ModelResponse:
            reply = super()._reply()
            return attrs.evolve(reply, continuation=Continuation(f"resp_{self.calls}"))

    for change in ("chain", "model"):
        client = Chained()
        agent = _agent(client)
        client.go.set()
        agent.predict("i", OBS)
        assert agent.state.continuation == Continuation("resp_1")
        client.go.clear()
        client.entered.clear()
        worker = threading.Thread(target=lambda: agent.predict("i", OBS))  # noqa: B023
        worker.start()
        try:
            assert client.entered.wait(10)
            if change == "chain":
                agent.start_new_chain()
            else:
                agent.model = "claude-sonnet-4-5"
        finally:
            client.go.set()
            worker.join()
        assert len(agent.state) == 2
        assert agent.state.continuation is None
        if change == "model":
            assert agent.model == "claude-sonnet-4-5"

    class Switching:
        def step(self, record: object) -> None:
            agent.model = "gpt-4o"

    client = Chained()
    client.go.set()
    agent = PromptAgent(
        observation_type="a11y_tree", action_space="pyautogui", client=client, recorder=Switching()
    )
    agent.predict("i", OBS)
    assert (agent.model, len(agent.state), agent.state.continuation) == ("gpt-4o", 1, None)


@pytest.mark.anyio
async def test_a_failed_or_cancelled_step_frees_the_agent() -> None:
    failing = _Gated(fail=True)
    failing.go.set()
    agent = _agent(failing)
    with pytest.raises(RetryableError):
        agent.predict("i", OBS)
    with pytest.raises(RetryableError):
        await agent.apredict("i", OBS)
    with pytest.raises(AccessibilityTreeError, match="must be an XML string"):
        agent.predict("i", {"accessibility_tree": 42})  # refused while building the prompt
    stuck = _Gated()
    agent = _agent(stuck)
    task = asyncio.ensure_future(agent.apredict("i", OBS))
    while not stuck.entered.is_set():
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stuck.go.set()
    assert await agent.apredict("i", OBS) == ("```\nstep1()\n```", ["step1()"])
    agent.reset()


def test_a_new_chain_from_another_thread_never_loses_a_turn() -> None:
    """start_new_chain() wrote back the state it read: a step's end stored in between was
    lost (3,000 steps recorded, 157 turns left in the state)."""

    class Chained:
        calls = 0

        def complete(self, request: ModelRequest) -> ModelResponse:
            self.calls += 1
            return ModelResponse(
                text="```\nx()\n```", model="gpt-4o", continuation=Continuation(f"r{self.calls}")
            )

    agent = _agent(Chained())
    stop = threading.Event()

    def chains() -> None:
        while not stop.is_set():
            agent.start_new_chain()

    worker = threading.Thread(target=chains)
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads take turns often, so the two writes meet
    worker.start()
    try:
        for _ in range(300):
            agent.predict("i", OBS)
    finally:
        stop.set()
        worker.join()
        sys.setswitchinterval(switching)
    assert len(agent.state) == 300


def test_a_new_chain_while_the_prompt_is_built_drops_the_conversation() -> None:
    """The chain count was read after the prompt was built (off the loop for a large one): a
    change in that window kept the reply's conversation, and the next request sent the old
    chain's id (to the new model, after a model change)."""

    class Chained(_Gated):
        def _reply(self) -> ModelResponse:
            reply = super()._reply()
            return attrs.evolve(reply, continuation=Continuation(f"resp_{self.calls}"))

    class Meddling(logging.Logger):
        def isEnabledFor(self, level: int) -> bool:  # asked while the prompt is built
            agent.start_new_chain()
            return False

    client = Chained()
    client.go.set()
    agent = _agent(client)
    agent.predict("i", OBS)
    agent.reset(Meddling("meddling"))
    agent.predict("i", OBS)
    assert agent.state.continuation is None
