"""The HTTP call engine: client shells over httpx in layers, retries, the sharded async transport, bounded reply bodies, shared rate limits and their turns, pool sizes, request sizes and servers' limit errors."""

from adapters.engine.body import DEFAULT_MAX_RESPONSE_BYTES, BodyReader
from adapters.engine.client import DEFAULT_LIMITS, DEFAULT_TIMEOUT, HttpModelClient, call_flow
from adapters.engine.limits import Turn, turn
from adapters.engine.pools import (
    DEFAULT_MAX_CONNECTIONS,
    MODEL_CALL_CPU_SECONDS,
    calls_in_flight,
    connections_for,
)
from adapters.engine.retry import NO_RETRIES, UNREACHABLE_RETRIES, RetryPolicy
from adapters.engine.transport import ShardedAsyncTransport

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_TIMEOUT",
    "MODEL_CALL_CPU_SECONDS",
    "NO_RETRIES",
    "UNREACHABLE_RETRIES",
    "BodyReader",
    "HttpModelClient",
    "RetryPolicy",
    "ShardedAsyncTransport",
    "Turn",
    "call_flow",
    "calls_in_flight",
    "connections_for",
    "turn",
]
