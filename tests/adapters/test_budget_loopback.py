"""Caps end an episode cleanly against a real model server on 127.0.0.1: nothing lost, nothing more sent.

The Anthropic simulator answers every call with 21 input and 4 output tokens;
claude-sonnet-4-5 is in the shipped price table at $3 / $15 per million, so a
step costs $0.000123 and uses 25 tokens.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from adapters import Budget, BudgetExceeded, PromptAgent, load_prices
from adapters.accounting import UsageTotals, recorded_totals
from adapters.contract import ModelResponse, Usage
from adapters.engine.retry import RetryPolicy
from adapters.errors import FakeClientExhausted
from adapters.runs import OsworldTask, run_task_list
from adapters.runs.episode import run_episode
from adapters.testing import FakeClient
from adapters.trajectories.jsonl import TrajectoryRecorder, open_trajectory
from adapters.trajectories.osharm import (
    BETTER_LOG,
    RESULT_FILE,
    TRAJ_FILE,
    ResultWriter,
    TaskInfo,
    load_result_folder,
    result_folder,
)
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig, ObservationError
from tests.adapters.helpers import loopback_client
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion
from tests.adapters.provider_routes import (
    AnthropicSimulator,
    GeminiSimulator,
    ResponsesSimulator,
    install,
)
from tests.facade.helpers import load, observation_folder

MODEL = "claude-sonnet-4-5"
CONFIG = AgentConfig(model=MODEL, observation_type="a11y_tree", action_space="pyautogui")
STEP_COST = (21 * 3.0 + 4 * 15.0) / 1e6
OBS = load("mousepad_notes")


@pytest.fixture(scope="session")
def simulators(
    loopback_server: LoopbackServer,
) -> tuple[AnthropicSimulator, GeminiSimulator, ResponsesSimulator]:
    """The provider routes, installed once on the session's loopback server."""
    return install(loopback_server)


@pytest.fixture
def anthropic(server: LoopbackServer, simulators: tuple[Any, ...]) -> LoopbackServer:
    """The loopback server with the Anthropic route installed and an empty request log."""
    return server


def _agent(server: LoopbackServer, budget: Budget, recorder: Any = None) -> PromptAgent:
    client = loopback_client(MODEL, server.base_url, retry=RetryPolicy(attempts=1))
    return PromptAgent.from_config(CONFIG, client=client, recorder=recorder, budget=budget)


def _lines(directory: Path) -> list[dict[str, Any]]:
    text = (directory / "trajectory.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def test_a_token_cap_ends_the_episode_after_the_step_that_reaches_it(
    anthropic: LoopbackServer, tmp_path: Path
) -> None:
    """Two steps of 25 tokens reach a 50-token cap: both recorded, the third never sent."""
    agent = _agent(anthropic, Budget(max_episode_tokens=50), TrajectoryRecorder(tmp_path))
    with agent.client:  # type: ignore[attr-defined]
        for _ in range(2):
            agent.predict("Open the File menu", OBS)
        state = agent.state
        with pytest.raises(BudgetExceeded) as caught:
            agent.predict("Open the File menu", OBS)
    assert (caught.value.scope, caught.value.tokens) == ("episode", 50)
    assert "50 tokens used, cap 50" in str(caught.value)
    assert len(anthropic.requests) == 2
    assert agent.state is state  # the refused step changed nothing
    assert len(agent.state) == 2
    assert agent.usage_totals.tokens == 50
    first, last = _lines(tmp_path)
    assert "budget_exceeded" not in first
    assert last["budget_exceeded"] == "episode budget exceeded: 50 tokens used, cap 50"
    assert first["cost_usd"] == last["cost_usd"] == pytest.approx(STEP_COST)
    assert first["usage"] == {"input_tokens": 21, "output_tokens": 4, "total_tokens": 25}
    entries = open_trajectory(tmp_path).entries
    assert entries[-1].budget_exceeded == last["budget_exceeded"]
    assert recorded_totals(entries) == agent.usage_totals


def test_a_dollar_cap_ends_the_episode_on_the_async_path(
    anthropic: LoopbackServer, tmp_path: Path
) -> None:
    """$0.0002 is passed by the second step ($0.000246): the third call is refused before sending."""
    agent = _agent(anthropic, Budget(max_episode_cost=0.0002), TrajectoryRecorder(tmp_path))

    async def episode() -> BudgetExceeded:
        try:
            for _ in range(5):
                await agent.apredict("Open the File menu", OBS)
        except BudgetExceeded as exc:
            return exc
        finally:
            await agent.client.aclose()  # type: ignore[attr-defined]
        raise AssertionError("the cap was never reached")

    error = asyncio.run(episode())
    assert error.scope == "episode"
    assert error.cost_usd == pytest.approx(2 * STEP_COST)
    assert len(anthropic.requests) == 2
    assert len(_lines(tmp_path)) == 2
    assert "spent, cap $0.0002" in _lines(tmp_path)[-1]["budget_exceeded"]
    assert agent.usage_totals.cost_usd == pytest.approx(2 * STEP_COST)


