"""OpenAI Chat Completions, and every server that speaks it (vLLM, Ollama, Together, Groq, ...).

Pure: `encode` builds the `POST {base_url}/chat/completions` call, `decode`
reads `choices[0].message.content` and the token usage, `error` turns an
error reply into a typed error. The body and reply helpers are shared with
the Azure provider, which speaks the same format on a different path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from adapters._wire import (
    detail_count,
    error_for_status,
    error_text,
    fallback_message,
    request_id_from,
    token_count,
)
from adapters.contract import HttpCall, ModelClient, ModelRequest, ProviderReply, Usage
from adapters.errors import (
    ContextLengthError,
    ModelCallError,
    QuotaExceededError,
    ResponseDecodeError,
)
from adapters.providers._credentials import (
    named_model,
    pick_key,
    require_key,
    require_url,
    valid_key,
)
from adapters.providers._read import dig, items, obj, objects, text
from osharm_core import render_openai_chat
from osharm_core.errors import number_excerpt

if TYPE_CHECKING:
    from adapters.registry import ClientOptions, ModelRegistry

DEFAULT_OPENAI_BASE_URL: Final = "https://api.openai.com/v1"
#: The environment variable `client_for` reads the key from.
API_KEY_ENV: Final = "OPENAI_API_KEY"

_O_SERIES = re.compile(r"o\d")
_CONTEXT_WORDS = ("maximum context length", "context length", "context window", "too many tokens")


def is_o_series(model: str) -> bool:
    """Whether `model` is an OpenAI reasoning model (`o1`, `o3-mini`, `o4-mini`, ...).

    These reject `max_tokens`, `top_p` and `temperature`, so they are left out.

    >>> [is_o_series(m) for m in ("o1", "o3-mini", "o4-mini-2025-04-16", "gpt-4o", "omni")]
    [True, True, True, False, False]
    """
    return _O_SERIES.match(model.rsplit("/", 1)[-1]) is not None


# The GPT-5 family's reasoning models (gpt-5, -mini, -nano, gpt-5.1, gpt-5.2-pro, gpt-5-codex,
# dated snapshots, ...): OpenAI answers 400 to `max_tokens` ("Use 'max_completion_tokens'
# instead") and to a `temperature` other than 1. The `*-chat*` models are chat models that take
# the sampling parameters (gpt-5-chat-latest accepts temperature=0).
_GPT5_REASONING = re.compile(r"gpt-5(?:$|[.-])(?!.*chat)")


def is_gpt5_reasoning(model: str) -> bool:
    """Whether `model` is a reasoning model of the GPT-5 family (not a `*-chat*` one).

    >>> [is_gpt5_reasoning(m) for m in ("gpt-5", "openai/gpt-5-mini", "gpt-5.2-pro", "gpt-5-chat-latest")]
    [True, True, True, False]
    >>> [is_gpt5_reasoning(m) for m in ("gpt-50", "gpt-4o", "gpt-5.1-chat-latest")]
    [False, False, False]
    """
    return _GPT5_REASONING.match(model.rsplit("/", 1)[-1].lower()) is not None


def leaves_out_sampling(model: str) -> bool:
    """Whether the Chat Completions body for `model` leaves out `max_tokens`, `top_p` and
    `temperature`: the o-series (as the reference does) and the GPT-5 reasoning models, which
    refuse them; their reply length is left to the server, as the o-series' is."""
    return is_o_series(model) or is_gpt5_reasoning(model)


def chat_body(request: ModelRequest, *, include_model: bool = True) -> dict[str, Any]:
    """The Chat Completions JSON body for `request` (the reference's message shape)."""
    body: dict[str, Any] = {}
    if include_model:
        body["model"] = request.model
    body["messages"] = render_openai_chat(request.messages, request.model)
    if not leaves_out_sampling(request.model):
        body["max_tokens"] = request.max_tokens
        body["top_p"] = request.top_p
        body["temperature"] = request.temperature
    return body


def _content_text(content: object) -> str | None:
    """A message's content: a string, or the text parts of a list joined."""
    if isinstance(content, str):
        return content
    parts = objects(content)
    return "".join(
        t for p in parts if p.get("type") in ("text", "output_text") and (t := text(p.get("text")))
    )


def chat_usage(body: object) -> Usage:
    """Token counts from a Chat Completions reply's `usage` (missing ones are `None`).

    `prompt_tokens` already counts the cached part
    (`prompt_tokens_details.cached_tokens`) and `completion_tokens` the
    reasoning part (`completion_tokens_details.reasoning_tokens`).
    """
    usage = obj(body).get("usage")
    return Usage(
        input_tokens=token_count(usage, "prompt_tokens"),
        output_tokens=token_count(usage, "completion_tokens"),
        total_tokens=token_count(usage, "total_tokens"),
        cached_input_tokens=detail_count(usage, "prompt_tokens_details", "cached_tokens"),
        reasoning_tokens=detail_count(usage, "completion_tokens_details", "reasoning_tokens"),
    )


