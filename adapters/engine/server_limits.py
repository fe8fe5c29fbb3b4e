"""Request budgets at the edge: exact body sizes per provider, and servers' limit errors typed.

The pure degradation is `osharm_core.budget.fit_step`; this module gives it
the exact size of the body a client's provider would send, and turns a
server's "too large" (HTTP 413) or "at most N images" reply into a
`ServerLimitError` that says which `server_profile` to set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final

from adapters.contract import ModelClient, ModelRequest
from adapters.errors import ContextLengthError, ModelCallError, ServerLimitError
from osharm_core import AgentConfig, AgentState, Message
from osharm_core.budget import SizeOf, fit_step
from osharm_core.limits import server_limits
from osharm_core.step import StepRequest

# vLLM: "At most 1 image(s) may be provided in one request." (older) and
# "You set image=2 (or defaulted to 1) in `--limit-mm-per-prompt`, but passed 3 ..." (newer).
_AT_MOST: Final = re.compile(r"at most (\d+) image", re.IGNORECASE)
_MM_LIMIT: Final = re.compile(r"image\s*=\s*(\d+)[^\n]{0,40}limit[-_]mm[-_]per[-_]prompt", re.I)
# Groq answers 413 `rate_limit_exceeded` to one request larger than the account's tokens per
# minute ("... on tokens per minute (TPM): Limit 6000, Requested 12328, please reduce your
# message size"): no wait lets it through, and its body is not what is too large.
_PER_MINUTE: Final = re.compile(r"rate_limit_exceeded|tokens per minute", re.IGNORECASE)
_TPM_LIMIT: Final = re.compile(r"\bLimit:? (\d+)")
#: The longest number read from a server's words (digits past it are no limit anyone sets;
#: `int()` of 4,300 digits and more raises).
_MAX_DIGITS: Final = 12
#: The `server_profile` whose byte limit is a provider's own (others get nginx's hint).
_BYTE_PROFILES: Final = {"anthropic": "anthropic", "anthropic-computer": "anthropic"}


def _number(digits: str) -> int | None:
    """The number a server wrote, or None when it is too long to be a real limit.

    >>> _number("32"), _number("9" * 5000)
    (32, None)
    """
    return int(digits) if len(digits) <= _MAX_DIGITS else None


def server_limit_error(status: int, text: str, error: ModelCallError) -> ServerLimitError | None:
    """The `ServerLimitError` an error reply means, or None when it is about something else.

    >>> server_limit_error(400, "At most 1 image(s) may be provided in one request.",
    ...                    ModelCallError("x", provider="vllm")).limit
    'max_images'
    """
    where: dict[str, Any] = {
        "provider": error.provider,
        "status": status,
        "request_id": error.request_id,
    }
    match = _AT_MOST.search(text) or _MM_LIMIT.search(text)
    if match is not None and status in (400, 413, 422):
        maximum = _number(match.group(1))
        named = f"at most {maximum} image(s)" if maximum is not None else "fewer images"
        hint = "server_profile='vllm-default'" if maximum == 1 else "server_profile"
        limits = f"ServerLimits(max_images={maximum if maximum is not None else 'N'})"
        return ServerLimitError(
            f"the server accepts {named} per request: set {hint} (or {limits}), or start "
            f"vLLM with a larger --limit-mm-per-prompt ({error.message})",
            limit="max_images",
            maximum=maximum,
            **where,
        )
    if status == 413 and _PER_MINUTE.search(text):
        found = _TPM_LIMIT.search(error.message)
        maximum = _number(found.group(1)) if found else None
        return ServerLimitError(
            "the request is larger than the account's tokens-per-minute limit (HTTP 413), so "
            "no wait lets it through: set ServerLimits(max_input_tokens=N) with N below that "
            "limit less max_tokens (which the server counts too), or raise the account's "
            f"limit ({error.message})",
            limit="max_input_tokens",
            maximum=maximum,
            **where,
        )
    if status == 413 and not isinstance(error, ContextLengthError):
        profile = _BYTE_PROFILES.get(error.provider)
        hint = (
            f"server_profile={profile!r} for its documented request size"
            if profile is not None
            else "server_profile='nginx' for nginx's 1 MiB default"
        )
        return ServerLimitError(
            f"the server refused the request body as too large (HTTP 413): set {hint}, or "
            f"ServerLimits(max_bytes=N) for the server's limit ({error.message})",
            limit="max_bytes",
            **where,
        )
    return None


def body_size_of(client: ModelClient, config: AgentConfig, state: AgentState) -> SizeOf | None:
    """The exact body size a client's provider would send, when the client exposes one."""
    provider = getattr(client, "provider", None)
    encode = getattr(provider, "encode", None)
    if encode is None:
        return None

    def size_of(messages: Sequence[Message]) -> int:
        request = ModelRequest.from_config(config, tuple(messages), state.continuation)
        body = encode(request).json
        return len(json.dumps(body).encode("utf-8"))

    return size_of


def fit_request(
    config: AgentConfig, state: AgentState, step: StepRequest, size_of: SizeOf | None
) -> StepRequest:
    """`step` fitted to `config.server_profile` (unchanged without one)."""
    limits = server_limits(config.server_profile)
    if limits is None:
        return step
    return fit_step(config, state, step, limits, size_of=size_of)
