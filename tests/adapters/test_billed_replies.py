"""Replies a provider may have billed are charged even when they give no step.

A 2xx reply was answered, so the provider may bill it, whether or not it can be
decoded or arrives whole. Such replies used to be dropped: the agent gave its
budget place back and the run was charged nothing. Against a real HTTP server on
127.0.0.1, they are now charged what their body reported, or an estimate when
no usage could be read; a token cap cannot be kept without usage and stops.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings

from adapters import Budget, BudgetExceeded, PromptAgent
from adapters.accounting import UsageTotals
from adapters.agent import billed_totals
from adapters.contract import ModelRequest, ModelResponse, ProviderReply, Usage
from adapters.engine.client import HttpModelClient, PendingCall, interpret
from adapters.engine.retry import RetryPolicy
from adapters.errors import (
    DeadlineExceededError,
    ModelCallError,
    ResponseDecodeError,
    ResponseTooLargeError,
    RetryableError,
)
from adapters.testing import FakeClient
from osharm_core import AgentConfig, Message, TextPart
from osharm_core.budget import count_tokens
from tests.adapters.helpers import MODES, TIMEOUT, call, loopback_client
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion
from tests.adapters.provider_routes import anthropic_message, gemini_reply, output_message
from tests.conftest import fixture_observation
from tests.strategies import usage_blocks

OBS = fixture_observation("mousepad_notes")
HI = (Message("user", (TextPart("hi"),)),)
CLICK = "```python\npyautogui.click(1, 2)\n```"

#: claude-sonnet-4 is $3 / $15 per million tokens: 50,000 in and 2,000 out cost $0.18.
COMPUTER = "anthropic-computer/claude-sonnet-4"
BILLED_COST = 0.18


def _tree_agent(model: str, client: Any, budget: Budget) -> PromptAgent:
    """An a11y_tree / pyautogui agent of `model` under `budget`."""
    return PromptAgent(
        model=model,
        observation_type="a11y_tree",
        action_space="pyautogui",
        client=client,
        budget=budget,
    )


def _undecodable_tool_use() -> dict[str, Any]:
    """A computer tool_use pressing a key pyautogui has no name for: billed, undecodable."""
    body = anthropic_message("")
    body["content"] = [
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "computer",
            "input": {"action": "key", "text": "NotARealKey_zz"},
        }
    ]
    body["stop_reason"] = "tool_use"
    body["usage"] = {"input_tokens": 50_000, "output_tokens": 2_000}
    return body


@attrs.define
class _Tap:
    """A client wrapper that keeps the last request (for a local token count)."""

    inner: Any
    last: ModelRequest | None = None

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.last = request
        return self.inner.complete(request)  # type: ignore[no-any-return]

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        self.last = request
        return await self.inner.acomplete(request)  # type: ignore[no-any-return]


def _step(agent: PromptAgent, mode: str) -> object:
    if mode == "sync":
        return agent.predict("save the file", OBS)

    async def run() -> object:
        try:
            return await agent.apredict("save the file", OBS)
        finally:
            client = agent.client
            inner = client.inner if isinstance(client, _Tap) else client
            await inner.aclose()  # type: ignore[attr-defined]

    return asyncio.run(run())


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# --- the engine: which errors carry what ---------------------------------------------


def _json(body: object) -> bytes:
    return json.dumps(body).encode()


def _pending(model: str = "gpt-4o") -> PendingCall:
    client = loopback_client(model, "http://127.0.0.1:9/v1")
    request = ModelRequest(model=model, messages=HI)
    return PendingCall(request, client.provider.encode(request))


def _raised(pending: PendingCall, status: int, content: bytes, provider: Any = None) -> Any:
    chosen = (
        provider
        if provider is not None
        else loopback_client(pending.request.model, "http://127.0.0.1:9/v1").provider
    )
    with pytest.raises(ModelCallError) as caught:
        interpret(chosen, pending, status, {}, content)
    return caught.value


def test_an_undecodable_2xx_body_carries_the_usage_it_reported() -> None:
    body = chat_completion(CLICK, prompt_tokens=700, completion_tokens=30)
    del body["choices"]
    error = _raised(_pending(), 200, _json(body))
    assert isinstance(error, ResponseDecodeError)
    assert error.billed == (Usage(input_tokens=700, output_tokens=30, total_tokens=730),)


def test_a_2xx_body_that_is_not_json_is_billed_with_no_usage_read() -> None:
    error = _raised(_pending(), 200, b'{"choices": [')
    assert error.billed == (Usage(),)


def test_an_error_sent_as_http_200_is_billed_too() -> None:
    """OpenRouter's error after the model started (HTTP 200, `error.code` 502) is retried
    as a 502 would be, and its reply, answered with 200, may have been billed."""
    body = {"error": {"code": 502, "message": "upstream died"}, "usage": {"prompt_tokens": 9}}
    error = _raised(_pending(), 200, _json(body))
    assert isinstance(error, RetryableError)
    assert error.billed == (Usage(input_tokens=9),)


def test_an_error_status_is_never_billed() -> None:
    body = {"error": {"message": "overloaded"}, "usage": {"prompt_tokens": 9}}
    error = _raised(_pending(), 503, _json(body))
    assert error.billed == ()


def test_a_provider_that_reads_no_usage_on_its_own_bills_an_unread_reply() -> None:
    """A user's provider without `usage(body)`: its undecodable reply counts as unread."""

    class Mine:
        name = "mine"

        def encode(self, request: ModelRequest) -> Any:
            raise NotImplementedError

        def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
            raise ResponseDecodeError("no", provider=self.name)

        def error(self, status: int, headers: Any, body: Any, text: str) -> ModelCallError:
            return ModelCallError("no", provider=self.name)

    body = chat_completion(CLICK, prompt_tokens=700, completion_tokens=30)
    assert _raised(_pending(), 200, _json(body), Mine()).billed == (Usage(),)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(usage_blocks())
