"""Desktop observations: a PNG screenshot and/or an accessibility-tree XML string."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final

import attrs

from osharm_core.accessibility import tree_text
from osharm_core.config import OBSERVATION_TYPES, SCREENSHOT_TYPES, TREE_TYPES, ObservationType
from osharm_core.errors import AccessibilityTreeError, ObservationError, ScreenshotError

PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's header, without decoding the image.

    >>> png_size(PNG_SIGNATURE + bytes.fromhex("0000000d49484452000007800000043808020000000000000000"))
    (1920, 1080)
    """
    if not isinstance(data, bytes | bytearray):
        raise ScreenshotError(f"screenshot must be PNG bytes, not {type(data).__name__}")
    if not data.startswith(PNG_SIGNATURE):
        raise ScreenshotError(
            f"screenshot is not a PNG: it starts with {bytes(data[:8])!r}, "
            f"not the PNG signature {PNG_SIGNATURE!r}"
        )
    if len(data) < 24 or data[12:16] != b"IHDR":
        raise ScreenshotError("screenshot PNG is truncated or malformed: no IHDR header chunk")
    width, height = struct.unpack(">II", data[16:24])
    if width == 0 or height == 0:
        raise ScreenshotError(f"screenshot PNG claims an empty image ({width} x {height})")
    return width, height


def _buffer(
    value: bytes | bytearray | memoryview, key: str, error: type[ObservationError]
) -> bytes:
    """A bytes-like observation part as bytes (a released memoryview cannot be read)."""
    try:
        return bytes(value)
    except ValueError as exc:
        raise error(f"observation key {key!r} cannot be read: {exc}") from None


def _screenshot(value: object, observation_type: str) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ScreenshotError(
            f"observation key 'screenshot' must be PNG bytes for observation type "
            f"{observation_type!r}; got {type(value).__name__}"
        )
    data = _buffer(value, "screenshot", ScreenshotError)
    try:
        png_size(data)
    except ScreenshotError as exc:
        raise ScreenshotError(
            f"observation key 'screenshot' (observation type {observation_type!r}): {exc}"
        ) from None
    return data


def _tree(value: object, observation_type: str) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            value = tree_text(_buffer(value, "accessibility_tree", AccessibilityTreeError))
        except AccessibilityTreeError as exc:
            raise AccessibilityTreeError(
                f"observation key 'accessibility_tree' (observation type {observation_type!r}): "
                f"{exc}"
            ) from None
    if not isinstance(value, str):
        raise AccessibilityTreeError(
            f"observation key 'accessibility_tree' must be an XML string for observation type "
            f"{observation_type!r}; got {type(value).__name__}"
        )
    if not value.strip():
        raise AccessibilityTreeError(
            f"observation key 'accessibility_tree' is empty (observation type {observation_type!r})"
        )
    return value


def _required(
    d: Mapping[str, Any], key: str, observation_type: str, error: type[ObservationError]
) -> object:
    value = d.get(key)
    if value is None:
        state = "has it set to None" if key in d else "has no such key"
        raise error(
            f"observation type {observation_type!r} needs the key {key!r}, but the observation {state}"
        )
    return value


def _frozen_bytes(value: Any) -> Any:
    """A bytearray or memoryview as its own immutable copy; anything else as given.

    The owner of a buffer may change it later; the frozen `Observation` must not
    change with it. What is not bytes-like is left for `from_dict` to refuse.
    """
    if isinstance(value, bytearray | memoryview):
        try:
            return bytes(value)
        except ValueError as exc:  # a released memoryview
            raise ObservationError(f"an observation buffer cannot be read: {exc}") from None
    return value


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
            raise ObservationError(
                f"unknown observation type {observation_type!r}; expected one of "
                f"{', '.join(OBSERVATION_TYPES)}"
            )
        if not isinstance(d, Mapping):
            raise ObservationError(
                f"an observation must be a mapping with keys 'screenshot' and/or "
                f"'accessibility_tree'; got {type(d).__name__}"
            )
        if observation_type is None:
            wants_screenshot = d.get("screenshot") is not None
            wants_tree = d.get("accessibility_tree") is not None
            if not (wants_screenshot or wants_tree):
                raise ObservationError(
                    "an observation needs 'screenshot' (PNG bytes) or 'accessibility_tree' "
                    "(XML text); this one has neither"
                )
            kind = "any"
        else:
            wants_screenshot = observation_type in SCREENSHOT_TYPES
            wants_tree = observation_type in TREE_TYPES
            kind = observation_type
        screenshot = tree = None
        if wants_screenshot:
            value = _required(d, "screenshot", kind, ScreenshotError)
            screenshot = _screenshot(value, kind)
        if wants_tree:
            value = _required(d, "accessibility_tree", kind, AccessibilityTreeError)
            tree = _tree(value, kind)
        return cls(screenshot=screenshot, accessibility_tree=tree)

    @property
    def screenshot_size(self) -> tuple[int, int] | None:
        """The screenshot's (width, height) from its PNG header, or None without one."""
        return None if self.screenshot is None else png_size(self.screenshot)
