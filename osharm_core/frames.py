"""Coordinate frames: how the image a model sees relates to the screen it acts on.

A `CoordinateFrame` names the native screen size, the size of the image sent,
and the grid the model answers in: pixels of the sent image, 0-1 relative,
0-1000 relative (UI-TARS 1.0, Qwen2-VL) or 0-999 (Gemini). `to_screen` maps a
model point to screen pixels with the family's rounding; `to_model` maps a
screen point (a tree position, say) into the model's grid, exactly (floats).
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal

import attrs

from osharm_core.errors import from_fields, one_of, refusing, strict_int

#: The coordinate grids a model may answer in.
Grid = Literal["pixels", "relative", "rel1000", "rel999"]
GRIDS: Final = ("pixels", "relative", "rel1000", "rel999")
#: How a model coordinate becomes a whole screen pixel.
Rounding = Literal["round", "floor"]
ROUNDINGS: Final = ("round", "floor")

# The span of each relative grid. Gemini's 0-999 grid is read as thousandths
# (its computer-use docs map x to x / 1000 * width), the same span as 0-1000.
_SPAN: Final = {"relative": 1.0, "rel1000": 1000.0, "rel999": 1000.0}
# The largest x and y a model writes on each relative grid (the pixel grid's is the image size).
_EXTENT: Final = {"relative": (1, 1), "rel1000": (1000, 1000), "rel999": (999, 999)}


def _on_grid(unit: float, pixel: float, side: int, extent: int) -> int:
    """`unit` rounded to the nearest whole one, no further than `extent` for a pixel on the
    screen (0 <= pixel < side); a point off the screen keeps its rounding."""
    whole = math.floor(unit + 0.5)
    return min(whole, extent) if 0 <= pixel < side else whole


#: The largest screen or image side a frame takes (far past any display; keeps the scale a float).
MAX_FRAME_SIDE: Final = 1 << 20


_SIDE: Final = refusing(
    f"an int from 1 to {MAX_FRAME_SIDE}",
    strict_int,
    attrs.validators.ge(1),
    attrs.validators.le(MAX_FRAME_SIDE),
)


def _finite(x: float, y: float) -> None:
    if not (math.isfinite(x) and math.isfinite(y)):
        raise ValueError(f"coordinates must be finite numbers; got ({x!r}, {y!r})")


@attrs.frozen(kw_only=True)
class CoordinateFrame:
    """The screen, the image sent, and the model's coordinate grid.

    >>> frame = CoordinateFrame(screen_width=1920, screen_height=1080, image_width=1280, image_height=720)
    >>> frame.to_screen(640, 360), frame.to_model(960, 540)
    ((960, 540), (640.0, 360.0))
    >>> CoordinateFrame(screen_width=1920, screen_height=1080, image_width=1000,
    ...                 image_height=563, grid="rel1000").to_screen(500, 500)
    (960, 540)
    """

    screen_width: int = attrs.field(validator=_SIDE)
    screen_height: int = attrs.field(validator=_SIDE)
    image_width: int = attrs.field(validator=_SIDE)
    image_height: int = attrs.field(validator=_SIDE)
    grid: Grid = attrs.field(default="pixels", validator=one_of(GRIDS))
    rounding: Rounding = attrs.field(default="round", validator=one_of(ROUNDINGS))

    @classmethod
    def identity(cls, width: int, height: int) -> CoordinateFrame:
        """The frame of an unscaled screenshot answered in its own pixels."""
        return cls(screen_width=width, screen_height=height, image_width=width, image_height=height)

    @property
    def is_identity(self) -> bool:
        """Whether model points are screen pixels already (nothing to map)."""
        return (
            self.grid == "pixels"
            and self.screen_width == self.image_width
            and self.screen_height == self.image_height
        )

    @property
    def grid_extent(self) -> tuple[int, int]:
        """The largest x and y of the model's grid: the sent image's size on the pixel grid,
        else 1, 1000 or 999 (the other end of each axis is 0).

        >>> CoordinateFrame.identity(1920, 1080).grid_extent
        (1920, 1080)
        """
        return _EXTENT.get(self.grid, (self.image_width, self.image_height))

    @property
    def scale(self) -> tuple[float, float]:
        """Screen pixels per model unit, along x and along y."""
        span = _SPAN.get(self.grid)
        if span is None:
            return self.screen_width / self.image_width, self.screen_height / self.image_height
        return self.screen_width / span, self.screen_height / span

    def _whole(self, value: float) -> int:
        if self.rounding == "floor":
            return math.floor(value)
        return math.floor(value + 0.5)

    def to_screen(self, x: float, y: float) -> tuple[int, int]:
        """The screen pixel a model point names (`ValueError` for NaN or infinity)."""
        _finite(x, y)
        if self.is_identity:
            return self._whole(x), self._whole(y)
        sx, sy = self.scale
        return self._whole(x * sx), self._whole(y * sy)

    def delta_to_screen(self, dx: float, dy: float) -> tuple[int, int]:
        """A relative move (`moveRel`, `dragRel`) in screen pixels."""
        _finite(dx, dy)
        sx, sy = self.scale
        return self._whole(dx * sx), self._whole(dy * sy)

    def to_model(self, x: float, y: float) -> tuple[float, float]:
        """A screen point in the model's grid, exactly (`to_screen` gives it back)."""
        _finite(x, y)
        sx, sy = self.scale
        return x / sx, y / sy

    def model_point(self, x: float, y: float) -> tuple[int, int] | tuple[float, float]:
        """A screen point as the model would write it: whole units, or 4 decimals on the 0-1
        grid. A point on the screen is written as one that names a pixel of the screen, within
        `grid_extent` (the last pixel of a 2,000-pixel side is 999, not 1000, on the 0-999
        grid; on the pixel grid the image's last pixel, not its width).

        >>> CoordinateFrame(screen_width=3840, screen_height=2160, image_width=1000,
        ...                 image_height=563, grid="rel999").model_point(3839, 2159)
        (999, 999)
        """
        mx, my = self.to_model(x, y)
        if self.grid == "relative":
            return round(mx, 4), round(my, 4)
        # The largest unit on each axis whose pixel is on the screen (the extent itself on the
        # 0-999 grid, one less where the extent maps to the screen's far edge).
        ex, ey = self.grid_extent
        tx, ty = self.to_screen(ex, ey)
        if tx >= self.screen_width and ex > 0:
            ex -= 1
        if ty >= self.screen_height and ey > 0:
            ey -= 1
        return _on_grid(mx, x, self.screen_width, ex), _on_grid(my, y, self.screen_height, ey)

    def to_json(self) -> dict[str, Any]:
        """The frame as a JSON-ready object (`from_json` reads it back)."""
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: object) -> CoordinateFrame:
        """The frame `to_json` wrote; a `ConfigError` says what is wrong."""
        return from_fields(cls, data)
