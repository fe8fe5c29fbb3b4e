"""The model-client contract: requests, responses, errors, and the provider seam.

A *provider* is pure: it turns a `ModelRequest` into an `HttpCall` and an HTTP
reply into a `ProviderReply` (or a typed `ModelCallError`). Clients drive a
provider over httpx, adding retries, timeouts and the context-length fallback,
once for both the sync and the async path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from osharm_core import AgentConfig, Continuation, Message, OsharmError


def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class ModelRequest:
    """One model call: the model name, the neutral messages, the sampling parameters.

    `continuation` carries a stateful provider's position (the Responses API's
    `previous_response_id` and pending `computer_call`s); `action_space` tells
    providers that return actions themselves (computer-use-preview) which
    vocabulary to convert them into.
    """

    model: str
    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    max_tokens: int = 1500
    top_p: float = 0.9
    temperature: float = 0.5
    action_space: str = "pyautogui"
    continuation: Continuation | None = None

    @classmethod
    def from_config(
        cls,
        config: AgentConfig,
        messages: tuple[Message, ...],
        continuation: Continuation | None = None,
    ) -> ModelRequest:
        """The request an agent configured by `config` sends with `messages`."""
        return cls(
            model=config.model,
            messages=messages,
            max_tokens=config.max_tokens,
            top_p=config.top_p,
            temperature=config.temperature,
            action_space=config.action_space,
            continuation=continuation,
        )


@attrs.frozen(kw_only=True)
class Usage:
    """Token counts as the provider reported them (`None` where it did not)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None


@attrs.frozen(kw_only=True)
class ModelResponse:
    """What a model call brought back.

    `text` is the reply to parse; `raw` the decoded JSON of the last HTTP reply;
    `tries` how many HTTP attempts it took in all; `context_fallback` whether
    the shortened retry (system + latest user message) produced it;
    `continuation` where a stateful provider left off (Responses API).
    """

    text: str
    usage: Usage = Usage()
    model: str
    tries: int = 1
    raw: Mapping[str, Any] = attrs.field(factory=dict, repr=False)
    context_fallback: bool = False
    continuation: Continuation | None = None


@runtime_checkable
class ModelClient(Protocol):
    """Anything that can answer a `ModelRequest`, synchronously and asynchronously."""

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Call the model and wait for its reply."""
        ...

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        """Call the model without blocking the event loop."""
        ...


@attrs.frozen(kw_only=True)
class HttpCall:
    """A fully described HTTP request, built without I/O (headers may hold secrets: never log them)."""

    method: str
    url: str
    headers: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    json: Any = attrs.field(default=None, repr=False)


@attrs.frozen(kw_only=True)
class ProviderReply:
    """A successful reply, decoded by a provider."""

    text: str
    usage: Usage = Usage()
    model: str
    raw: Mapping[str, Any] = attrs.field(factory=dict, repr=False)
    continuation: Continuation | None = None


class ModelCallError(OsharmError):
    """A model call failed. Carries the provider, HTTP status, provider message and request id.

    Never holds an API key: messages are built from the provider's error body only.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        request_id: str | None = None,
        model: str | None = None,
        tries: int = 1,
    ) -> None:
        self.message = message
        self.provider = provider
        self.status = status
        self.request_id = request_id
        self.model = model
        self.tries = tries
        super().__init__(message)

    def __str__(self) -> str:
        where = f"{self.provider}" + (f" HTTP {self.status}" if self.status is not None else "")
        rid = f" (request id {self.request_id})" if self.request_id else ""
        return f"{where}: {self.message}{rid}"


class RetryableError(ModelCallError):
    """Rate limit, server error, overload, timeout, connection or TLS failure: worth another try."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        self.retry_after = retry_after
        super().__init__(message, **kwargs)


class BadRequestError(ModelCallError):
    """HTTP 400: retried only when the retry policy says so (the reference retries it)."""


class ContextLengthError(ModelCallError):
    """The prompt is longer than the model's context window."""


class AuthenticationError(ModelCallError):
    """The key is missing, wrong, or lacks permission (401 / 403)."""


class ResponseDecodeError(ModelCallError):
    """The provider answered with something we cannot read as a reply."""


class ConfigurationError(OsharmError, ValueError):
    """A client cannot be built: unknown model name, missing key, bad base URL."""


class Provider(Protocol):
    """The pure half of an adapter: request encoding and reply decoding for one wire format."""

    name: str

    def encode(self, request: ModelRequest) -> HttpCall:
        """The HTTP call that asks the model for `request`."""
        ...

    def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
        """The reply in a 2xx JSON `body`; raises `ResponseDecodeError` when there is none."""
        ...

    def error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str
    ) -> ModelCallError:
        """The typed error for a non-2xx reply (`body` is the decoded JSON or None, `text` the raw text)."""
        ...
