"""Screenshot scaling presets per model family, and the resampling itself (pure, in memory).

Each preset says what size a screenshot is sent at and which coordinate grid
the family answers in; `frame_for` turns that into a `CoordinateFrame`.
The vendors' documented numbers:

* OpenAI `detail: high`: the image is fitted in 2048 x 2048, then scaled so
  its shortest side is 768 px, then counted in 512 px tiles
  (platform.openai.com/docs/guides/vision, "Calculating costs").
* Anthropic: an image whose long edge is over 1568 px, or over about 1,600
  tokens (~1.15 megapixels), is scaled down by the server; sending it at most
  1.15 MP and 1568 px on each side avoids that (docs.claude.com/en/docs/vision,
  "Evaluate image size"). The native resolution is per model: Claude Opus 4.7
  reads up to 2576 px on the long edge, about 3.75 MP (`claude-hires`);
  coordinates Claude gives are in the resized image's pixels
  (platform.claude.com/docs/en/vision), so for Anthropic's computer-use tool
  every preset's size is fitted within the model's limit (`resolve_preset`).
* Gemini: images are counted in 768 x 768 tiles of 258 tokens
  (ai.google.dev/gemini-api/docs/tokens); the preset keeps a screenshot within
  2 x 2 tiles. Gemini's computer-use model answers on a 0-999 grid read as
  thousandths of the screen.
* Qwen2.5-VL / UI-TARS: the processor's smart resize to multiples of 28 px
  between `min_pixels` and `max_pixels` (preprocessor_config.json of the
  Qwen2.5-VL checkpoints: 3136 and 12845056; UI-TARS-1.5 uses 100 and 16384
  patches of 28 x 28). Qwen2.5-VL and UI-TARS-1.5 answer in pixels of the
  resized image, Qwen2-VL and UI-TARS 1.0 on a 0-1000 grid.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import attrs

from osharm_core.errors import ConfigError, ScreenshotError, excerpt
from osharm_core.frames import MAX_FRAME_SIDE, CoordinateFrame, Grid, Rounding
from osharm_core.marks import encode_png, open_screenshot, resample_screenshot
from osharm_core.observation import png_size

#: The patch size Qwen-VL processors resize to multiples of.
QWEN_FACTOR: Final = 28
QWEN_MIN_PIXELS: Final = 4 * 28 * 28
QWEN_MAX_PIXELS: Final = 16384 * 28 * 28


@attrs.frozen(kw_only=True)
class ScalingPreset:
    """How one model family wants screenshots: the size to send and the grid it answers in.

    Sizes only ever shrink (`fit`, `short_side`, `long_edge`, `max_pixels`),
    except the smart resize (`multiple`), which rounds each side to a multiple.

    >>> PRESETS["openai-high"].target_size(1920, 1080)
    (1365, 768)
    >>> PRESETS["claude"].target_size(1920, 1080)
    (1429, 804)
    >>> PRESETS["ui-tars-1.5"].target_size(1920, 1080)
    (1932, 1092)
    """

    name: str
    fit: tuple[int, int] | None = None
    short_side: int | None = None
    long_edge: int | None = None
    max_pixels: int | None = None
    multiple: int | None = None
    min_pixels: int | None = None
    grid: Grid = "pixels"
    rounding: Rounding = "round"
    #: A preset the size is then fitted within: the limit of the vendor that will see the
    #: image (Anthropic's, for any other preset chosen for its computer-use tool).
    within: ScalingPreset | None = None

    def target_size(self, width: int, height: int) -> tuple[int, int]:
        """The size a `width` x `height` screenshot is sent at under this preset."""
        size = self._own_size(width, height)
        return size if self.within is None else self.within.target_size(*size)

    def _own_size(self, width: int, height: int) -> tuple[int, int]:
        if self.multiple is not None:
            return smart_resize(
                width,
                height,
                factor=self.multiple,
                min_pixels=self.min_pixels or QWEN_MIN_PIXELS,
                max_pixels=self.max_pixels or QWEN_MAX_PIXELS,
            )
        scale = 1.0
        if self.fit is not None:
            scale = min(scale, self.fit[0] / width, self.fit[1] / height)
        if self.short_side is not None:
            scale = min(scale, self.short_side / min(width, height))
        if self.long_edge is not None:
            scale = min(scale, self.long_edge / max(width, height))
        if self.max_pixels is not None:
            scale = min(scale, math.sqrt(self.max_pixels / (width * height)))
        if scale >= 1.0:
            return width, height
        return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))

    def frame_for(self, width: int, height: int) -> CoordinateFrame:
        """The frame a `width` x `height` screen is seen in under this preset.

        A screenshot with a side past `MAX_FRAME_SIDE`, as captured or as it would be
        sent, raises `ScreenshotError`.
        """
        if max(width, height) > MAX_FRAME_SIDE:
            raise ScreenshotError(
                f"screenshot is {width} x {height} pixels; scaling {self.name!r} takes "
                f"screenshots with sides of at most {MAX_FRAME_SIDE} pixels"
            )
        sent_w, sent_h = self.target_size(width, height)
        if max(sent_w, sent_h) > MAX_FRAME_SIDE:
            raise ScreenshotError(
                f"screenshot is {width} x {height} pixels; scaling {self.name!r} would send it "
                f"at {sent_w} x {sent_h}, past the largest side of {MAX_FRAME_SIDE} pixels"
            )
        return CoordinateFrame(
            screen_width=width,
            screen_height=height,
            image_width=sent_w,
            image_height=sent_h,
            grid=self.grid,
            rounding=self.rounding,
        )


def smart_resize(
    width: int, height: int, *, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """Each side rounded to a multiple of `factor`, the area kept between the two bounds.

    >>> smart_resize(1920, 1080, factor=28, min_pixels=3136, max_pixels=1280 * 28 * 28)
    (1316, 728)
    """
    w_bar = max(factor, round(width / factor) * factor)
    h_bar = max(factor, round(height / factor) * factor)
    if w_bar * h_bar > max_pixels:
        beta = math.sqrt(width * height / max_pixels)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
    elif w_bar * h_bar < min_pixels:
        beta = math.sqrt(min_pixels / (width * height))
        w_bar = math.ceil(width * beta / factor) * factor
        h_bar = math.ceil(height * beta / factor) * factor
    return w_bar, h_bar


#: The named presets (`AgentConfig.scaling` also takes "auto" and "max_pixels=N").
PRESETS: Final[Mapping[str, ScalingPreset]] = MappingProxyType(
    {
        "native": ScalingPreset(name="native"),
        "openai-high": ScalingPreset(name="openai-high", fit=(2048, 2048), short_side=768),
        "claude": ScalingPreset(name="claude", long_edge=1568, max_pixels=1_150_000),
        "claude-hires": ScalingPreset(name="claude-hires", long_edge=2576, max_pixels=3_750_000),
        "gemini": ScalingPreset(name="gemini", fit=(1536, 1536), grid="rel999", rounding="floor"),
        "qwen2.5-vl": ScalingPreset(
            name="qwen2.5-vl", max_pixels=12845056, multiple=28, min_pixels=3136
        ),
        "qwen2-vl": ScalingPreset(
            name="qwen2-vl", max_pixels=12845056, multiple=28, min_pixels=3136, grid="rel1000"
        ),
        "ui-tars": ScalingPreset(
            name="ui-tars", max_pixels=12845056, multiple=28, min_pixels=3136, grid="rel1000"
        ),
        "ui-tars-1.5": ScalingPreset(
            name="ui-tars-1.5",
            multiple=QWEN_FACTOR,
            min_pixels=100 * 28 * 28,
            max_pixels=16384 * 28 * 28,
        ),
    }
)
_MAX_PIXELS: Final = re.compile(r"max_pixels=([1-9][0-9]{0,11})")

# Model-name families, tried in order on the name's last path part, lower-cased.
_FAMILIES: Final = (
    (re.compile(r"ui-?tars-1[._]5"), "ui-tars-1.5"),
    (re.compile(r"ui-?tars"), "ui-tars"),
    (re.compile(r"qwen2[._]5-?vl"), "qwen2.5-vl"),
    (re.compile(r"qwen2-?vl"), "qwen2-vl"),
    (re.compile(r"^claude-opus-4[-.]([7-9]|\d\d)"), "claude-hires"),
    (re.compile(r"^claude"), "claude"),
    (re.compile(r"^gemini"), "gemini"),
    (re.compile(r"^(gpt-|chatgpt|o\d)"), "openai-high"),
)


def scaling_choices() -> tuple[str, ...]:
    """Every value `AgentConfig.scaling` accepts, for messages and help texts."""
    return ("auto", *PRESETS, "max_pixels=N")


def check_scaling(value: object) -> None:
    """Raise `ConfigError` listing the choices unless `value` names a preset, "auto" or "max_pixels=N"."""
    if isinstance(value, str) and (
        value == "auto" or value in PRESETS or _MAX_PIXELS.fullmatch(value)
    ):
        return
    raise ConfigError(
        f"AgentConfig.scaling must be one of {', '.join(scaling_choices())}; got {excerpt(value)}"
    )


# Native computer-use protocols: their provider turns the tool's coordinates into pixels of
# the screenshot it sent, so the step's frame must read replies as pixels of the sent image.
_NATIVE_PROTOCOL: Final = re.compile(
    r"^(openai-computer|anthropic-computer|gemini-computer)/|computer-use"
)


def answers_in_sent_pixels(model: str) -> bool:
    """Whether `model` acts through a native computer-use tool (its replies arrive as pixels
    of the sent screenshot, whatever grid the vendor's tool uses).

    >>> answers_in_sent_pixels("gemini-computer/gemini-3.5-flash"), answers_in_sent_pixels("gpt-4o")
    (True, False)
    """
    return _NATIVE_PROTOCOL.search(model.strip().lower()) is not None


def preset_for_model(model: str) -> str:
    """The preset `scaling="auto"` picks for a model name (its provider prefix ignored).

    A native computer-use model gets its family's preset only when that preset
    answers in pixels (else `native`).

    >>> preset_for_model("claude-sonnet-4-5"), preset_for_model("vllm/ByteDance-Seed/UI-TARS-1.5-7B")
    ('claude', 'ui-tars-1.5')
    >>> preset_for_model("compat/llama3"), preset_for_model("gemini-computer/gemini-3.5-flash")
    ('native', 'native')
    """
    name = re.split(r"[/|:]", model.strip().lower())[-1]
    for pattern, preset in _FAMILIES:
        if pattern.search(name):
            if answers_in_sent_pixels(model) and PRESETS[preset].grid != "pixels":
                return "native"
            return preset
    return "native"


# Native tools whose vendor shrinks a large screenshot before the model sees it and reads the
# model's coordinates as pixels of the smaller image: Anthropic's (over 1568 px or ~1.15 MP;
# 2576 px / 3.75 MP on Opus 4.7). OpenAI's tools and Gemini's are left as captured: the preview
# tool is told the display size, and Gemini answers on its 0-999 grid, which no resize moves.
_SHRINKING_TOOL: Final = re.compile(r"^anthropic-computer/")


def effective_scaling(scaling: str, model: str) -> str:
    """The setting `scaling` amounts to for `model`: "native" on a native tool whose vendor
    shrinks large screenshots becomes that vendor's pixel preset (so the screenshot is scaled
    here and the step's frame maps the replies back); anything else is returned as given.

    >>> effective_scaling("native", "anthropic-computer/claude-sonnet-4-6")
    'claude'
    >>> effective_scaling("native", "anthropic-computer/claude-opus-4-7")
    'claude-hires'
    >>> effective_scaling("native", "claude-sonnet-4-6"), effective_scaling("native", "gemini-computer/x")
    ('native', 'native')
    """
    if scaling != "native" or _SHRINKING_TOOL.match(model.strip().lower()) is None:
        return scaling
    family = preset_for_model(model)
    return family if family in ("claude", "claude-hires") else "claude"


def vendor_limit(model: str) -> ScalingPreset | None:
    """The preset a native tool's vendor keeps images within, shrinking any larger one before
    the model sees it (`claude`, or `claude-hires` on Opus 4.7, for Anthropic's tool); None
    for every other model.

    >>> vendor_limit("anthropic-computer/claude-sonnet-4-6").name, vendor_limit("gpt-4o")
    ('claude', None)
    """
    if _SHRINKING_TOOL.match(model.strip().lower()) is None:
        return None
    return PRESETS[effective_scaling("native", model)]


def resolve_preset(scaling: str, model: str) -> ScalingPreset:
    """The preset a `scaling` setting means for `model` (see `effective_scaling` for "native").

    On a tool whose vendor shrinks large images (`vendor_limit`), any other pixel preset
    is honoured as far as that vendor keeps it: its size is then fitted within the limit
    (`within`), since the model's coordinates are pixels of the image it saw.

    >>> preset = resolve_preset("claude-hires", "anthropic-computer/claude-sonnet-4-6")
    >>> preset.target_size(1920, 1080), PRESETS["claude-hires"].target_size(1920, 1080)
    ((1429, 804), (1920, 1080))
    """
    check_scaling(scaling)
    if scaling == "auto":
        scaling = preset_for_model(model)
    scaling = effective_scaling(scaling, model)
    match = _MAX_PIXELS.fullmatch(scaling)
    if match is not None:
        preset = ScalingPreset(
            name=scaling, max_pixels=int(match.group(1)), multiple=28, min_pixels=QWEN_MIN_PIXELS
        )
    else:
        preset = PRESETS[scaling]
    if preset.grid != "pixels" and answers_in_sent_pixels(model):
        raise ConfigError(
            f"AgentConfig.scaling {scaling!r} answers on a {preset.grid} grid, but {model!r} acts "
            "through a native computer-use tool whose provider converts its coordinates to pixels "
            "of the sent screenshot: choose a pixel preset (native, auto, claude, openai-high, ...)"
        )
    limit = vendor_limit(model)
    if limit is not None and preset != limit:
        preset = attrs.evolve(preset, within=limit)
    return preset


def resize_png(png: bytes, size: tuple[int, int]) -> bytes:
    """The PNG resampled to `size` with Pillow's LANCZOS filter (the bytes as given when equal)."""
    image = open_screenshot(png)
    if image.size == size:
        return png
    # zlib level 3: on resampled screenshots both faster and smaller than the default 6.
    return encode_png(resample_screenshot(image, size), compress_level=3)


def scale_screenshot(png: bytes, preset: ScalingPreset) -> tuple[bytes, CoordinateFrame]:
    """The screenshot as `preset` sends it, and the frame it is seen in."""
    width, height = png_size(png)
    frame = preset.frame_for(width, height)
    if frame.is_identity:
        return png, frame
    return resize_png(png, (frame.image_width, frame.image_height)), frame
