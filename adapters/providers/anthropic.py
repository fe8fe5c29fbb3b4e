"""Anthropic Messages API (`POST /v1/messages`): pure request encoding and reply decoding.

Wire rules this module applies:

- the system text goes in the top-level `system` field; the other messages
  alternate `user` / `assistant`, starting with `user` (consecutive messages of
  one role are merged; whitespace-only text blocks, which the API rejects, are
  dropped);
- images are base64 `image` blocks whose `media_type` is read from the image
  bytes themselves (PNG, JPEG, GIF, WebP), falling back to the declared one;
- `max_tokens` is always sent; `temperature` / `top_p` only as far as the model
  family accepts them (`sampling_for`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from adapters._wire import (
    ErrorBody,
    error_for_status,
    is_retryable_status,
    merged_turns,
    request_id_from,
    retry_after_seconds,
    split_system,
    token_count,
)
from adapters.contract import (
    HttpCall,
    ModelClient,
    ModelRequest,
    ProviderReply,
    Usage,
    plausible_count,
)
from adapters.errors import (
    ContextLengthError,
    ModelCallError,
    QuotaExceededError,
    ResponseDecodeError,
    RetryableError,
)
from adapters.providers._credentials import keyed_client, valid_key
from osharm_core import ImagePart, Message, TextPart

if TYPE_CHECKING:
    from adapters.registry import ClientOptions, ModelRegistry

DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
API_VERSION: Final = "2023-06-01"
#: The environment variable `client_for` reads the key from.
API_KEY_ENV: Final = "ANTHROPIC_API_KEY"

#: Which sampling parameters a model accepts: both, only temperature, or neither.
Sampling = Literal["both", "temperature", "none"]

#: A 400 about the context window: the prompt alone, or the prompt plus `max_tokens`
#: ("input length and `max_tokens` exceed context limit: 199000 + 1500 > 200000, ...").
_TOO_LONG: Final = re.compile(r"prompt is too long|exceed context limit", re.IGNORECASE)
#: A 400 `invalid_request_error` sent when the prepaid balance is spent.
_NO_CREDIT: Final = re.compile(r"credit balance is too low", re.IGNORECASE)

#: A Claude model name, or a Bedrock model id (`global.anthropic.claude-...`).
_CLAUDE: Final = re.compile(r"(?:[\w-]+\.)?(?:anthropic\.)?(claude.*)", re.DOTALL)
_MAGIC: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def _version(model: str) -> tuple[int, int] | None:
    """(major, minor) of a Claude model name, ignoring 8-digit date suffixes.

    >>> _version("claude-3-5-sonnet-20241022"), _version("claude-opus-4-20250514")
    ((3, 5), (4, 0))
    >>> _version("claude-sonnet-4-5"), _version("claude-2.1"), _version("gpt-4o")
    ((4, 5), (2, 1), None)
    >>> _version("claude-sonnet-²")  # a digit to isdigit(), not to int()
    >>> _version("global.anthropic.claude-opus-4-5-20251101-v1:0")  # a Bedrock model id
    (4, 5)
    """
    found = _CLAUDE.fullmatch(model.rsplit("/", 1)[-1].lower())
    if found is None:
        return None
    name = found.group(1)
    numbers = [t for t in re.split(r"[-.@:_]", name) if t.isascii() and t.isdigit() and len(t) <= 2]
    if not numbers:
        return None
    return int(numbers[0]), int(numbers[1]) if len(numbers) > 1 else 0


def sampling_for(model: str) -> Sampling:
    """Which of `temperature` / `top_p` the Claude family of `model` accepts.

    Up to Claude 4.0 (claude-3*, claude-3-5*, claude-3-7*, claude-opus-4,
    claude-sonnet-4) both; from 4.1 (claude-opus-4-1, claude-sonnet-4-5,
    claude-haiku-4-5, the 4.6 models) one of the two, so only temperature is
    sent; from 4.7 (claude-opus-4-7 and newer) the sampling parameters are
    gone and sending any of them is a 400. Unrecognised names get neither,
    the one choice no model rejects.

    >>> sampling_for("claude-3-7-sonnet-latest"), sampling_for("claude-haiku-4-5")
    ('both', 'temperature')
    >>> sampling_for("claude-opus-4-7"), sampling_for("claude-opus-5")
    ('none', 'none')
    """
    version = _version(model)
    if version is None:
        return "none"
    if version < (4, 1):
        return "both"
    if version < (4, 7):
        return "temperature"
    return "none"


def media_type(image: ImagePart) -> str:
    """The image's real media type, read from its first bytes; the declared one when unknown.

    >>> media_type(ImagePart("/9j/4AAQSkZJRg==", media_type="image/png"))
    'image/jpeg'
    """
    head = base64.b64decode(image.data[:24] + "=" * (-len(image.data[:24]) % 4), validate=False)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return image.media_type


def _block(part: TextPart | ImagePart) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text.strip() else None
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type(part), "data": part.data},
    }


def render_messages(messages: Iterable[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The `system` text and the alternating `messages` list for `messages`.

    >>> from osharm_core import Message, TextPart
    >>> render_messages([Message("system", (TextPart("s"),)), Message("user", (TextPart("a"),)),
    ...                  Message("user", (TextPart(" "), TextPart("b")))])
    ('s', [{'role': 'user', 'content': [{'type': 'text', 'text': 'a'}, {'type': 'text', 'text': 'b'}]}])
    """
    system, others = split_system(messages)
    turns = merged_turns(others, _block, parts_key="content")
    if turns and turns[0]["role"] != "user":
        # The API wants the first turn from the user; say so rather than drop the history.
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(continued)"}]})
    return system, turns