def test_reset_starts_a_new_episode_but_the_run_cap_holds(anthropic: LoopbackServer) -> None:
    """Episode totals restart on reset(); the run's keep counting across episodes."""
    budget = Budget(max_episode_tokens=25, max_run_tokens=75)
    agent = _agent(anthropic, budget)
    with agent.client:  # type: ignore[attr-defined]
        scopes = []
        for _ in range(3):
            agent.reset()
            agent.predict("Open the File menu", OBS)
            with pytest.raises(BudgetExceeded) as caught:
                agent.predict("Open the File menu", OBS)
            scopes.append(caught.value.scope)
        assert scopes == ["episode", "episode", "run"]
        agent.reset()
        with pytest.raises(BudgetExceeded, match="run budget exceeded: 75 tokens used"):
            agent.predict("Open the File menu", OBS)
    assert budget.run_totals.tokens == 75
    assert budget.run_totals.cost_usd == pytest.approx(3 * STEP_COST)
    assert len(anthropic.requests) == 3


def test_an_unpriced_model_reaches_a_dollar_cap_at_once(anthropic: LoopbackServer) -> None:
    """A dollar cap cannot be kept without a price: the first step ends the episode, saying why."""
    empty = load_prices({"models": []})
    budget = Budget(max_episode_cost=100.0, prices=attrs_table_without(empty, MODEL))
    agent = _agent(anthropic, budget)
    with agent.client:  # type: ignore[attr-defined]
        agent.predict("Open the File menu", OBS)
        with pytest.raises(BudgetExceeded, match="cannot be kept"):
            agent.predict("Open the File menu", OBS)


def attrs_table_without(table: Any, model: str) -> Any:
    """`table` without `model`'s entry."""
    import attrs

    return attrs.evolve(table, entries=tuple(e for e in table.entries if model not in e.names))


def test_an_osharm_episode_ends_cleanly_and_is_evaluated(
    anthropic: LoopbackServer, tmp_path: Path
) -> None:
    """In a result folder: both model calls in better_log, the budget line last in traj.jsonl, a score."""
    desktop = observation_folder(tmp_path / "obs")
    folder = tmp_path / "result"
    writer = ResultWriter(
        folder,
        config=CONFIG,
        task=TaskInfo(instruction="Open the File menu", domain="os", example_id="_one"),
        max_steps=10,
    )
    agent = _agent(anthropic, Budget(max_episode_tokens=50))
    env = ReplayEnv(desktop, evaluator=lambda _: 0.0)
    with agent.client:  # type: ignore[attr-defined]
        score = run_episode(agent, env, env.reset(), writer, max_steps=10)
    assert score == 0.0
    assert (folder / RESULT_FILE).is_file()
    assert writer.ended_by == "episode budget exceeded: 50 tokens used, cap 50"
    assert len(load_result_folder(folder)) == 2
    log = json.loads((folder / BETTER_LOG).read_text(encoding="utf-8"))
    assert log["budget_exceeded"] == writer.ended_by
    last = json.loads((folder / TRAJ_FILE).read_text(encoding="utf-8").splitlines()[-1])
    assert last == {"Error": f"Budget exceeded in os/_one: {writer.ended_by}"}
    assert len(anthropic.requests) == 2


# --- task lists ---------------------------------------------------------------------

CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
GPT = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")