def decode_chat(provider: str, request: ModelRequest, body: Any) -> ProviderReply:
    """The reply text, usage and model of a Chat Completions reply.

    The text is `choices[0].message.content` (a string, or a list of text
    parts joined). A refusal (`message.refusal`) with no content is returned
    as the text, so a safety benchmark sees it, and kept in `refusal` (as is a
    `content_filter` finish). A choice with no text is an empty reply, with
    its `finish_reason`; no choices at all is a `ResponseDecodeError` (not
    retried), unless the body is an error object whose `code` is an HTTP
    error status: OpenRouter sends an error that happens after the model
    started as HTTP 200 with `{"error": {"code": 502, "message": ...}}`, and
    that is the typed error an HTTP reply with that status would be (see
    `embedded_error`).
    """

    def fail(why: str) -> ResponseDecodeError:
        return ResponseDecodeError(why, provider=provider, status=200, model=request.model)

    choices = items(obj(body).get("choices"))
    if not choices:
        raise embedded_error(provider, obj(body)) or fail("reply has no choices")
    message = dig(choices, 0, "message")
    if not isinstance(message, Mapping):
        raise fail("first choice has no message")
    reason = text(dig(choices, 0, "finish_reason"))
    refusal = text(message.get("refusal"))
    return ProviderReply(
        text=_content_text(message.get("content")) or refusal or "",
        usage=chat_usage(body),
        model=text(body.get("model")) or request.model,
        raw=body,
        finish_reason=reason,
        refusal=refusal if refusal is not None or reason != "content_filter" else reason,
    )


def error_fields(body: Any) -> tuple[str | None, str | None, str | None]:
    """`(message, type, code)` of an OpenAI-style `{"error": {...}}` body (or a bare string
    error), each cut as `error_text` cuts it."""
    error = obj(body).get("error")
    if isinstance(error, str):
        return error_text(error), None, None
    if not isinstance(error, Mapping):
        message = text(obj(body).get("message"))
        return (error_text(message) if message else None), None, None

    def field(key: str) -> str | None:
        value = error.get(key)
        if isinstance(value, bool) or not isinstance(value, str | int):
            return None
        return error_text(value) if isinstance(value, str) else number_excerpt(value)

    return field("message"), field("type"), field("code")


def chat_error(
    provider: str, status: int, headers: Mapping[str, str], body: Any, text: str
) -> ModelCallError:
    """The typed error for an OpenAI-style error reply.

    `context_length_exceeded` (or a message about the maximum context length,
    as vLLM and others word it) is a `ContextLengthError`;
    `insufficient_quota` a `QuotaExceededError`; otherwise the status decides.
    """
    message, kind, code = error_fields(body)
    if message is None:
        message = fallback_message(status, text)
    rid = request_id_from(headers)
    if code == "context_length_exceeded" or any(w in message.lower() for w in _CONTEXT_WORDS):
        return ContextLengthError(message, provider=provider, status=status, request_id=rid)
    if code == "insufficient_quota" or kind == "insufficient_quota":
        return QuotaExceededError(message, provider=provider, status=status, request_id=rid)
    return error_for_status(status, message, provider=provider, request_id=rid)


def embedded_error(provider: str, body: Mapping[str, Any]) -> ModelCallError | None:
    """The typed error of a 200 reply whose body is an error with an HTTP error `code`, or None.

    The error is the one `chat_error` gives an HTTP reply of that status (5xx and
    429 retried, others typed), its message kept and marked as sent with HTTP 200.

    >>> embedded_error("openrouter", {"error": {"code": 502, "message": "upstream down"}})
    RetryableError('upstream down (error 502 in an HTTP 200 reply)')
    >>> embedded_error("openrouter", {"error": {"code": "oops", "message": "x"}}) is None
    True
    """
    code = dig(body, "error", "code")
    if isinstance(code, bool) or not isinstance(code, int) or not 400 <= code <= 599:
        return None
    typed = chat_error(provider, code, {}, body, "")
    typed.message = f"{typed.message} (error {code} in an HTTP 200 reply)"
    typed.args = (typed.message,)
    typed.status = 200
    return typed


class ChatCompletionsReplies:
    """`decode` and `error` for providers whose replies are Chat Completions replies.

    Mixed into `OpenAIChatProvider` and `AzureOpenAIProvider`, which differ
    only in how they address the request; `name` labels errors.
    """

    __slots__ = ()
    name: str

    def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
        """The text of `choices[0]`, the usage and the answering model (see `decode_chat`)."""
        return decode_chat(self.name, request, body)

    def usage(self, body: Any) -> Usage:
        """The token counts of a reply body (see `chat_usage`), decodable or not."""
        return chat_usage(body)

    def error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str
    ) -> ModelCallError:
        """The typed error for an error reply (see `chat_error`)."""
        return chat_error(self.name, status, headers, body, text)


