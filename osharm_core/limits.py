"""What a server accepts in one request: bytes, images, input tokens; named server profiles."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs
from attrs.validators import and_, ge, le, optional

from osharm_core.errors import (
    ConfigError,
    StateError,
    excerpt,
    from_fields,
    number_excerpt,
    refusing,
    strict_int,
)
from osharm_core.frames import MAX_FRAME_SIDE

#: The largest integer setting (a 64-bit signed int: what any server or JSON reader takes).
MAX_CONFIG_INT: Final = 2**63 - 1


_LIMIT: Final = refusing(
    f"a non-negative int up to {MAX_CONFIG_INT}, or None",
    optional(and_(strict_int, ge(0), le(MAX_CONFIG_INT))),
)


@attrs.frozen(kw_only=True)
class ServerLimits:
    """The most one request may hold; `None` means no limit on that measure.

    >>> ServerLimits(max_images=1).exceeded(bytes_=10, images=3, input_tokens=5)
    ('max_images', 3, 1)
    """

    max_bytes: int | None = attrs.field(default=None, validator=_LIMIT)
    max_images: int | None = attrs.field(default=None, validator=_LIMIT)
    max_input_tokens: int | None = attrs.field(default=None, validator=_LIMIT)

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
    if isinstance(profile, Mapping):
        return from_fields(ServerLimits, profile)
    if not isinstance(profile, str) or profile not in SERVER_PROFILES:
        raise ConfigError(f"server_profile must be {SERVER_PROFILE_RULE}; got {excerpt(profile)}")
    return SERVER_PROFILES[profile]


#: What a server profile may be, as refusals say it.
SERVER_PROFILE_RULE: Final = f"one of {', '.join(SERVER_PROFILES)}, explicit ServerLimits, or None"


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
        values = {key: data.get(key, default) for key, (default, _, _) in _RECORD.items()}
        for key, (_, fine, rule) in _RECORD.items():
            if not fine(values[key]):
                raise StateError(f"'{key}' must be {rule}; got {number_excerpt(values[key])}")
        shot = values["screenshot_size"]
        return cls(
            before=RequestSize(**values["before"]),
            after=RequestSize(**values["after"]),
            dropped_images=tuple(values["dropped_images"]),
            screenshot_size=None if shot is None else (shot[0], shot[1]),
            tree_tokens=values["tree_tokens"],
        )


def _whole(value: object, high: int) -> bool:
    """Whether `value` is an int (not a bool) from 1 to `high`."""
    return type(value) is int and 1 <= value <= high


def _size(value: object) -> bool:
    return type(value) is dict and value.keys() == _SIZE_KEYS and all(map(_count, value.values()))


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


_SIZE_KEYS: Final = {"bytes", "images", "input_tokens"}
#: What a degradation record holds: each key's default, its test and the rule it states.
_RECORD: Final[Mapping[str, tuple[Any, Callable[[Any], bool], str]]] = MappingProxyType(
    {
        "before": (None, _size, "an object of integer bytes, images, input_tokens"),
        "after": (None, _size, "an object of integer bytes, images, input_tokens"),
        "dropped_images": (
            [],
            lambda v: type(v) is list and all(_whole(turn, MAX_CONFIG_INT) for turn in v),
            f"a list of turn numbers from 1 to {MAX_CONFIG_INT}",
        ),
        "screenshot_size": (
            None,
            lambda v: (
                v is None
                or (
                    type(v) is list
                    and len(v) == 2
                    and all(_whole(side, MAX_FRAME_SIDE) for side in v)
                )
            ),
            f"null or [width, height], ints from 1 to {MAX_FRAME_SIDE}",
        ),
        "tree_tokens": (
            None,
            lambda v: v is None or _whole(v, MAX_CONFIG_INT),
            f"null or an int from 1 to {MAX_CONFIG_INT}",
        ),
    }
)
