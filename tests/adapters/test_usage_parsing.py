"""Usage normalised across providers: documented reply bodies through the real engine and a loopback server.

Each body carries the provider's own usage breakdown (cached prompt tokens,
reasoning tokens) in the field names its documentation gives; the response's
`Usage` must say the same thing in one vocabulary: every prompt token in
`input_tokens`, every generated one in `output_tokens`.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.accounting import step_cost
from adapters.contract import MAX_TOKEN_COUNT, ModelRequest, Usage
from adapters.engine.retry import RetryPolicy
from osharm_core import Message, TextPart
from tests.adapters.helpers import MODES, call, loopback_client
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion
from tests.adapters.provider_routes import (
    AnthropicSimulator,
    GeminiSimulator,
    ResponsesSimulator,
    anthropic_message,
    gemini_reply,
    install,
    output_message,
)

HI = (Message("user", (TextPart("hi"),)),)


@pytest.fixture(scope="session")
def simulators(
    loopback_server: LoopbackServer,
) -> tuple[AnthropicSimulator, GeminiSimulator, ResponsesSimulator]:
    """The provider routes, installed once on the session's loopback server."""
    return install(loopback_server)


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """Which shell drives the call."""
    return str(request.param)


def _usage(server: LoopbackServer, model: str, body: dict[str, Any], mode: str) -> Usage:
    server.enqueue(Reply(200, body))
    client = loopback_client(model, server.base_url, retry=RetryPolicy(attempts=1))
    return call(client, ModelRequest(model=model, messages=HI), mode).usage


def _chat_body() -> dict[str, Any]:
    """A Chat Completions reply with the usage breakdown of a reasoning model with a cache hit."""
    body = chat_completion("DONE", prompt_tokens=1486, completion_tokens=651)
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 1408, "audio_tokens": 0}
    body["usage"]["completion_tokens_details"] = {
        "reasoning_tokens": 512,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    }
    return body


def test_openai_chat_cached_and_reasoning_tokens(server: LoopbackServer, mode: str) -> None:
    """prompt_tokens_details.cached_tokens and completion_tokens_details.reasoning_tokens are kept."""
    assert _usage(server, "gpt-4o", _chat_body(), mode) == Usage(
        input_tokens=1486,
        output_tokens=651,
        total_tokens=2137,
        cached_input_tokens=1408,
        reasoning_tokens=512,
    )


def test_azure_reads_the_same_usage(server: LoopbackServer, mode: str) -> None:
    """Azure OpenAI is the Chat Completions format: the same breakdown, the same Usage."""
    usage = _usage(server, "azure/my-deployment", _chat_body(), mode)
    assert (usage.cached_input_tokens, usage.reasoning_tokens) == (1408, 512)
    assert "/openai/deployments/my-deployment/" in server.requests[-1].path


def test_openai_chat_without_details_leaves_them_unknown(server: LoopbackServer, mode: str) -> None:
    """A server that gives only the three counts (vLLM, older APIs): the breakdown is None, not 0."""
    usage = _usage(server, "gpt-4o", chat_completion("DONE"), mode)
    assert usage == Usage(input_tokens=11, output_tokens=3, total_tokens=14)


def test_responses_api_details(
    server: LoopbackServer, simulators: tuple[Any, ...], mode: str
) -> None:
    """input_tokens_details.cached_tokens and output_tokens_details.reasoning_tokens are kept."""
    body = {
        "id": "resp_usage",
        "object": "response",
        "status": "completed",
        "model": "computer-use-preview-2025-03-11",
        "output": [output_message("Done.")],
        "usage": {
            "input_tokens": 1200,
            "input_tokens_details": {"cached_tokens": 1024},
            "output_tokens": 40,
            "output_tokens_details": {"reasoning_tokens": 12},
            "total_tokens": 1240,
        },
    }
    assert _usage(server, "computer-use-preview", body, mode) == Usage(
        input_tokens=1200,
        output_tokens=40,
        total_tokens=1240,
        cached_input_tokens=1024,
        reasoning_tokens=12,
    )


def test_anthropic_cache_reads_and_writes_count_as_input(
    server: LoopbackServer, simulators: tuple[Any, ...], mode: str
) -> None:
    """input_tokens leaves the cache out; the normalised input adds reads and writes, reads are cached."""
    body = anthropic_message("DONE")
    body["usage"] = {
        "input_tokens": 50,
        "cache_creation_input_tokens": 200,
        "cache_read_input_tokens": 1800,
        "output_tokens": 30,
    }
    assert _usage(server, "claude-sonnet-4-5", body, mode) == Usage(
        input_tokens=2050,
        output_tokens=30,
        total_tokens=2080,
        cached_input_tokens=1800,
        reasoning_tokens=None,
    )