def test_every_provider_reads_usage_the_same_with_or_without_decoding(
    block: dict[str, object],
) -> None:
    """One way to read usage: what `usage(body)` says is what `decode` puts in the reply,
    and a body that cannot be decoded still reports it."""
    chat = chat_completion("DONE")
    chat["usage"] = {
        "prompt_tokens": block["a"],
        "completion_tokens": block["b"],
        "total_tokens": block["c"],
        "prompt_tokens_details": {"cached_tokens": block["d"]},
        "completion_tokens_details": {"reasoning_tokens": block["e"]},
    }
    anthropic = anthropic_message("DONE")
    anthropic["usage"] = {
        "input_tokens": block["a"],
        "output_tokens": block["b"],
        "cache_read_input_tokens": block["d"],
        "cache_creation_input_tokens": block["e"],
    }
    gemini = gemini_reply("DONE")
    gemini["usageMetadata"] = {
        "promptTokenCount": block["a"],
        "candidatesTokenCount": block["b"],
        "totalTokenCount": block["c"],
        "cachedContentTokenCount": block["d"],
        "thoughtsTokenCount": block["e"],
    }
    responses = {
        "id": "resp_1",
        "status": "completed",
        "output": [output_message("Done.")],
        "usage": {
            "input_tokens": block["a"],
            "output_tokens": block["b"],
            "total_tokens": block["c"],
            "input_tokens_details": {"cached_tokens": block["d"]},
            "output_tokens_details": {"reasoning_tokens": block["e"]},
        },
    }
    bodies = {
        "gpt-4o": (chat, "choices"),
        "claude-sonnet-4-5": (anthropic, "content"),
        "anthropic-computer/claude-sonnet-4-5": (anthropic, "content"),
        "gemini-2.5-pro": (gemini, "candidates"),
        "gemini-computer/gemini-2.5-computer-use-preview-10-2025": (gemini, "candidates"),
        "computer-use-preview": (responses, "output"),
        "openai-computer/gpt-5.4": (responses, "output"),
    }
    for model, (body, part) in bodies.items():
        provider = loopback_client(model, "http://127.0.0.1:9").provider
        request = ModelRequest(model=model, messages=HI)
        reported = provider.usage(body)  # type: ignore[attr-defined]
        assert provider.decode(request, body).usage == reported, model
        broken = {key: value for key, value in body.items() if key != part}
        with pytest.raises(ModelCallError) as caught:
            interpret(
                provider, PendingCall(request, provider.encode(request)), 200, {}, _json(broken)
            )
        assert caught.value.billed == (reported,), model


# --- the agent: charged to totals and caps, not released --------------------------------


def test_an_undecodable_reply_is_charged_to_the_episode_and_the_run(
    server: LoopbackServer, mode: str
) -> None:
    """5 episodes under a $0.01 run cap: the first reply costs $0.18 and cannot be decoded.
    It is charged, so the next episode is refused before sending (it used to be charged $0
    each time, and all 5 went out)."""
    budget = Budget(max_run_cost=0.01)
    server.enqueue(Reply(200, _undecodable_tool_use()))
    raised: list[type[Exception]] = []
    agents = []
    for _ in range(5):
        client = loopback_client(COMPUTER, server.base_url, retry=RetryPolicy(attempts=1))
        agent = PromptAgent(
            model=COMPUTER,
            observation_type="screenshot",
            action_space="pyautogui",
            client=client,
            budget=budget,
        )
        agents.append(agent)
        try:
            _step(agent, mode)
        except (ModelCallError, BudgetExceeded) as exc:
            raised.append(type(exc))
    assert len(server.requests) == 1
    assert raised == [ResponseDecodeError] + [BudgetExceeded] * 4
    totals = budget.run_totals
    assert (totals.steps, totals.failed_steps, totals.estimated_steps) == (1, 1, 0)
    assert (totals.input_tokens, totals.output_tokens) == (50_000, 2_000)
    assert totals.cost_usd == pytest.approx(BILLED_COST)
    assert agents[0].usage_totals == totals
    assert agents[0].state.observations == ()  # the failed step took no turn
    assert budget.in_flight == 0
    assert "$0.1800 spent, cap $0.01" in (budget.run_exceeded() or "")


