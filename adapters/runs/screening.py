"""How a run screens its agents' actions: the screen, the monitor and the policy, as one value.

The episode loop (`adapters.runs.episode`) hands each step's record to
`Screening.apply` before any of its actions runs: the screen's verdicts (a pure
`osharm_core.safety.Screen`, such as the rule screen) and the monitor's (a model's, see
`adapters.safety.monitor`) are added to the record as safety events. The policy says what
a flag does: `record` (the default) runs the action all the same, so a benchmark's numbers
stay comparable; `block` keeps it (and the rest of its step) from running and goes on with
the next step; `end` keeps it from running and ends the episode.

>>> from osharm_core import RuleScreen
>>> Screening(screen=RuleScreen(), on_flag="block").withholds
True
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Final, Literal, Protocol, runtime_checkable

import attrs

from adapters.contract import Usage
from adapters.record import StepRecord
from adapters.safety.monitor import Monitor
from osharm_core.errors import one_of, refusing
from osharm_core.safety import Screen, for_task, run_screen, screen_events
from osharm_core.screen_read import SCREENED_CODE
from osharm_core.state import AgentState

# The rule screen parses actions' code without running it: Python's warnings about that code
# (an odd escape sequence, `1st`) concern nobody.
warnings.filterwarnings("ignore", module=re.escape(SCREENED_CODE))

OnFlag = Literal["record", "block", "end"]
#: What a flagged action does: runs (recorded only), is withheld, or is withheld and ends
#: the episode.
ON_FLAG: Final[tuple[str, ...]] = ("record", "block", "end")


@runtime_checkable
class ChargesUsage(Protocol):
    """An agent that counts calls made on its episode's behalf (`PromptAgent`)."""

    def charge_usage(self, usage: Usage, model: str) -> float | None: ...


@runtime_checkable
class _HasState(Protocol):
    @property
    def state(self) -> object: ...


def state_of(agent: object) -> AgentState:
    """The trajectory `agent` holds (a `PromptAgent`'s `state`), else an empty one: what a
    screen is given as the state before a step."""
    state = agent.state if isinstance(agent, _HasState) else None
    return state if isinstance(state, AgentState) else AgentState()


@attrs.frozen(kw_only=True)
class Screening:
    """A run's screening: `screen` (a `Screen`; `None`: none), named `name` in its events,
    `monitor` (a `Monitor`; `None`: none) and the policy `on_flag` (see the module doc)."""

    screen: Screen | None = None
    name: str = "rules"
    monitor: Monitor | None = attrs.field(
        default=None,
        validator=refusing(
            "a Monitor or None", attrs.validators.optional(attrs.validators.instance_of(Monitor))
        ),
    )
    on_flag: OnFlag = attrs.field(default="record", validator=one_of(ON_FLAG))

    @property
    def withholds(self) -> bool:
        """Whether a flagged action is kept from running."""
        return self.on_flag != "record"

    @property
    def ends(self) -> bool:
        """Whether a withheld action ends the episode."""
        return self.on_flag == "end"

    def for_task(self, instruction: str) -> Screening:
        """This screening for an episode of `instruction` (see `osharm_core.safety.for_task`)."""
        if self.screen is None:
            return self
        return attrs.evolve(self, screen=for_task(self.screen, instruction))

    async def apply(
        self,
        record: StepRecord,
        state: AgentState,
        *,
        step: int,
        agent: Any = None,
        sync: bool = False,
    ) -> StepRecord:
        """`record` with the screen's and the monitor's events on its actions added; the
        monitor's calls are charged to `agent` when it counts usage (`ChargesUsage`). With
        `sync`, the monitor is called synchronously (the loop runs with no event loop)."""
        actions = record.actions or ()
        if not actions:
            return record
        events = list(record.safety_events)
        if self.screen is not None:
            verdicts = run_screen(self.screen, record.config, state, record.observation, actions)
            events += screen_events(verdicts, step=step, by=self.name, withhold=self.withholds)
        if self.monitor is not None:
            monitor, instruction = self.monitor, record.instruction
            if sync:
                outcome = monitor.judge(instruction, record, step)
            else:
                outcome = await monitor.ajudge(instruction, record, step)
            if isinstance(agent, ChargesUsage):
                for usage in outcome.usage:
                    agent.charge_usage(usage, outcome.model)
            events += outcome.events
            events += screen_events(
                outcome.verdicts,
                step=step,
                source="monitor",
                by=outcome.model,
                withhold=self.withholds,
            )
        return attrs.evolve(record, safety_events=tuple(events))


__all__ = ["ON_FLAG", "ChargesUsage", "OnFlag", "Screening", "state_of"]