def test_a_task_list_stops_starting_episodes_once_the_run_cap_is_reached(tmp_path: Path) -> None:
    """60 tokens for the run, 25 per step, 2 steps per task: task 2 ends early, task 3 never starts."""
    desktop = observation_folder(tmp_path / "obs")
    tasks = [OsworldTask(domain="os", example_id=f"_t{i}", instruction="Do it") for i in (1, 2, 3)]
    budget = Budget(max_run_tokens=60)
    reply = ModelResponse(text=CLICK, model="gpt-4o", usage=Usage(input_tokens=20, output_tokens=5))
    clients: list[FakeClient] = []

    def make_agent(task: OsworldTask) -> PromptAgent:
        clients.append(FakeClient([reply] * 5))
        return PromptAgent.from_config(GPT, client=clients[-1])  # no budget: the run's is given

    outcomes = run_task_list(
        tasks,
        config=GPT,
        result_dir=tmp_path / "results",
        make_agent=make_agent,
        make_env=lambda task: ReplayEnv(desktop),
        max_steps=2,
        budget=budget,
    )
    assert [o.status for o in outcomes] == ["finished", "finished", "stopped"]
    assert outcomes[0].detail == ""
    assert outcomes[1].detail == "ended early: run budget exceeded: 75 tokens used, cap 60"
    assert outcomes[2].detail == "run budget exceeded: 75 tokens used, cap 60"
    assert [c.calls for c in clients] == [2, 1]
    assert [None if o.usage is None else o.usage.tokens for o in outcomes] == [50, 25, None]
    assert budget.run_totals == UsageTotals().add(reply.usage, None) + UsageTotals().add(
        reply.usage, None
    ) + UsageTotals().add(reply.usage, None)
    third = result_folder(tmp_path / "results", GPT, "os", "_t3")
    assert not third.exists()


# --- agents sharing a run cap -------------------------------------------------------

SHARED = AgentConfig(model="compat/m", observation_type="a11y_tree", action_space="pyautogui")
WORKERS = 8


def _slow_server(server: LoopbackServer) -> None:
    """Every chat call answered after 50 ms with 90 + 10 tokens, so the agents' calls overlap."""
    body = chat_completion(CLICK, prompt_tokens=90, completion_tokens=10)
    server.route("POST", r".*/chat/completions", lambda _: Reply(200, body, delay=0.05))


def _shared_agent(server: LoopbackServer, budget: Budget) -> PromptAgent:
    client = loopback_client("compat/m", server.base_url + "/v1", retry=RetryPolicy(attempts=1))
    return PromptAgent.from_config(SHARED, client=client, budget=budget)


def test_threads_sharing_a_run_cap_send_what_one_agent_would() -> None:
    """8 threads, 100 tokens a step, a 250-token run cap: 3 requests, as for one agent (not 8+)."""
    budget = Budget(max_run_tokens=250)
    ended: list[str] = []

    def worker(agent: PromptAgent) -> None:
        with agent.client:  # type: ignore[attr-defined]
            for _ in range(5):
                try:
                    agent.predict("Open the File menu", OBS)
                except BudgetExceeded as exc:
                    ended.append(exc.scope)
                    return

    with LoopbackServer() as server:
        _slow_server(server)
        agents = [_shared_agent(server, budget) for _ in range(WORKERS)]
        threads = [threading.Thread(target=worker, args=(agent,)) for agent in agents]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        sent = len(server.requests)
    assert not any(thread.is_alive() for thread in threads)
    assert (sent, budget.run_totals.tokens, budget.in_flight) == (3, 300, 0)
    assert ended == ["run"] * WORKERS
    assert sum(agent.usage_totals.tokens for agent in agents) == 300


def test_agents_on_one_event_loop_sharing_a_run_cap_send_what_one_agent_would() -> None:
    budget = Budget(max_run_tokens=250)

    async def episode(agent: PromptAgent) -> str:
        try:
            for _ in range(5):
                await agent.apredict("Open the File menu", OBS)
        except BudgetExceeded as exc:
            return exc.scope
        finally:
            await agent.client.aclose()  # type: ignore[attr-defined]
        return "never ended"

    async def run(agents: list[PromptAgent]) -> list[str]:
        return await asyncio.gather(*(episode(agent) for agent in agents))

    with LoopbackServer() as server:
        _slow_server(server)
        scopes = asyncio.run(run([_shared_agent(server, budget) for _ in range(WORKERS)]))
        sent = len(server.requests)
    assert scopes == ["run"] * WORKERS
    assert (sent, budget.run_totals.tokens, budget.in_flight) == (3, 300, 0)


def test_a_failed_step_gives_its_place_back() -> None:
    """A call that fails, or an observation that cannot be read, holds nothing afterwards."""
    budget = Budget(max_run_tokens=100)
    reply = ModelResponse(text=CLICK, model="gpt-4o", usage=Usage(input_tokens=20, output_tokens=5))
    failing = PromptAgent.from_config(GPT, client=FakeClient(), budget=budget)
    with pytest.raises(FakeClientExhausted):
        failing.predict("Do it", OBS)
    assert budget.in_flight == 0
    with pytest.raises(ObservationError):
        failing.predict("Do it", {"screenshot": None, "accessibility_tree": 12})
    assert budget.in_flight == 0
    working = PromptAgent.from_config(GPT, client=FakeClient([reply]), budget=budget)
    working.predict("Do it", OBS)
    assert (budget.in_flight, budget.run_totals.tokens) == (0, 25)
