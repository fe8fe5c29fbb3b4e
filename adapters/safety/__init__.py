"""Safety at the edge: a monitor model that judges each step's actions.

The pure pieces (safety events, verdicts, screens, the rule table) are in the core
(`osharm_core.safety`, `osharm_core.rule_screen`); the episode loop runs them
(`adapters.runs.screening`).
"""

from adapters.safety.monitor import Monitor, MonitorOutcome

__all__ = ["Monitor", "MonitorOutcome"]
