"""Answers of an OSWorld VM's server, read within a size limit whatever the server sends.

A desktop can be hostile too (a task can make its server misbehave): every
answer is streamed through the model client's `BodyReader`, so a body past
`limit` bytes, declared or not, compressed or not, stops there instead of
filling memory; the whole exchange, headers included, ends by its deadline
however slowly they trickle, and with the thread's `Cutoff` (see
`adapters.engine.deadline`); every failure is an `EnvironmentFailure`
naming the call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import IO, Any, Final, TypeVar

import httpx

from adapters.engine.body import BodyReader
from adapters.engine.deadline import cut_short, stream_until
from adapters.errors import (
    DeadlineExceededError,
    EnvironmentFailure,
    ModelCallError,
    ResponseTooLargeError,
)
from osharm_core import ConfigError
from osharm_core.errors import excerpt, is_finite_number

_T = TypeVar("_T")

#: The largest answer accepted from a VM's server (a 4K screenshot is ~20 MB): 64 MiB.
DEFAULT_MAX_ANSWER_BYTES: Final = 64 * 1024 * 1024
#: How long OSWorld's server lets a command run before it answers 500 (`/execute`,
#: `/setup/execute`, and the command of `/setup/execute_with_verification`).
COMMAND_SECONDS: Final = 120.0
#: How much longer than the server may take a command's answer is awaited.
COMMAND_MARGIN: Final = 30.0
#: The most one answer of a VM's server may take in all, however it trickles in (its
#: commands run up to `COMMAND_SECONDS` on the VM).
ANSWER_SECONDS: Final = 180.0
#: The most a download or a screen recording may take in all (1 GiB at ~2 MB/s).
TRANSFER_SECONDS: Final = 600.0


def answer_seconds(timeout: float) -> float:
    """How long an answer may take in all when its first byte may take `timeout` seconds:
    `ANSWER_SECONDS`, or `timeout` and a minute to arrive when that is longer."""
    return max(ANSWER_SECONDS, timeout + 60)


def outlasting_commands(timeout: httpx.Timeout, *, then: float = 0.0) -> httpx.Timeout:
    """`timeout` with a read timeout longer than the server may take to answer a command it
    lets run `COMMAND_SECONDS` and then waits `then` seconds more for (a verification), so a
    command that overruns gets the server's answer (a 500, reported) rather than a read
    timeout (no answer, which stops the run). A longer read timeout is kept; none stays none.

    >>> outlasting_commands(httpx.Timeout(120.0), then=10).read
    160.0
    """
    read = timeout.read
    if read is not None and read <= COMMAND_SECONDS + then:
        read = COMMAND_SECONDS + then + COMMAND_MARGIN
    return httpx.Timeout(connect=timeout.connect, read=read, write=timeout.write, pool=timeout.pool)


def seconds_limit(
    name: str, value: object, *, high: float = math.inf, above_zero: bool = False
) -> float:
    """`value` as seconds when it is a finite number in 0..`high` (above 0 with
    `above_zero`), else a `ConfigError` naming `name` and the range."""
    seconds = float(value) if is_finite_number(value) else math.nan  # type: ignore[arg-type]
    low_ok = seconds > 0 if above_zero else seconds >= 0
    if not (low_ok and seconds <= high and math.isfinite(seconds)):
        if high == math.inf:
            span = "above 0" if above_zero else "of 0 or more"
        else:
            span = f"in (0, {high:g}]" if above_zero else f"in 0..{high:g}"
        raise ConfigError(f"{name} must be a number of seconds {span}; got {excerpt(value)}")
    return seconds


class VmUnanswered(EnvironmentFailure):
    """The VM's server gave no answer; `sent` is False when the request never reached it
    (refused or timed-out connection), so trying again cannot run anything twice."""

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unanswered, (str(self), self.sent))


def _unanswered(message: str, sent: bool) -> VmUnanswered:
    return VmUnanswered(message, sent=sent)


def _read(
    response: httpx.Response,
    *,
    limit: int,
    deadline: float,
    setting: str,
    sink: Callable[[bytes], object] | None = None,
) -> bytes:
    """`response`'s raw stream through the model client's `BodyReader`: decoded within `limit`
    bytes and by `deadline` (into `sink` when given, then `b""`); raises what it raises."""
    reader = BodyReader(
        provider="VM server",
        status=response.status_code,
        headers=response.headers,
        limit=limit,
        deadline=deadline,
        setting=setting,
        sink=sink,
    )
    for chunk in response.iter_raw():
        reader.feed(chunk)
    return reader.finish()


def copy_within(
    response: httpx.Response,
    out: IO[bytes],
    limit: int,
    *,
    setting: str,
    seconds: float = TRANSFER_SECONDS,
) -> str | None:
    """Write `response`'s body to `out` as it streams in, decoded within `limit` bytes and
    `seconds`; `None` when it is all there, else what went wrong (the caller names the call).

    The raw stream goes through the model client's `BodyReader`, so a declared-huge,
    endless or compressed-bomb body (a stacked `gzip, gzip` encoding is refused) stops at
    `limit`, and a server that drips bytes stops at `seconds`.
    """
    deadline = time.monotonic() + seconds
    try:
        _read(response, limit=limit, deadline=deadline, setting=setting, sink=out.write)
    except ResponseTooLargeError:
        return f"passes {setting} ({limit})"
    except ModelCallError as exc:
        return exc.message
    return None


def vm_answer(
    http: httpx.Client,
    method: str,
    url: str,
    *,
    where: str,
    limit: int,
    seconds: float = ANSWER_SECONDS,
    **kwargs: Any,
) -> tuple[int, bytes]:
    """The status and body of `method url`, read within `limit` bytes and `seconds` in all
    (from the request's start: connecting, headers and body); `where` names the call in any
    `EnvironmentFailure`. The thread's `Cutoff` (`cut_by`) ends it at once."""

    def read(response: httpx.Response, deadline: float) -> tuple[int, bytes]:
        body = _read(response, limit=limit, deadline=deadline, setting="max_answer_bytes")
        return response.status_code, body

    return vm_exchange(http, method, url, read, where=where, seconds=seconds, **kwargs)


def vm_exchange(
    http: httpx.Client,
    method: str,
    url: str,
    take: Callable[[httpx.Response, float], _T],
    *,
    where: str,
    seconds: float,
    **kwargs: Any,
) -> _T:
    """`take(response, deadline)` of the answer to `method url` streaming in, all of it
    within `seconds` of the request's start (the `deadline`); `where` names the call in
    any `EnvironmentFailure` (see `failure`), and `take` may raise one of its own."""
    deadline = time.monotonic() + seconds
    answered = False
    try:
        with stream_until(http, method, url, deadline=deadline, **kwargs) as response:
            answered = True
            return take(response, deadline)
    except (httpx.HTTPError, httpx.InvalidURL, ModelCallError) as exc:
        raise failure(where, exc, deadline=deadline, seconds=seconds, answered=answered) from None
    except RuntimeError:
        if http.is_closed:  # httpx's "Cannot send a request, as the client has been closed."
            raise closed(where) from None
        raise


def stopped(where: str) -> EnvironmentFailure:
    """The failure of a VM call its thread's `Cutoff` ended (an episode's limit, Ctrl-C)."""
    return EnvironmentFailure(f"{where}: stopped (its episode was stopped)")


def closed(where: str) -> EnvironmentFailure:
    """The failure of a VM call whose HTTP client is closed (its environment's `close()`)."""
    return EnvironmentFailure(f"{where}: the environment was closed (its HTTP client is closed)")


#: What httpcore says when the server closes the connection before a whole status line and
#: headers arrived: no answer at all (nothing came back to be malformed).
_HUNG_UP: Final = "Server disconnected without sending a response"


def failure(
    where: str, exc: Exception, *, deadline: float, seconds: float, answered: bool = False
) -> EnvironmentFailure:
    """The `EnvironmentFailure` of a VM call with `deadline` (`seconds` from its start) that
    failed with `exc`; `answered`: the answer's status line and headers had arrived.

    Stopped (its thread's `Cutoff`); no answer at all, a `VmUnanswered`: never sent
    (`sent=False`: the connection did not open), no status line (a timeout, a connection
    that broke or closed first), or an answer that did not finish by its deadline or stalled
    (a hung server); else an answer that came but cannot be used (malformed: a bad status
    line or header, a body cut short or past its limits), a plain `EnvironmentFailure`.
    """
    if cut_short():
        return stopped(where)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return VmUnanswered(f"{where}: {type(exc).__name__}: {exc}", sent=False)
    what = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, httpx.RemoteProtocolError) and _HUNG_UP not in str(exc):
        return EnvironmentFailure(f"{where}: a malformed answer ({what})")
    hung = isinstance(exc, httpx.TimeoutException | DeadlineExceededError)
    if hung or (not answered and isinstance(exc, httpx.TransportError)):
        if time.monotonic() >= deadline:
            return VmUnanswered(f"{where}: no whole answer by its deadline ({seconds:g} s in all)")
        return VmUnanswered(f"{where}: {what}")
    if isinstance(exc, ModelCallError):
        return EnvironmentFailure(f"{where}: {exc}")
    return EnvironmentFailure(f"{where}: {what}")


__all__ = [
    "ANSWER_SECONDS",
    "COMMAND_MARGIN",
    "COMMAND_SECONDS",
    "DEFAULT_MAX_ANSWER_BYTES",
    "TRANSFER_SECONDS",
    "VmUnanswered",
    "answer_seconds",
    "closed",
    "copy_within",
    "failure",
    "outlasting_commands",
    "seconds_limit",
    "stopped",
    "vm_answer",
    "vm_exchange",
]