@attrs.frozen(kw_only=True)
class OpenAIChatProvider(ChatCompletionsReplies):
    """OpenAI Chat Completions (`base_url` includes `/v1`); also any OpenAI-compatible server.

    `api_key` may be `None` for local servers that take none (no
    `Authorization` header is sent then). `name` labels errors and logs.
    """

    base_url: str = DEFAULT_OPENAI_BASE_URL
    api_key: str | None = attrs.field(default=None, repr=False, validator=valid_key)
    name: str = "openai"

    def encode(self, request: ModelRequest) -> HttpCall:
        """`POST {base_url}/chat/completions` with a bearer key and the chat body."""
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return HttpCall(
            method="POST",
            url=f"{self.base_url.rstrip('/')}/chat/completions",
            headers=headers,
            json=chat_body(request),
        )


# --- registration ------------------------------------------------------------------


def _openai(options: ClientOptions) -> ModelClient:
    named_model(options)
    key = require_key(options.api_key, (API_KEY_ENV,), provider="OpenAI")
    base = require_url(
        options.base_url, ("OPENAI_BASE_URL",), what="OpenAI", default=DEFAULT_OPENAI_BASE_URL
    )
    if options.model.strip().startswith("computer-use-preview"):
        from adapters.providers.responses import ResponsesProvider  # it builds on this module

        return options.http_client_for(ResponsesProvider(api_key=key, base_url=base))
    return options.http_client_for(OpenAIChatProvider(base_url=base, api_key=key))


@attrs.frozen
class CompatServer:
    """An OpenAI-compatible service reachable by its own prefix (`together/<model>`, ...).

    `base_url` is its documented default (`None`: the caller must give one);
    `key_envs` are read for the key, which is required when `key_required`.
    """

    prefix: str
    base_url: str | None
    key_envs: tuple[str, ...] = ()
    key_required: bool = False
    label: str = ""

    def __call__(self, options: ClientOptions) -> ModelClient:
        """Build the chat client for this server."""
        model = named_model(options)
        label = self.label or self.prefix
        base = require_url(options.base_url, (), what=label, default=self.base_url)
        if self.key_required:
            key: str | None = require_key(options.api_key, self.key_envs, provider=label)
        else:
            key = pick_key(options.api_key, self.key_envs, provider=label)
        provider = OpenAIChatProvider(base_url=base, api_key=key, name=self.prefix)
        return options.http_client_for(provider, model=model)


#: OpenAI-compatible services with a prefix of their own; `compat/` takes any base URL.
COMPAT_SERVERS: Final = (
    CompatServer("compat", None, label="OpenAI-compatible server"),
    CompatServer(
        "together", "https://api.together.ai/v1", ("TOGETHER_API_KEY",), True, "Together AI"
    ),
    CompatServer("groq", "https://api.groq.com/openai/v1", ("GROQ_API_KEY",), True, "Groq"),
    CompatServer(
        "openrouter", "https://openrouter.ai/api/v1", ("OPENROUTER_API_KEY",), True, "OpenRouter"
    ),
    CompatServer(
        "dashscope",
        "https://dashscope.aliyuncs.com/compatible-mode/v1",
        ("DASHSCOPE_API_KEY",),
        True,
        "DashScope (compatible mode)",
    ),
    CompatServer("ollama", "http://localhost:11434/v1", ("OLLAMA_API_KEY",), False, "Ollama"),
    CompatServer("vllm", "http://localhost:8000/v1", ("VLLM_API_KEY",), False, "vLLM"),
    CompatServer(
        "llamacpp", "http://localhost:8080/v1", ("LLAMACPP_API_KEY",), False, "llama.cpp server"
    ),
)


def register(registry: ModelRegistry) -> None:
    """`openai/<model>`, the OpenAI-compatible services, and the OpenAI name families."""
    registry.register_scheme(
        "openai", _openai, description="openai/<model> (OPENAI_API_KEY)", needs="OPENAI_API_KEY"
    )
    for server in COMPAT_SERVERS:
        keys = " or ".join(server.key_envs)
        if server.prefix == "compat":
            what = "compat/<model> (base_url=... required; api_key optional)"
            needs = "base_url=...; api_key optional"
        elif server.key_required:
            what = f"{server.prefix}/<model> ({server.base_url}; {keys})"
            needs = keys
        else:
            what = f"{server.prefix}/<model> ({server.base_url}; {keys}, optional)"
            needs = f"a local server; {keys} optional"
        registry.register_scheme(server.prefix, server, description=what, needs=needs)
    registry.register_family(
        r"gpt-", "openai", description="gpt-*", examples=("gpt-4o", "gpt-4o-mini", "gpt-4.1")
    )
    registry.register_family(
        r"chatgpt-", "openai", description="chatgpt-*", examples=("chatgpt-4o-latest",)
    )
    registry.register_family(
        r"o\d",
        "openai",
        description="o<digit>* (o1, o3-mini, o4-mini, ...)",
        examples=("o1", "o3", "o3-mini", "o4-mini"),
    )
    registry.register_family(
        r"computer-use-preview",
        "openai",
        description="computer-use-preview* (Responses API)",
        examples=("computer-use-preview",),
        computer_use=True,
    )
