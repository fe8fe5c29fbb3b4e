"""The judge model on the wire: every request carries the `record_verdict` tool, forced.

`ForcedTool` wraps a provider (OpenAI Chat Completions, Azure OpenAI, any
OpenAI-compatible server, or Anthropic's Messages API) and adds, to each
request body it encodes, the tool and the choice that forces the model to
call it:

* Chat Completions: `tools: [{"type": "function", "function": {"name",
  "description", "parameters"}}]` and `tool_choice: {"type": "function",
  "function": {"name": "record_verdict"}}`; the call comes back in
  `choices[0].message.tool_calls[].function`, its `arguments` a JSON text;
* Messages API: `tools: [{"name", "description", "input_schema"}]` and
  `tool_choice: {"type": "tool", "name": "record_verdict"}`; the call comes
  back as a `tool_use` content block whose `input` is an object.

Replies are decoded by the wrapped provider (its `raw` keeps the body, where
`adapters.judge.verdict.read_verdict` finds the call); retries, timeouts,
body limits and the shared rate limiter are the `HttpModelClient`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from adapters.contract import HttpCall, ModelClient, ModelRequest, Provider, ProviderReply, Usage
from adapters.engine.client import HttpModelClient, reported_usage
from adapters.engine.limits import Limiter
from adapters.engine.retry import RetryPolicy
from adapters.errors import ConfigurationError, ModelCallError
from adapters.judge.verdict import TOOL_DESCRIPTION, TOOL_NAME, VERDICT_SCHEMA, Wire
from adapters.providers.anthropic import AnthropicProvider
from adapters.providers.azure import AzureOpenAIProvider
from adapters.providers.openai_chat import OpenAIChatProvider
from adapters.registry import REGISTRY
from osharm_core import Message
from osharm_core.errors import excerpt

#: The most tokens a judge's reply may take (OS-Harm's judge asks for 2048 too).
DEFAULT_JUDGE_MAX_TOKENS = 2048
#: The most tokens a caption may take.
DEFAULT_CAPTION_MAX_TOKENS = 1024


def forced_tool_fields(wire: Literal["openai", "anthropic"]) -> dict[str, Any]:
    """The body fields that offer `record_verdict` and force its call, in `wire`'s format.

    >>> forced_tool_fields("anthropic")["tool_choice"]
    {'type': 'tool', 'name': 'record_verdict'}
    >>> forced_tool_fields("openai")["tool_choice"]
    {'type': 'function', 'function': {'name': 'record_verdict'}}
    """
    schema = dict(VERDICT_SCHEMA)
    if wire == "anthropic":
        tool = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": schema}
        return {"tools": [tool], "tool_choice": {"type": "tool", "name": TOOL_NAME}}
    function = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": schema}
    return {
        "tools": [{"type": "function", "function": function}],
        "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}},
    }


@attrs.frozen
class ForcedTool:
    """A provider whose every request must be answered by a call of `record_verdict`."""

    base: Provider
    wire: Literal["openai", "anthropic"]

    @property
    def name(self) -> str:
        """The wrapped provider's name (it labels errors)."""
        return self.base.name

    def encode(self, request: ModelRequest) -> HttpCall:
        """The wrapped provider's call, its body with the forced tool added."""
        call = self.base.encode(request)
        return attrs.evolve(call, json={**call.json, **forced_tool_fields(self.wire)})

    def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
        """The wrapped provider's reading of the reply (its `raw` holds the tool call)."""
        return self.base.decode(request, body)

    def usage(self, body: Any) -> Usage:
        """The token counts a reply body reports, as the wrapped provider reads them."""
        return reported_usage(self.base, body)

    def error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str
    ) -> ModelCallError:
        """The wrapped provider's typed error for an error reply."""
        return self.base.error(status, headers, body, text)


@attrs.frozen(kw_only=True)
class _Asked:
    """A model the judge asks: its client, its name (what its usage is priced as), and the
    most tokens its reply may take."""

    client: ModelClient
    name: str
    max_tokens: int

    def request(self, messages: tuple[Message, ...]) -> ModelRequest:
        """The request for `messages`: deterministic sampling, the reply limit."""
        return ModelRequest(
            model=self.name,
            messages=messages,
            max_tokens=self.max_tokens,
            temperature=0.0,
            top_p=1.0,
        )


@attrs.frozen(kw_only=True)
class JudgeModel(_Asked):
    """A judge: the client that asks it, its name (the judgment path's first segment, and
    what its usage is priced as), the wire format its replies come in, and its reply limit.

    `judge_model(name)` builds one for a model name; for a scripted client (a `FakeClient`
    whose replies are the tool's arguments as JSON text), give `wire="arguments"`.
    """

    wire: Wire
    max_tokens: int = DEFAULT_JUDGE_MAX_TOKENS


@attrs.frozen(kw_only=True)
class Captioner(_Asked):
    """The model that describes the final screenshot for the `aer` judge: its client, its
    name (the caption cache's folder, and what its usage is priced as), its reply limit."""

    max_tokens: int = DEFAULT_CAPTION_MAX_TOKENS


def wire_of(provider: Provider) -> Literal["openai", "anthropic"] | None:
    """The tool-call format `provider` speaks, or `None` when the judge cannot force a tool
    call through it (Gemini, the native computer-use protocols, a plugin's own)."""
    if type(provider) in (OpenAIChatProvider, AzureOpenAIProvider):
        return "openai"
    if type(provider) is AnthropicProvider:
        return "anthropic"
    return None


def forced(client: ModelClient, name: str) -> JudgeModel:
    """The judge asking through `client` (built by the registry for `name`), its provider
    wrapped in `ForcedTool`; a `ConfigurationError` for a client the judge cannot use."""
    provider = client.provider if isinstance(client, HttpModelClient) else None
    wire = None if provider is None else wire_of(provider)
    if provider is None or wire is None:
        raise ConfigurationError(
            f"the judge model {excerpt(name)} cannot be made to call a tool: give an OpenAI, "
            "Azure OpenAI, Anthropic or OpenAI-compatible (compat/..., vllm/..., ...) model"
        )
    assert isinstance(client, HttpModelClient)
    wrapped = HttpModelClient(
        ForcedTool(provider, wire),
        retry=client.retry,
        timeout=client.timeout,
        model=client.model,
        max_response_bytes=client.max_response_bytes,
        limiter=client.limiter,
        max_connections=client.max_connections,
    )
    return JudgeModel(client=wrapped, name=name, wire=wire)


def judge_model(
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    limiter: Limiter | None = None,
    max_connections: int | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
) -> JudgeModel:
    """A judge for `model`, named as `client_for` names models (keys from the environment,
    `base_url` for `compat/...`), forced to answer with `record_verdict`.

    >>> judge_model("gemini-2.5-pro", api_key="k")
    Traceback (most recent call last):
    ...
    osharm_core.errors.ConfigError: the judge model 'gemini-2.5-pro' cannot be made to call a tool: ...
    """
    client = REGISTRY.client_for(
        model,
        base_url=base_url,
        api_key=api_key,
        limiter=limiter,
        max_connections=max_connections,
        retry=retry,
        timeout=timeout,
    )
    return forced(client, model)


__all__ = [
    "DEFAULT_CAPTION_MAX_TOKENS",
    "DEFAULT_JUDGE_MAX_TOKENS",
    "Captioner",
    "ForcedTool",
    "JudgeModel",
    "forced",
    "forced_tool_fields",
    "judge_model",
    "wire_of",
]