def test_bodies_cut_off_and_retried_are_each_charged(
    server: LoopbackServer, instant_retries: None, mode: str
) -> None:
    """Two 200 replies cut off mid-body, then a whole one: the provider billed three, and
    three are charged (the cut ones as the whole one's usage, the same request's)."""
    body = chat_completion(CLICK, prompt_tokens=4_000, completion_tokens=150)
    server.enqueue(Reply(200, body, drop=True), Reply(200, body, drop=True), Reply(200, body))
    budget = Budget(max_run_tokens=10**6)
    client = loopback_client("compat/m", server.base_url + "/v1")
    agent = _tree_agent("compat/m", client, budget)
    _step(agent, mode)
    assert len(server.requests) == 3
    totals = agent.usage_totals
    assert (totals.steps, totals.failed_steps, totals.estimated_steps) == (3, 2, 2)
    assert totals.tokens == 3 * 4_150
    assert (totals.input_tokens, totals.output_tokens) == (4_000, 150)  # only what was read
    assert budget.run_totals == totals
    assert budget.in_flight == 0


def test_a_call_that_ends_on_a_cut_body_is_charged_an_estimate(
    server: LoopbackServer, mode: str
) -> None:
    """The run's first step, its only reply cut off: nothing reported, nothing charged
    before. It is charged the request's own estimate (cl100k input plus all of max_tokens),
    and a token cap below that is reached, so nothing more is sent."""
    body = chat_completion(CLICK, prompt_tokens=4_000, completion_tokens=150)
    server.enqueue(Reply(200, body, drop=True))
    budget = Budget(max_run_tokens=2_000)
    client = _Tap(
        loopback_client("compat/m", server.base_url + "/v1", retry=RetryPolicy(attempts=1))
    )
    config = AgentConfig(
        model="compat/m", observation_type="a11y_tree", action_space="pyautogui", max_tokens=1500
    )
    agent = PromptAgent.from_config(config, client=client, budget=budget)
    with pytest.raises(RetryableError) as caught:
        _step(agent, mode)
    assert caught.value.billed == (Usage(),)
    assert client.last is not None
    estimate = count_tokens(client.last.messages, "compat/m") + 1500
    totals = budget.run_totals
    assert (totals.steps, totals.failed_steps, totals.estimated_steps) == (1, 1, 1)
    assert totals.tokens == estimate > 2_000
    assert totals.cost_usd is None  # compat/m has no price: a dollar cap would stop too
    assert budget.in_flight == 0
    with pytest.raises(BudgetExceeded, match="tokens used, cap 2000"):
        _step(agent, mode)
    assert len(server.requests) == 1


def test_an_estimate_is_never_below_the_largest_step_charged() -> None:
    """A reply whose usage could not be read counts at least what the run's largest step
    did (the place it held), and at least what the call's own reply reported."""
    config = AgentConfig(model="claude-sonnet-4-5", max_tokens=100)
    request = ModelRequest.from_config(config, HI)
    budget = Budget(max_run_tokens=10**6)
    budget.charge(
        billed_totals(
            (Usage(input_tokens=9_000, output_tokens=90),), config, request, budget.prices
        )
    )
    held = budget.reserve(UsageTotals())
    assert (held.tokens, held.cost_usd) == (9_090, pytest.approx(0.02835))
    totals = billed_totals((Usage(),), config, request, budget.prices, held)
    assert (totals.tokens, totals.known_cost_usd) == (9_090, pytest.approx(0.02835))
    bigger = billed_totals(
        (Usage(),),
        config,
        request,
        budget.prices,
        held,
        Usage(input_tokens=20_000, output_tokens=0),
    )
    assert bigger.tokens == 20_000
    held.release()


def test_a_failed_call_with_no_2xx_reply_still_gives_its_place_back() -> None:
    budget = Budget(max_run_tokens=100)
    agent = _tree_agent("gpt-4o", FakeClient(), budget)
    with pytest.raises(ModelCallError):
        agent.predict("Do it", OBS)
    assert (budget.in_flight, budget.run_totals.steps, agent.usage_totals.steps) == (0, 0, 0)


