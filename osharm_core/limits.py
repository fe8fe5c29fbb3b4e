"""What a server accepts in one request: bytes, images, input tokens; named server profiles."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs

from osharm_core.errors import ConfigError, StateError, excerpt, number_excerpt, quoted_keys
from osharm_core.frames import MAX_FRAME_SIDE

#: The largest integer setting (a 64-bit signed int: what any server or JSON reader takes).
MAX_CONFIG_INT: Final = 2**63 - 1


def _optional_positive(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CONFIG_INT:
        raise ConfigError(
            f"ServerLimits.{attribute.name} must be a non-negative int up to {MAX_CONFIG_INT}, "
            f"or None; got {number_excerpt(value)}"
        )


@attrs.frozen(kw_only=True)
class ServerLimits:
    """The most one request may hold; `None` means no limit on that measure.

    >>> ServerLimits(max_images=1).exceeded(bytes_=10, images=3, input_tokens=5)
    ('max_images', 3, 1)
    """

    max_bytes: int | None = attrs.field(default=None, validator=_optional_positive)
    max_images: int | None = attrs.field(default=None, validator=_optional_positive)
    max_input_tokens: int | None = attrs.field(default=None, validator=_optional_positive)

    def exceeded(
        self, *, bytes_: int, images: int, input_tokens: int
    ) -> tuple[str, int, int] | None:
        """The first limit a request of this size breaks, as `(name, value, maximum)`, or None."""
        for name, value in (
            ("max_bytes", bytes_),
            ("max_images", images),
            ("max_input_tokens", input_tokens),
        ):
            maximum = getattr(self, name)
            if maximum is not None and value > maximum:
                return name, value, maximum
        return None

    def to_json(self) -> dict[str, Any]:
        """The limits as a JSON-ready object."""
        return attrs.asdict(self)


#: Named server profiles. nginx's `client_max_body_size` defaults to 1m (1 MiB);
#: vLLM accepts one image per prompt unless started with `--limit-mm-per-prompt`;
#: Anthropic documents 32 MB per request and 100 images per request on
#: 200k-context models (docs.claude.com, "Vision: Basics and limits").
SERVER_PROFILES: Final[Mapping[str, ServerLimits]] = MappingProxyType(
    {
        "nginx": ServerLimits(max_bytes=1024 * 1024),
        "vllm-default": ServerLimits(max_images=1),
        "anthropic": ServerLimits(max_bytes=32 * 1000 * 1000, max_images=100),
    }
)


def server_limits(profile: str | ServerLimits | Mapping[str, Any] | None) -> ServerLimits | None:
    """The limits a `server_profile` setting names (a profile name, limits, their JSON, or None).

    >>> server_limits("nginx")
    ServerLimits(max_bytes=1048576, max_images=None, max_input_tokens=None)
    """
    if profile is None or isinstance(profile, ServerLimits):
        return profile
    if isinstance(profile, str):
        if profile not in SERVER_PROFILES:
            raise ConfigError(
                f"server_profile must be one of {', '.join(SERVER_PROFILES)}, explicit "
                f"ServerLimits, or None; got {excerpt(profile)}"
            )
        return SERVER_PROFILES[profile]
    if isinstance(profile, Mapping):
        unknown = set(profile) - {f.name for f in attrs.fields(ServerLimits)}
        if unknown:
            raise ConfigError(f"server_profile: unknown limit(s) {quoted_keys(unknown)}")
        return ServerLimits(**profile)
    raise ConfigError(
        f"server_profile must be a profile name, ServerLimits or None; got {type(profile).__name__}"
    )


@attrs.frozen(kw_only=True)
class RequestSize:
    """One request as measured before sending: encoded JSON bytes, images, estimated input tokens."""

    bytes: int
    images: int
    input_tokens: int

    def to_json(self) -> dict[str, int]:
        """The size as a JSON-ready object."""
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class Degradation:
    """What was left out of one request so it fits its server's limits, in the declared order.

    `dropped_images` are the (1-based) turns whose history screenshots were left
    out (their text kept); `screenshot_size` the size the current screenshot was
    downscaled to; `tree_tokens` the token limit trees were trimmed to.
    `before` and `after` measure the request as built and as sent.
    """

    before: RequestSize
    after: RequestSize
    dropped_images: tuple[int, ...] = ()
    screenshot_size: tuple[int, int] | None = None
    tree_tokens: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready object (`from_json` reads it back)."""
        return {
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "dropped_images": list(self.dropped_images),
            "screenshot_size": None if self.screenshot_size is None else list(self.screenshot_size),
            "tree_tokens": self.tree_tokens,
        }

    @classmethod
    def from_json(cls, data: object) -> Degradation:
        """The record `to_json` wrote; a `StateError` (a `ValueError`) names what is malformed."""
        if not isinstance(data, dict):
            raise StateError(f"a degradation record is an object; got {type(data).__name__}")

        def size(value: object) -> RequestSize:
            if not isinstance(value, dict) or not all(
                isinstance(value.get(k), int) for k in ("bytes", "images", "input_tokens")
            ):
                raise StateError("'before' and 'after' need integer bytes, images, input_tokens")
            return RequestSize(
                bytes=value["bytes"], images=value["images"], input_tokens=value["input_tokens"]
            )

        dropped = data.get("dropped_images", [])
        shot = data.get("screenshot_size")
        tokens = data.get("tree_tokens")
        if not isinstance(dropped, list):
            raise StateError(f"'dropped_images' must be a list; got {type(dropped).__name__}")
        for turn in dropped:
            _check_whole(turn, MAX_CONFIG_INT, "'dropped_images' holds turn numbers")
        if shot is not None:
            if not isinstance(shot, list) or len(shot) != 2:
                what = f"{len(shot)} values" if isinstance(shot, list) else type(shot).__name__
                raise StateError(f"'screenshot_size' must be null or [width, height]; got {what}")
            for side in shot:
                _check_whole(side, MAX_FRAME_SIDE, "'screenshot_size' sides must be ints")
        if tokens is not None and not _whole(tokens, 1, MAX_CONFIG_INT):
            raise StateError(
                f"'tree_tokens' must be null or an int from 1 to {MAX_CONFIG_INT}; "
                f"got {number_excerpt(tokens)}"
            )
        return cls(
            before=size(data.get("before")),
            after=size(data.get("after")),
            dropped_images=tuple(dropped),
            screenshot_size=None if shot is None else (shot[0], shot[1]),
            tree_tokens=tokens,
        )


def _whole(value: object, low: int, high: int) -> bool:
    """Whether `value` is an int (not a bool) from `low` to `high`."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_whole(value: object, high: int, what: str) -> None:
    if not _whole(value, 1, high):
        raise StateError(f"{what} from 1 to {high}; got {number_excerpt(value)}")
