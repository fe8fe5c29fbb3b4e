"""Trying a VM call again, as OSWorld's controller does, in a way an episode's stop ends.

stamina sleeps between tries with `time.sleep`, which nothing can cut short
from another thread; so a VM call's tries are counted here, the waits go
through the environment's own abortable sleep, and no try starts once the
call was stopped. Each retry is still announced to stamina's retry hooks
(the CLI prints a line for each), and stamina's switches still apply: with
`stamina.set_active(False)` a call is tried once, in stamina's test mode
without waiting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TypeVar

import stamina
from stamina.instrumentation import RetryDetails, get_on_retry_hooks

_T = TypeVar("_T")


def tries(
    once: Callable[[], _T],
    *,
    where: str,
    attempts: int,
    wait: float,
    retry_if: Callable[[Exception], bool],
    sleep: Callable[[float], None],
    stopped: Callable[[], Exception | None],
) -> _T:
    """`once()`, tried up to `attempts` times while `retry_if` says its failure may pass,
    `sleep(wait)` between tries (a sleep that raises when the call is stopped).

    `stopped()` is the failure to raise when the call was stopped, else
    `None`; it is asked before every try, so none starts after a stop, and a
    failure is not tried again after one. `where` names the call to the hooks.
    """
    if not stamina.is_active():
        attempts = 1
    pause = 0.0 if stamina.is_testing() else wait
    waited = 0.0
    with contextlib.ExitStack() as hooked:
        for attempt in range(1, attempts + 1):
            stop = stopped()
            if stop is not None:
                raise stop
            try:
                return once()
            except Exception as exc:
                if attempt == attempts or not retry_if(exc) or stopped() is not None:
                    raise
                details = RetryDetails(
                    name=where,
                    args=(),
                    kwargs={},
                    retry_num=attempt,
                    wait_for=pause,
                    waited_so_far=waited,
                    caused_by=exc,
                )
                for hook in get_on_retry_hooks():
                    entered = hook(details)
                    if isinstance(entered, contextlib.AbstractContextManager):
                        hooked.enter_context(entered)
            if pause:
                sleep(pause)
            waited += pause
    raise AssertionError("at least one try is made")  # pragma: no cover


__all__ = ["tries"]
