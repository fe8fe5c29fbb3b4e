"""One try's turn at a limiter (`adapters.engine.limits.turn`), on the `Limiter` methods alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import pytest

from adapters.engine.limits import turn
from adapters.errors import RateLimitWaitError


class Recording:
    """A `Limiter` that answers with set waits and records what it is asked."""

    def __init__(self, reserve: float = 0.0, admit: float = 0.0) -> None:
        self.calls: list[str] = []
        self._reserve, self._admit = reserve, admit

    def admit(self, *, deadline: float | None = None) -> float:
        self.calls.append("admit")
        wait, self._admit = self._admit, 0.0
        return wait

    def release(self) -> None:
        self.calls.append("release")

    def reserve(self, *, deadline: float | None = None, provider: str = "") -> float:
        self.calls.append("reserve")
        return self._reserve

    def hold(self) -> float:
        self.calls.append("hold")
        return 0.0

    def unreserve(self, *, due: float) -> None:
        self.calls.append("unreserve")

    def observe(self, status: int, headers: Mapping[str, str], tokens: int | None = None) -> None:
        self.calls.append(f"observe {status} {tokens}")


def test_a_try_that_gets_a_reply_is_observed_and_holds_nothing_back() -> None:
    """Room, turn, the reply observed: the limiter is asked in that order and nothing is released."""
    limiter = Recording()
    with turn(limiter, provider="p") as held:
        held.observe(200, {}, 12)
    assert limiter.calls == ["admit", "reserve", "observe 200 12"]


def test_an_admitted_first_try_does_not_ask_for_room_again() -> None:
    """A call's first try, admitted before its deadline started, only takes its turn."""
    limiter = Recording()
    with turn(limiter, admitted=True) as held:
        held.observe(429, {})
    assert limiter.calls == ["reserve", "observe 429 None"]


def test_a_try_that_ends_without_a_reply_gives_its_room_back() -> None:
    """An error inside the turn (no reply to observe) releases the room the try held."""
    limiter = Recording()
    with pytest.raises(ConnectionError), turn(limiter, admitted=True):
        raise ConnectionError("no reply")
    assert limiter.calls == ["reserve", "release"]


def test_a_turn_past_the_deadline_is_given_back_before_anything_is_sent() -> None:
    """A turn due after the call's deadline raises RateLimitWaitError, giving back the turn and the room."""
    limiter = Recording(reserve=30.0)
    entered = False
    deadline = time.monotonic() + 1.0
    with (
        pytest.raises(RateLimitWaitError, match="past the call's deadline"),
        turn(limiter, deadline=deadline, provider="p", admitted=True),
    ):
        entered = True
    assert not entered
    assert limiter.calls == ["reserve", "unreserve", "release"]


def test_a_cancelled_wait_gives_the_turn_back() -> None:
    """An async wait for a turn cancelled before it is due gives the turn back for the next caller."""
    limiter = Recording(reserve=30.0)

    async def main() -> None:
        async with turn(limiter, admitted=True):
            pass

    async def cancelled() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(main(), 0.05)

    asyncio.run(cancelled())
    assert limiter.calls == ["reserve", "unreserve", "release"]


def test_without_a_limiter_a_turn_waits_for_nothing() -> None:
    """turn(None) is a no-op, so a client without a limiter goes through the same layer."""
    with turn(None) as held:
        held.observe(200, {}, 1)
