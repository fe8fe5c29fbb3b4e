"""The typed errors of osharm-core: one base class, a few precise kinds.

Parse failures of model replies are values (`returns.result.Failure`), not
exceptions; the classes here are what those failures carry and what bad
configuration or bad observations raise.
"""

from __future__ import annotations


class OsharmError(Exception):
    """Base class of every error raised by osharm-core."""


class ConfigError(OsharmError, ValueError):
    """An `AgentConfig` field holds a value outside what it allows."""


class ObservationError(OsharmError, ValueError):
    """An observation lacks what its observation type needs, or holds malformed data."""


class AccessibilityTreeError(ObservationError):
    """An accessibility tree is not well-formed XML, or is hostile (entities, DTDs)."""


class ScreenshotError(ObservationError):
    """A screenshot is not a PNG, is truncated, or claims more pixels than allowed."""


class ActionParseError(OsharmError, ValueError):
    """A model reply holds no action that can be read (carried inside a `Failure`)."""
