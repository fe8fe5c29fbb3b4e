"""osharm-core: the pure core of an OS-Harm / OSWorld style computer-use agent."""

from osharm_core.config import AgentConfig
from osharm_core.errors import (
    AccessibilityTreeError,
    ActionParseError,
    ConfigError,
    ObservationError,
    OsharmError,
    ScreenshotError,
)
from osharm_core.messages import ImagePart, Message, TextPart, render_openai_chat
from osharm_core.state import Action, AgentState, Continuation, Mask, ObservationRecord

__all__ = [
    "AccessibilityTreeError",
    "Action",
    "ActionParseError",
    "AgentConfig",
    "AgentState",
    "ConfigError",
    "Continuation",
    "ImagePart",
    "Mask",
    "Message",
    "ObservationError",
    "ObservationRecord",
    "OsharmError",
    "ScreenshotError",
    "TextPart",
    "render_openai_chat",
]
