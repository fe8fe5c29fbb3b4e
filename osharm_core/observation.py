"""Desktop observations: a PNG screenshot and/or an accessibility-tree XML string."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs

from osharm_core.accessibility import tree_text
from osharm_core.config import OBSERVATION_TYPES, SCREENSHOT_TYPES, TREE_TYPES, ObservationType
from osharm_core.errors import AccessibilityTreeError, ObservationError, ScreenshotError, excerpt

PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
_EXPECTED: Final = f"expected one of {', '.join(OBSERVATION_TYPES)}"
_NEITHER: Final = (
    "an observation needs 'screenshot' (PNG bytes) or 'accessibility_tree' (XML text); "
    "this one has neither"
)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header, without decoding the image.

    >>> png_size(PNG_SIGNATURE + bytes.fromhex("0000000d49484452000007800000043808020000000000000000"))
    (1920, 1080)
    """
    width, height = struct.unpack(">II", data[16:24]) if len(data) >= 24 else (0, 0)
    problem = (
        f"is not a PNG: it starts with {bytes(data[:8])!r}, not the PNG signature {PNG_SIGNATURE!r}"
        if not data.startswith(PNG_SIGNATURE)
        else "PNG is truncated or malformed: no IHDR header chunk"
        if len(data) < 24 or data[12:16] != b"IHDR"
        else f"PNG claims an empty image ({width} x {height})"
        if width == 0 or height == 0
        else None
    )
    if problem is not None:
        raise ScreenshotError(f"screenshot {problem}")
    return width, height


def _frozen_bytes(value: Any) -> Any:
    """A bytearray or memoryview as its own immutable copy; anything else as given.

    The owner of a buffer may change it later; the frozen `Observation` must not
    change with it. What is not bytes-like is left for `from_dict` to refuse.
    """
    if not isinstance(value, bytearray | memoryview):
        return value
    try:
        return bytes(value)
    except ValueError as exc:  # a released memoryview
        raise ObservationError(f"an observation buffer cannot be read: {exc}") from None


def _screenshot(value: object) -> bytes:
    data = _frozen_bytes(value)
    if not isinstance(data, bytes):
        raise ScreenshotError(f"must be PNG bytes; got {type(value).__name__}")
    png_size(data)
    return data


def _tree(value: object) -> str:
    data = _frozen_bytes(value)
    text = tree_text(data) if isinstance(data, bytes) else data
    if not isinstance(text, str) or not text.strip():
        raise AccessibilityTreeError(f"must be an XML string, not empty; got {excerpt(value, 40)}")
    return text


#: What each key of an observation dict is read by, the error it gives and the types using it.
_PARTS: Final = MappingProxyType(
    {
        "screenshot": (_screenshot, ScreenshotError, SCREENSHOT_TYPES),
        "accessibility_tree": (_tree, AccessibilityTreeError, TREE_TYPES),
    }
)


@attrs.frozen
class Observation:
    """One observation as the agent receives it from the environment.

    `screenshot` holds PNG bytes (checked by signature and header; decoded only
    when set-of-marks needs the pixels); `accessibility_tree` holds the raw XML.
    A bytearray or memoryview given for either is copied to `bytes`, so the
    observation never changes with the buffer it came from.

    >>> Observation(screenshot=memoryview(b"png")).screenshot
    b'png'
    """

    screenshot: bytes | None = attrs.field(
        default=None, converter=_frozen_bytes, repr=lambda b: f"<{len(b)} bytes>" if b else "None"
    )
    accessibility_tree: str | None = attrs.field(
        default=None, converter=_frozen_bytes, repr=lambda t: f"<{len(t)} chars>" if t else "None"
    )

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], observation_type: ObservationType | None = None
    ) -> Observation:
        """Check and take what `observation_type` needs from an OSWorld observation dict.

        Keys the type does not need are ignored. A missing or malformed needed
        key raises `ScreenshotError` or `AccessibilityTreeError` (both
        `ObservationError`, a `ValueError`) naming the key and the type.
        Without a type, whichever of the two keys is present (not None) is
        checked and kept, and at least one must be.

        >>> Observation.from_dict({"accessibility_tree": "<desktop-frame/>"}).accessibility_tree
        '<desktop-frame/>'
        """
        if observation_type is not None and observation_type not in OBSERVATION_TYPES:
            raise ObservationError(f"unknown observation type {observation_type!r}; {_EXPECTED}")
        if not isinstance(d, Mapping):
            raise ObservationError(f"an observation must be a mapping; got {type(d).__name__}")
        kind = observation_type or "any"
        wanted = [
            key
            for key, (_, _, types) in _PARTS.items()
            if (d.get(key) is not None if observation_type is None else observation_type in types)
        ]
        if not wanted:
            raise ObservationError(_NEITHER)
        parts = {}
        for key in wanted:
            read, error, _ = _PARTS[key]
            value = d.get(key)
            if value is None:
                state = "has it set to None" if key in d else "has no such key"
                raise error(f"observation type {kind!r} needs {key!r}; the observation {state}")
            try:
                parts[key] = read(value)
            except ObservationError as exc:
                raise error(f"observation key {key!r} (observation type {kind!r}): {exc}") from None
        return cls(**parts)

    @property
    def screenshot_size(self) -> tuple[int, int] | None:
        """The screenshot's (width, height) from its PNG header, or None without one."""
        return None if self.screenshot is None else png_size(self.screenshot)
