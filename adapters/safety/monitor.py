"""A monitor model: any supported model asked to judge each step's actions before they run.

`Monitor(model)` (its client from `client_for(model)` unless one is given) sends the
messages `osharm_core.monitor.monitor_messages` builds and reads the answer with
`read_monitor_reply`. What goes wrong is a value, never an exception that ends the
episode: a reply that cannot be read, a refusal to judge and a failed call each come back
as an `error` event (every action then allowed), with the usage the call was billed, which
the episode loop charges to the agent's totals and budget (`PromptAgent.charge_usage`).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from adapters.contract import ModelClient, ModelRequest, ModelResponse, Usage
from adapters.engine.flow import billed_of
from adapters.errors import ModelCallError, error_line
from adapters.record import StepRecord
from adapters.registry import client_for
from osharm_core.monitor import monitor_messages, read_monitor_reply
from osharm_core.safety import ALLOW, SafetyEvent, Verdict, refusal_in_text

#: The special replies a monitor is not asked about (they do nothing on the desktop).
_SIGNALS = frozenset({"WAIT", "DONE", "FAIL"})


@attrs.frozen
class MonitorOutcome:
    """What a monitor said of one step: a verdict per action, the events of a monitor that
    could not judge, and the usage of every reply it was billed for (to be charged)."""

    verdicts: tuple[Verdict, ...]
    events: tuple[SafetyEvent, ...] = ()
    usage: tuple[Usage, ...] = ()
    model: str = ""


class Monitor:
    """Asks `model` about each step's actions (see the module doc); `max_tokens` bounds its
    answer. Calls go through `client` (default `client_for(model)`, made on first use)."""

    def __init__(
        self,
        model: str,
        *,
        client: ModelClient | None = None,
        max_tokens: int = 1000,
        temperature: float = 0.0,
    ) -> None:
        self.model = model
        self._client = client
        self.max_tokens = max_tokens
        self.temperature = temperature

    @property
    def client(self) -> ModelClient:
        """The model client (resolved from the model name on first use when none was given)."""
        if self._client is None:
            self._client = client_for(self.model)
        return self._client

    def __repr__(self) -> str:
        return f"Monitor({self.model!r})"

    def request(self, instruction: str, record: StepRecord) -> ModelRequest:
        """The request that asks about `record`'s actions."""
        return ModelRequest(
            model=self.model,
            messages=monitor_messages(instruction, record.text, record.actions or ()),
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=1.0,
        )

    def judge(self, instruction: str, record: StepRecord, step: int) -> MonitorOutcome:
        """The monitor's word on the step's actions (see `MonitorOutcome`)."""
        actions = record.actions or ()
        if _nothing_to_judge(actions):
            return MonitorOutcome((ALLOW,) * len(actions), model=self.model)
        try:
            response = self.client.complete(self.request(instruction, record))
        except ModelCallError as exc:
            return self._failed(exc, len(actions), step)
        return self._read(response, len(actions), step)

    async def ajudge(self, instruction: str, record: StepRecord, step: int) -> MonitorOutcome:
        """`judge` for async callers."""
        actions = record.actions or ()
        if _nothing_to_judge(actions):
            return MonitorOutcome((ALLOW,) * len(actions), model=self.model)
        try:
            response = await self.client.acomplete(self.request(instruction, record))
        except ModelCallError as exc:
            return self._failed(exc, len(actions), step)
        return self._read(response, len(actions), step)

    def _read(self, response: ModelResponse, count: int, step: int) -> MonitorOutcome:
        billed = (*response.billed, response.usage)
        read = read_monitor_reply(response.text, count)
        verdicts = read.value_or(None)
        if verdicts is not None:
            return MonitorOutcome(verdicts, usage=billed, model=self.model)
        refused = response.refusal or refusal_in_text(response.text)
        if refused:
            message = f"the monitor refused to judge: {refused}"
            return self._error(count, step, "refused", message, billed)
        message = f"the monitor's reply cannot be read: {read.failure()}"
        return self._error(count, step, "malformed_reply", message, billed)

    def _failed(self, exc: ModelCallError, count: int, step: int) -> MonitorOutcome:
        message = f"the monitor's call failed: {error_line(exc)}"
        return self._error(count, step, "call_failed", message, billed_of(exc))

    def _error(
        self, count: int, step: int, code: str, message: str, billed: Sequence[Usage]
    ) -> MonitorOutcome:
        event = SafetyEvent(
            kind="error", step=step, source="monitor", code=code, message=message, by=self.model
        )
        return MonitorOutcome((ALLOW,) * count, (event,), tuple(billed), self.model)


def _nothing_to_judge(actions: Sequence[object]) -> bool:
    """Whether no action does anything on the desktop (none, or only WAIT / DONE / FAIL)."""
    return all(isinstance(a, str) and a.strip() in _SIGNALS for a in actions)


__all__ = ["Monitor", "MonitorOutcome"]