def test_a_2xx_body_over_the_size_limit_is_billed(server: LoopbackServer, mode: str) -> None:
    server.enqueue(Reply(200, chat_completion(CLICK + " " * 4096)))
    provider = loopback_client("compat/m", server.base_url + "/v1").provider
    client = HttpModelClient(
        provider, retry=RetryPolicy(attempts=1), timeout=TIMEOUT, max_response_bytes=1024
    )
    with pytest.raises(ResponseTooLargeError) as caught:
        call(client, ModelRequest(model="compat/m", messages=HI), mode)
    assert caught.value.billed == (Usage(),)


def test_a_2xx_body_the_deadline_cut_off_is_billed(server: LoopbackServer, mode: str) -> None:
    """The reply's 200 came, its body trickled past the call's deadline: billed, unread."""
    # The whole body takes 16 s; the 2 s deadline leaves a loaded machine time for the 200
    # (at 0.5 s the request once had not reached the server, and the call ended with no status).
    server.enqueue(Reply(200, chat_completion(CLICK), trickle=0.05))
    client = loopback_client(
        "compat/m", server.base_url + "/v1", retry=RetryPolicy(attempts=1, wait=0.0, timeout=2.0)
    )
    with pytest.raises(DeadlineExceededError) as caught:
        call(client, ModelRequest(model="compat/m", messages=HI), mode)
    assert (caught.value.status, caught.value.billed) == (200, (Usage(),))


# --- a token cap without usage --------------------------------------------------------


def test_a_token_cap_stops_at_a_step_whose_usage_was_not_reported(
    server: LoopbackServer, mode: str
) -> None:
    """A server that reports no usage (some OpenAI-compatible servers): a token cap cannot be
    kept, so the first such step reaches it, as a dollar cap is reached by an unpriced step
    (50 steps used to go out under a 1,000-token cap)."""
    body = chat_completion(CLICK)
    del body["usage"]
    server.enqueue(Reply(200, body))
    budget = Budget(max_episode_tokens=1_000)
    client = loopback_client("compat/m", server.base_url + "/v1", retry=RetryPolicy(attempts=1))
    agent = _tree_agent("compat/m", client, budget)
    _step(agent, mode)
    with pytest.raises(BudgetExceeded) as caught:
        _step(agent, mode)
    assert caught.value.scope == "episode"
    assert "usage not reported for a step, so the episode token cap 1000 cannot be kept" in str(
        caught.value
    )
    assert len(server.requests) == 1


def test_a_run_summary_shows_estimated_tokens_but_no_per_kind_counts() -> None:
    """A run whose only charge is an estimate: its total tokens, not input or output
    counts nobody reported."""
    from adapters.runs import RunSummary

    usage = UsageTotals().add(Usage(), None).add_estimate(2_000, None)
    summary = RunSummary(
        episodes=1, finished=0, failed=1, skipped=0, steps=1, usage=usage, wall_time=1.0
    )
    assert (summary.input_tokens, summary.output_tokens, summary.total_tokens) == (
        None,
        None,
        2_000,
    )


def _cut_by_a_time_limit(server: LoopbackServer, *replies: Reply) -> None:
    """One step whose call the episode's time limit (1 s) cancels, the server giving
    `replies`: exactly one estimated failed reply is charged, and nothing stays in flight."""
    server.enqueue(*replies)
    budget = Budget(max_run_tokens=10**6)
    agent = _tree_agent("compat/m", loopback_client("compat/m", server.base_url + "/v1"), budget)

    async def step_with_a_time_limit() -> None:
        async with asyncio.timeout(1.0):
            await agent.apredict("Click it", OBS)

    with pytest.raises(TimeoutError):
        asyncio.run(step_with_a_time_limit())
    totals = agent.usage_totals
    assert (totals.steps, totals.failed_steps, totals.estimated_steps) == (1, 1, 1)
    assert totals.tokens > 0
    assert budget.run_totals == totals
    assert budget.in_flight == 0
    server.reset()


def test_a_call_cancelled_after_a_billed_reply_still_charges_it(
    server: LoopbackServer, instant_retries: None
) -> None:
    """A 200 cut off mid-body, then the retry outlasts the episode's time limit: the
    cancelled call's cut reply is charged as a failed call's would be (it was dropped)."""
    body = chat_completion(CLICK, prompt_tokens=4_000, completion_tokens=150)
    _cut_by_a_time_limit(server, Reply(200, body, drop=True), Reply(200, body, delay=3.0))


def test_a_call_cancelled_while_a_2xx_body_arrives_charges_it(server: LoopbackServer) -> None:
    """An episode's time limit lands while a 200 reply's body is still coming: the provider
    bills that reply as it does one the call's own deadline cuts off, so it is charged too."""
    body = chat_completion(CLICK, prompt_tokens=4_000, completion_tokens=150)
    _cut_by_a_time_limit(server, Reply(200, body, trickle=0.5))