def messages_call(
    request: ModelRequest,
    system: str,
    turns: list[dict[str, Any]],
    *,
    url: str,
    api_key: str,
    sampling: Sampling | None,
    tools: list[dict[str, Any]] | None = None,
    beta: str | None = None,
) -> HttpCall:
    """A Messages API call: the rendered `system` and `turns`, the request's limits and the
    family's sampling (`sampling` overrides `sampling_for`), with `tools` and an
    `anthropic-beta` header when given."""
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": turns,
    }
    if tools is not None:
        body["tools"] = tools
    if system:
        body["system"] = system
    chosen = sampling or sampling_for(request.model)
    if chosen in ("both", "temperature"):
        body["temperature"] = request.temperature
    if chosen == "both":
        body["top_p"] = request.top_p
    headers = {"x-api-key": api_key, "anthropic-version": API_VERSION}
    if beta is not None:
        headers["anthropic-beta"] = beta
    headers["content-type"] = "application/json"
    return HttpCall(method="POST", url=url, headers=headers, json=body)


@attrs.frozen(kw_only=True)
class AnthropicProvider:
    """Claude over the Messages API. Pure: the engine in `adapters.engine.client` does the I/O.

    `base_url` is the host root (default `https://api.anthropic.com`);
    `sampling` overrides the per-family table of `sampling_for`.
    """

    api_key: str = attrs.field(repr=False, validator=valid_key)
    base_url: str | None = None
    sampling: Sampling | None = None
    name = "anthropic"

    @property
    def url(self) -> str:
        """The Messages endpoint."""
        return (self.base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1/messages"

    def encode(self, request: ModelRequest) -> HttpCall:
        """The Messages API call for `request`."""
        system, turns = render_messages(request.messages)
        return messages_call(
            request, system, turns, url=self.url, api_key=self.api_key, sampling=self.sampling
        )

    def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
        """The reply text (all `text` blocks joined, possibly none), usage, model and stop reason.

        A `refusal` stop reason is kept as the reply's `refusal`.
        """
        if not isinstance(body, Mapping) or not isinstance(body.get("content"), list):
            raise ResponseDecodeError(
                "reply has no content list", provider=self.name, model=request.model
            )
        texts = [
            b["text"]
            for b in body["content"]
            if isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        reason = body.get("stop_reason")
        reason = reason if isinstance(reason, str) and reason else None
        model = body.get("model")
        return ProviderReply(
            text="".join(texts),
            usage=self.usage(body),
            model=model if isinstance(model, str) else request.model,
            raw=body,
            finish_reason=reason,
            refusal=reason if reason == "refusal" else None,
        )

    def usage(self, body: Any) -> Usage:
        """The token counts of a reply body (see `body_usage`), decodable or not."""
        return body_usage(body)

    def error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str
    ) -> ModelCallError:
        """The typed error for a non-2xx reply: overload and rate limits retry, a long prompt
        falls back, a used-up balance or spend limit is a `QuotaExceededError`; a 413 (the
        request's bytes) is left to the engine, which makes it a `ServerLimitError`."""
        parsed = ErrorBody.read(body, status, text, label_field="type")
        described = parsed.described
        body_id = body.get("request_id") if isinstance(body, Mapping) else None
        where: dict[str, Any] = {
            "provider": self.name,
            "request_id": request_id_from(headers)
            or (body_id if isinstance(body_id, str) else None),
        }
        if status == 400 and _TOO_LONG.search(parsed.message):
            return ContextLengthError(described, status=status, **where)
        details = parsed.detail.get("details")
        spend_limit = (
            isinstance(details, Mapping)
            and details.get("error_code") == "enforced_spend_limit_reached"
        )
        if (
            spend_limit
            or status == 402
            or parsed.label == "billing_error"
            or _NO_CREDIT.search(parsed.message)
        ):
            return QuotaExceededError(described, status=status, **where)
        if is_retryable_status(status) or parsed.label in ("overloaded_error", "api_error"):
            return RetryableError(
                described, retry_after=retry_after_seconds(headers), status=status, **where
            )
        return error_for_status(status, described, **where)


def body_usage(body: object) -> Usage:
    """The normalised `usage` of a Messages API reply body (see `messages_usage`)."""
    return messages_usage(body.get("usage") if isinstance(body, Mapping) else None)


def messages_usage(usage: object) -> Usage:
    """A Messages API `usage` normalised: input counts cache reads and cache writes too.

    Anthropic's `input_tokens` leaves out the tokens read from the prompt
    cache (`cache_read_input_tokens`) and written to it
    (`cache_creation_input_tokens`); both are prompt tokens, so they are added
    to `input_tokens`, and the reads are the cached part. Cache writes are
    priced as ordinary input (osharm-core never asks for cache writes, so they
    are 0 unless a proxy adds `cache_control`). Thinking is inside `output_tokens`.
    """
    inp = token_count(usage, "input_tokens")
    out = token_count(usage, "output_tokens")
    read, written = (
        count if count is not None and count >= 0 else None
        for count in (
            token_count(usage, "cache_read_input_tokens"),
            token_count(usage, "cache_creation_input_tokens"),
        )
    )
    if inp is not None:
        inp = plausible_count(inp + (read or 0) + (written or 0))
    total = plausible_count(inp + out) if inp is not None and out is not None else None
    return Usage(input_tokens=inp, output_tokens=out, total_tokens=total, cached_input_tokens=read)


# --- registration ------------------------------------------------------------------


def client_factory(provider: Callable[..., Any]) -> Callable[[ClientOptions], ModelClient]:
    """A registry factory building `provider(api_key=, base_url=)` from Anthropic's settings."""
    return keyed_client(
        provider,
        vendor="Anthropic",
        key_envs=(API_KEY_ENV,),
        url_envs=("ANTHROPIC_BASE_URL",),
        default_url=DEFAULT_BASE_URL,
    )


_client = client_factory(AnthropicProvider)


def register(registry: ModelRegistry) -> None:
    """`anthropic/<model>` and bare `claude-*` names."""
    registry.register_scheme(
        "anthropic", _client, description="anthropic/<model> (ANTHROPIC_API_KEY)", needs=API_KEY_ENV
    )
    registry.register_family(
        r"claude-",
        "anthropic",
        description="claude-*",
        examples=(
            "claude-opus-4-1",
            "claude-sonnet-4-5",
            "claude-haiku-4-5",
            "claude-sonnet-4-6",
            "claude-opus-4-7",
            "claude-sonnet-5-5",
            "claude-opus-5-5",
            "claude-3-7-sonnet-latest",
        ),
    )


__all__ = [
    "API_KEY_ENV",
    "API_VERSION",
    "DEFAULT_BASE_URL",
    "AnthropicProvider",
    "Sampling",
    "media_type",
    "render_messages",
    "sampling_for",
]
