"""What an episode on a Ray worker says, passed on to the driver's own stamina hooks and logging.

A worker actor is a process of its own: stamina's retry hooks and the loggers'
handlers set in the driver (the CLI's "trying again" line, its last-resort
handler) are not there, and with `log_to_driver` off what the actor prints
reaches no one. While an episode runs with a channel (`telling`), a stamina
hook and a handler on the library's loggers (`LOGGERS`) are in place, and each
retry scheduled and each record those loggers pass in that episode's context
(its asyncio task and the tasks and threads it starts, which copy the context:
`in_thread`, `asyncio.to_thread`) goes to its channel as a `Retried` or a
`Logged`, without waiting; episodes sharing the process each get their own,
once. The driver hands them to its own hooks and logging (`relay`), so they
come out as they would had the episode run in the driver's process. The
records the actor's loggers pass are relayed (warnings and above, unless
logging is configured on the worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Final

import attrs
from stamina.instrumentation import RetryDetails, get_on_retry_hooks, set_on_retry_hooks

from adapters._process import ProcessWide
from adapters.agent import DEFAULT_LOGGER
from adapters.errors import _type_name, error_text

#: The loggers whose records an episode's channel gets (and their children): the library's
#: modules' and the agent's.
LOGGERS: Final = ("adapters", DEFAULT_LOGGER)


@attrs.frozen
class Retried:
    """A retry stamina scheduled in a worker: `RetryDetails` but the call's arguments."""

    name: str
    retry_num: int
    wait_for: float
    waited_so_far: float
    caused_by: Exception

    def details(self) -> RetryDetails:
        """As stamina hands it to its hooks (no arguments: they stayed in the worker)."""
        return RetryDetails(
            name=self.name,
            args=(),
            kwargs={},
            retry_num=self.retry_num,
            wait_for=self.wait_for,
            waited_so_far=self.waited_so_far,
            caused_by=self.caused_by,
        )


@attrs.frozen
class Logged:
    """A log record from a worker, as `logging.makeLogRecord` takes it: its message already
    formatted (`args` none), its traceback as text (`exc_text`)."""

    fields: dict[str, Any]

    def record(self) -> logging.LogRecord:
        """The record, rebuilt."""
        return logging.makeLogRecord(self.fields)


Said = Retried | Logged

_CHANNEL: contextvars.ContextVar[Callable[[Said], None] | None] = contextvars.ContextVar(
    "osharm_ray_channel", default=None
)


def relay(said: Iterable[Said]) -> None:
    """Hand what workers said to this process's stamina hooks and logging, in order."""
    for item in said:
        if isinstance(item, Retried):
            details = item.details()
            for hook in get_on_retry_hooks():
                scheduled = hook(details)
                if isinstance(scheduled, AbstractContextManager):
                    with scheduled:  # the wait is the worker's: nothing to hold open here
                        pass
        else:
            record = item.record()
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)


def _on_retry(details: RetryDetails) -> None:
    """The worker's stamina hook: the retry, to the channel of the episode it happened in."""
    tell = _CHANNEL.get()
    if tell is not None:
        tell(
            Retried(
                details.name,
                details.retry_num,
                details.wait_for,
                details.waited_so_far,
                _travelling(details.caused_by),
            )
        )


class _Capture(logging.Handler):
    """The worker's handler on `LOGGERS`: each record, to the channel of its episode."""

    def emit(self, record: logging.LogRecord) -> None:
        tell = _CHANNEL.get()
        if tell is None:
            return
        try:
            fields = dict(record.__dict__)
            fields["msg"], fields["args"] = record.getMessage(), None
            if record.exc_info and not record.exc_text:
                fields["exc_text"] = _FORMATTER.formatException(record.exc_info)
            fields["exc_info"] = None
            tell(Logged(_picklable(fields)))
        except Exception:
            self.handleError(record)


_FORMATTER: Final = logging.Formatter()
_STANDARD: Final = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def _picklable(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` without the extra attributes (`extra=`) that cannot travel."""
    pickler = _pickler()
    kept = {}
    for key, value in fields.items():
        if key not in _STANDARD:
            try:
                pickler.dumps(value)
            except Exception:
                continue
        kept[key] = value
    return kept


def _travelling(error: Exception) -> Exception:
    """`error`, or when it does not survive pickling with its text, a `RuntimeError`
    with that text (its type's name when it has none)."""
    text = error_text(error)
    pickler = _pickler()
    try:
        back = pickler.loads(pickler.dumps(error))
    except Exception:
        back = None
    if type(back) is type(error) and error_text(back) == text:
        return error
    return RuntimeError(text or _type_name(error))


def _pickler() -> Any:
    """Ray's pickler (the ray extra: only a worker gets here), as Ray sends values."""
    return importlib.import_module("ray.cloudpickle")


_CAPTURE: Final = _Capture()


def _relay_hooks() -> Callable[[], None]:
    """The stamina hook and the handler on the library's loggers; returns how to remove them."""
    set_on_retry_hooks([*get_on_retry_hooks(), _on_retry])
    for name in LOGGERS:
        logging.getLogger(name).addHandler(_CAPTURE)

    def undo() -> None:
        set_on_retry_hooks([h for h in get_on_retry_hooks() if h is not _on_retry])
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(_CAPTURE)

    return undo


#: The hook and the handler, in place while any episode of this process tells a channel
#: (stamina's hooks and loggers are process-wide; episodes may overlap).
_HOOKS: Final = ProcessWide()


class Channel:
    """Where an episode's sayings go, from any thread, without waiting: `put` runs on `loop`
    (the actor's event loop); `put` may be swapped (the stream that read them has ended)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, put: Callable[[Said], None]) -> None:
        self.loop, self.put = loop, put

    def __call__(self, said: Said) -> None:
        try:
            here = asyncio.get_running_loop() is self.loop
        except RuntimeError:  # another thread
            here = False
        if here:
            self.put(said)
        else:
            with contextlib.suppress(RuntimeError):  # the loop has closed: the actor is ending
                self.loop.call_soon_threadsafe(lambda: self.put(said))


async def telling(channel: Channel, episode: Any) -> Any:
    """Await `episode` (a coroutine) with what it says going to `channel`."""
    _CHANNEL.set(channel)  # this task's own context, and the tasks and threads it starts
    with _HOOKS.held(_relay_hooks):
        return await episode


__all__ = ["LOGGERS", "Channel", "Logged", "Retried", "Said", "relay", "telling"]
