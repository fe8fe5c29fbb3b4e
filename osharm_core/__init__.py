"""osharm-core: the pure core of an OS-Harm / OSWorld style computer-use agent.

An `AgentState` and an `Observation` go in, messages come out
(`prepare_step`); a model's reply goes in, actions and the next state come
out (`complete_step`). Nothing here does I/O.
"""

from osharm_core.accessibility import linearize_accessibility_tree, parse_accessibility_tree
from osharm_core.config import AgentConfig
from osharm_core.errors import (
    AccessibilityTreeError,
    ActionParseError,
    ConfigError,
    ObservationError,
    OsharmError,
    RankFileError,
    RequestBudgetError,
    ScreenshotError,
    StateError,
)
from osharm_core.frames import CoordinateFrame
from osharm_core.limits import ServerLimits
from osharm_core.marks import SetOfMarks, tag_screenshot
from osharm_core.messages import ImagePart, Message, TextPart, render_openai_chat
from osharm_core.observation import Observation, png_size
from osharm_core.parsing import (
    MAX_ACTION_DEPTH,
    MAX_ACTIONS_PER_REPLY,
    CodeActions,
    code_actions,
    parse_actions_from_string,
    parse_code_from_som_string,
    parse_code_from_string,
)
from osharm_core.prompts import system_message, system_prompt
from osharm_core.rule_screen import DEFAULT_RULES, RuleScreen
from osharm_core.safety import SafetyEvent, SafetyTally, Screen, Verdict, compose, reply_events
from osharm_core.shell_rules import Rule, check_rule
from osharm_core.state import (
    Action,
    AgentState,
    Continuation,
    FrozenAction,
    FrozenList,
    Mask,
    ObservationRecord,
    StoredAction,
    freeze,
    thaw,
)
from osharm_core.step import StepRequest, complete_step, parse_reply, prepare_step
from osharm_core.tokens import cl100k_encoding, trim_accessibility_tree
from osharm_core.vocabulary import KEYBOARD_KEYS, validate_computer_13

__all__ = [
    "DEFAULT_RULES",
    "KEYBOARD_KEYS",
    "MAX_ACTIONS_PER_REPLY",
    "MAX_ACTION_DEPTH",
    "AccessibilityTreeError",
    "Action",
    "ActionParseError",
    "AgentConfig",
    "AgentState",
    "CodeActions",
    "ConfigError",
    "Continuation",
    "CoordinateFrame",
    "FrozenAction",
    "FrozenList",
    "ImagePart",
    "Mask",
    "Message",
    "Observation",
    "ObservationError",
    "ObservationRecord",
    "OsharmError",
    "RankFileError",
    "RequestBudgetError",
    "Rule",
    "RuleScreen",
    "SafetyEvent",
    "SafetyTally",
    "Screen",
    "ScreenshotError",
    "ServerLimits",
    "SetOfMarks",
    "StateError",
    "StepRequest",
    "StoredAction",
    "TextPart",
    "Verdict",
    "check_rule",
    "cl100k_encoding",
    "code_actions",
    "complete_step",
    "compose",
    "freeze",
    "linearize_accessibility_tree",
    "parse_accessibility_tree",
    "parse_actions_from_string",
    "parse_code_from_som_string",
    "parse_code_from_string",
    "parse_reply",
    "png_size",
    "prepare_step",
    "render_openai_chat",
    "reply_events",
    "system_message",
    "system_prompt",
    "tag_screenshot",
    "thaw",
    "trim_accessibility_tree",
    "validate_computer_13",
]