def test_anthropic_without_cache_fields_is_unchanged(
    server: LoopbackServer, simulators: tuple[Any, ...], mode: str
) -> None:
    """No prompt caching: the counts are the reply's, the cached part unknown."""
    usage = _usage(server, "claude-sonnet-4-5", anthropic_message("DONE"), mode)
    assert usage == Usage(input_tokens=21, output_tokens=4, total_tokens=25)


def test_gemini_cached_content_and_thoughts(
    server: LoopbackServer, simulators: tuple[Any, ...], mode: str
) -> None:
    """promptTokenCount includes cachedContentTokenCount; thoughtsTokenCount is output and reasoning."""
    body = gemini_reply("DONE")
    body["usageMetadata"] = {
        "promptTokenCount": 11500,
        "candidatesTokenCount": 1000,
        "totalTokenCount": 22500,
        "cachedContentTokenCount": 10000,
        "thoughtsTokenCount": 10000,
    }
    assert _usage(server, "gemini-2.5-pro", body, mode) == Usage(
        input_tokens=11500,
        output_tokens=11000,
        total_tokens=22500,
        cached_input_tokens=10000,
        reasoning_tokens=10000,
    )


@pytest.mark.parametrize(
    "details",
    [None, "many", {"cached_tokens": "7"}, {"cached_tokens": True}, [1, 2]],
)
def test_hostile_breakdowns_are_unknown_not_errors(
    server: LoopbackServer, details: object, mode: str
) -> None:
    """A breakdown that is missing, not an object, or holds a non-integer leaves the count None."""
    body = chat_completion("DONE")
    body["usage"]["prompt_tokens_details"] = details
    body["usage"]["completion_tokens_details"] = details
    usage = _usage(server, "gpt-4o", body, mode)
    assert (usage.cached_input_tokens, usage.reasoning_tokens) == (None, None)
    assert usage.input_tokens == 11


def test_anthropic_negative_cache_counts_are_ignored() -> None:
    """A proxy's nonsense (negative) cache counts neither shrink the input nor become a cached part."""
    from adapters.providers.anthropic import messages_usage

    usage = messages_usage(
        {
            "input_tokens": 5,
            "output_tokens": 1,
            "cache_read_input_tokens": -3,
            "cache_creation_input_tokens": 2,
        }
    )
    assert usage == Usage(input_tokens=7, output_tokens=1, total_tokens=8)


def _counted_bodies(count: int) -> dict[str, dict[str, Any]]:
    """Each provider's reply with every count (breakdowns too) set to `count`, by model."""
    chat = chat_completion("DONE")
    chat["usage"] = {
        "prompt_tokens": count,
        "completion_tokens": count,
        "total_tokens": count,
        "prompt_tokens_details": {"cached_tokens": count},
        "completion_tokens_details": {"reasoning_tokens": count},
    }
    responses = {
        "id": "resp_usage",
        "status": "completed",
        "output": [output_message("Done.")],
        "usage": {
            "input_tokens": count,
            "input_tokens_details": {"cached_tokens": count},
            "output_tokens": count,
            "output_tokens_details": {"reasoning_tokens": count},
            "total_tokens": count,
        },
    }
    anthropic = anthropic_message("DONE")
    anthropic["usage"] = {
        "input_tokens": count,
        "cache_creation_input_tokens": count,
        "cache_read_input_tokens": count,
        "output_tokens": count,
    }
    gemini = gemini_reply("DONE")
    gemini["usageMetadata"] = dict.fromkeys(
        (
            "promptTokenCount",
            "candidatesTokenCount",
            "totalTokenCount",
            "cachedContentTokenCount",
            "thoughtsTokenCount",
        ),
        count,
    )
    return {
        "gpt-4o": chat,
        "computer-use-preview": responses,
        "claude-sonnet-4-5": anthropic,
        "gemini-2.5-pro": gemini,
    }


@pytest.mark.parametrize("count", [MAX_TOKEN_COUNT, 10**308, 10**400, -1])
def test_counts_out_of_range_are_unreported(
    server: LoopbackServer, simulators: tuple[Any, ...], mode: str, count: int
) -> None:
    """A count no reply really holds (2**53 and past, 400 digits as JSON allows, negative) is
    None like a missing one: never an OverflowError, never an infinite cost."""
    for model, body in _counted_bodies(count).items():
        usage = _usage(server, model, body, mode)
        assert usage == Usage(), model
        assert step_cost(usage, "claude-sonnet-4-5") is None


def test_counts_just_below_the_bound_are_kept(
    server: LoopbackServer, simulators: tuple[Any, ...], mode: str
) -> None:
    """The largest count in range is read as given."""
    count = MAX_TOKEN_COUNT - 1
    usage = _usage(server, "gpt-4o", _counted_bodies(count)["gpt-4o"], mode)
    assert (usage.input_tokens, usage.cached_input_tokens) == (count, count)
