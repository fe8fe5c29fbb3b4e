"""The model-client contract: requests, responses, and the provider seam.

A *provider* is pure: it turns a `ModelRequest` into an `HttpCall` and an HTTP
reply into a `ProviderReply` (or a typed `ModelCallError`, see
`adapters.errors`). Clients (`adapters.engine`) drive a provider over httpx,
adding retries, timeouts and the context-length fallback, once for both the
sync and the async path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, Protocol, runtime_checkable

import attrs

from adapters.errors import (
    ModelCallError,
)
from osharm_core import AgentConfig, Continuation, CoordinateFrame, Message
from osharm_core.errors import excerpt


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


#: Token counts are read from 0 up to below this (2**53, past which floats skip integers); a
#: provider's count outside that range is nonsense and read as unreported (`None`).
MAX_TOKEN_COUNT: Final = 2**53


def plausible_count(value: int | None) -> int | None:
    """`value` when it is a token count in range (0 to `MAX_TOKEN_COUNT`), else None.

    >>> plausible_count(7), plausible_count(-1), plausible_count(10**400), plausible_count(None)
    (7, None, None, None)
    """
    return value if value is not None and 0 <= value < MAX_TOKEN_COUNT else None


@attrs.frozen(kw_only=True)
class Usage:
    """Token counts as the provider reported them (`None` where it did not).

    Normalised across providers: `input_tokens` is every prompt token,
    cached ones included (`cached_input_tokens` is the part served from a
    prompt cache); `output_tokens` is every generated token, hidden
    reasoning included (`reasoning_tokens` is that part). Anthropic reports
    cache reads and writes beside `input_tokens`, so its provider adds them in.
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None


@attrs.frozen(kw_only=True)
class ModelResponse:
    """What a model call brought back.

    `text` is the reply to parse; `raw` the decoded JSON of the last HTTP reply;
    `tries` how many HTTP attempts it took in all; `context_fallback` whether
    the shortened retry (system + latest user message) produced it;
    `continuation` where a stateful provider left off (Responses API).
    `finish_reason` is why the model stopped, in the provider's own words
    (`stop`, `length`, `end_turn`, `MAX_TOKENS`, ...), when it says;
    `refusal` is set when the provider declared a refusal: its refusal text,
    or the stop reason that means one (`refusal`, `content_filter`, `SAFETY`,
    ...). An empty `text` is a reply like any other (the model said nothing).
    `prepaid` is true only for a recorded reply a fork or a continued task
    replays (`ForkClient`): the run that recorded it paid for it, so it adds
    nothing to usage totals or budget caps. Nothing a server sends can set it.
    `frame` is set only on a recorded reply a replay gives back (`ReplayClient`):
    the coordinate frame it was written in, or `"unscaled"` (screen pixels),
    which the agent reads it in whatever frame its own request had; `None` (a
    live reply, a script that states no frame) reads it in the request's frame.
    `billed` holds the earlier tries of the call that came with a 2xx status but
    gave no reply (a body cut off and retried, an error sent as HTTP 200): each
    one's `Usage` as far as its body reported it (see `ModelCallError.billed`).
    """

    text: str
    usage: Usage = Usage()
    model: str
    tries: int = 1
    billed: tuple[Usage, ...] = ()
    raw: Mapping[str, Any] = attrs.field(factory=dict, repr=False)
    context_fallback: bool = False
    continuation: Continuation | None = None
    finish_reason: str | None = None
    refusal: str | None = None
    prepaid: bool = False
    frame: CoordinateFrame | Literal["unscaled"] | None = attrs.field(default=None)

    @frame.validator
    def _known_frame(self, _: attrs.Attribute[object], value: object) -> None:
        if not (value is None or value == "unscaled" or isinstance(value, CoordinateFrame)):
            raise TypeError(
                f"ModelResponse.frame is a CoordinateFrame, 'unscaled' or None; got {excerpt(value)}"
            )


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
    """A successful reply, decoded by a provider (`text` may be empty; see `ModelResponse`)."""

    text: str
    usage: Usage = Usage()
    model: str
    raw: Mapping[str, Any] = attrs.field(factory=dict, repr=False)
    continuation: Continuation | None = None
    finish_reason: str | None = None
    refusal: str | None = None


@runtime_checkable
class ReadsUsage(Protocol):
    """A provider that reads a 2xx body's token usage apart from decoding it, so a reply it
    cannot decode is still charged what the body reported (every shipped provider does;
    another provider's undecodable replies are charged an estimate)."""

    def usage(self, body: Any) -> Usage:
        """The token counts a 2xx JSON `body` reports (`Usage()` when it reports none); never raises."""
        ...


class Provider(Protocol):
    """The pure half of an adapter: request encoding and reply decoding for one wire format."""

    @property
    def name(self) -> str:
        """A short label for errors and logs (`openai`, `anthropic`, ...)."""
        ...

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
