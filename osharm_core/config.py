"""Agent configuration: the reference PromptAgent's knobs as one frozen value."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import attrs

from osharm_core.errors import ConfigError, check_flag, excerpt, number_excerpt, quoted_keys
from osharm_core.limits import MAX_CONFIG_INT, ServerLimits, server_limits

ObservationType = Literal["screenshot", "a11y_tree", "screenshot_a11y_tree", "som"]
ActionSpace = Literal["computer_13", "pyautogui"]
Platform = Literal["ubuntu", "windows"]

OBSERVATION_TYPES: Final = ("screenshot", "a11y_tree", "screenshot_a11y_tree", "som")
ACTION_SPACES: Final = ("computer_13", "pyautogui")
PLATFORMS: Final = ("ubuntu", "windows")
#: The observation types that use the screenshot.
SCREENSHOT_TYPES: Final = frozenset({"screenshot", "screenshot_a11y_tree", "som"})
#: The observation types that use the accessibility tree.
TREE_TYPES: Final = frozenset({"a11y_tree", "screenshot_a11y_tree", "som"})


Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def _one_of(allowed: tuple[str, ...]) -> Validator:
    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in allowed:
            raise ConfigError(
                f"AgentConfig.{attribute.name} must be one of {', '.join(allowed)}; got {excerpt(value)}"
            )

    return check


def _number(
    low: float | None = None, high: float | None = None, *, integer: bool = False
) -> Validator:
    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        kinds: tuple[type, ...] = (int,) if integer else (int, float)
        what = "an integer" if integer else "a number"
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise ConfigError(
                f"AgentConfig.{attribute.name} must be {what}; got {number_excerpt(value)}"
            )
        assert isinstance(value, int | float)
        if (
            value != value
            or (low is not None and value < low)
            or (high is not None and value > high)
        ):
            bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise ConfigError(
                f"AgentConfig.{attribute.name} must be {bounds}; got {number_excerpt(value)}"
            )
        if integer and value > MAX_CONFIG_INT:
            raise ConfigError(
                f"AgentConfig.{attribute.name} must be at most {MAX_CONFIG_INT}; "
                f"got {number_excerpt(value)}"
            )

    return check


def _flag(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_flag(f"AgentConfig.{attribute.name}", value)


def _model_name(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"AgentConfig.{attribute.name} must be a non-empty string; got {excerpt(value)}"
        )
    if value != value.strip():
        # The name goes on the wire as it is: " o3" would reach the API, and miss the o-series rules.
        raise ConfigError(
            f"AgentConfig.{attribute.name} must not begin or end with whitespace; "
            f"got {excerpt(value)}"
        )


def _password(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    check_password(f"AgentConfig.{attribute.name}", value)


def check_password(name: str, value: object) -> str:
    """`value` when it can be the desktop's sudo password (a non-empty one-line string
    without backticks, as the prompt quotes it), else a `ConfigError` naming `name` that
    says what is wrong with it, never what it is (it is a secret).

    >>> check_password("client_password", "")
    Traceback (most recent call last):
    ...
    osharm_core.errors.ConfigError: client_password must be a non-empty one-line string without backticks; got an empty string
    """
    if not isinstance(value, str):
        problem = f"a {type(value).__name__}"
    elif not value:
        problem = "an empty string"
    elif "\n" in value or "`" in value:
        problem = f"a string of {len(value)} characters holding a line break or a backtick"
    else:
        return value
    raise ConfigError(
        f"{name} must be a non-empty one-line string without backticks; got {problem}"
    )


def _scaling(_: object, __: attrs.Attribute[Any], value: object) -> None:
    from osharm_core.scaling import check_scaling  # scaling draws with marks, which reads config

    check_scaling(value)


def _profile(value: object) -> object:
    """Limits given as a mapping (JSON's, or any other) made `ServerLimits`; the rest as given."""
    if not isinstance(value, Mapping):
        return value
    try:
        return server_limits(value)
    except ConfigError as exc:
        raise ConfigError(f"AgentConfig.{exc}") from None


def _server_profile(_: object, __: attrs.Attribute[Any], value: object) -> None:
    try:
        server_limits(value)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise ConfigError(f"AgentConfig.{exc}") from None


@attrs.frozen(kw_only=True)
class AgentConfig:
    """Everything that shapes one agent's prompts, parsing and sampling.

    The fields and defaults are the reference PromptAgent's; the last three
    select documented improvements over it and default to its behaviour.

    >>> AgentConfig().observation_type
    'screenshot_a11y_tree'
    >>> AgentConfig(observation_type="som", action_space="computer_13")
    Traceback (most recent call last):
    ...
    osharm_core.errors.ConfigError: AgentConfig: observation_type 'som' needs action_space 'pyautogui' (the tagged screenshot is only explained to code-writing agents); got 'computer_13'
    """

    model: str = attrs.field(default="gpt-4-vision-preview", validator=_model_name)
    max_tokens: int = attrs.field(default=1500, validator=_number(1, integer=True))
    top_p: float = attrs.field(default=0.9, validator=_number(0.0, 1.0))
    temperature: float = attrs.field(default=0.5, validator=_number(0.0, 2.0))
    action_space: ActionSpace = attrs.field(default="computer_13", validator=_one_of(ACTION_SPACES))
    observation_type: ObservationType = attrs.field(
        default="screenshot_a11y_tree", validator=_one_of(OBSERVATION_TYPES)
    )
    max_trajectory_length: int = attrs.field(default=3, validator=_number(0, integer=True))
    a11y_tree_max_tokens: int = attrs.field(default=10000, validator=_number(1, integer=True))
    platform: Platform = attrs.field(default="ubuntu", validator=_one_of(PLATFORMS))
    #: Read the ubuntu class/description columns from the real ubuntu attributes
    #: namespace (the reference reads the windows one and leaves them empty).
    ubuntu_attributes: bool = attrs.field(default=False, validator=_flag)
    #: Set-of-marks: test for single-colour boxes on the untouched screenshot
    #: (the reference tests the image while it is being drawn on).
    som_test_original: bool = attrs.field(default=False, validator=_flag)
    #: The desktop user's password, named in the prompt's sudo sentence (OSWorld
    #: runners pass `client_password`); the default keeps the reference's bytes.
    client_password: str = attrs.field(default="password", validator=_password)
    #: How screenshots are scaled before sending: "native" (as captured, the
    #: reference's bytes; on an `anthropic-computer/` model the `claude` or
    #: `claude-hires` size Anthropic would shrink it to, see `effective_scaling`; any
    #: other preset is fitted within that size there, see `resolve_preset`),
    #: "auto" (the model family's preset) or a preset name
    #: (see `osharm_core.scaling.PRESETS`, or "max_pixels=N").
    scaling: str = attrs.field(default="native", validator=_scaling)
    #: The limits requests must fit: None (no limit), a profile name ("nginx",
    #: "vllm-default", "anthropic") or explicit `ServerLimits`.
    server_profile: str | ServerLimits | None = attrs.field(
        default=None, converter=_profile, validator=_server_profile
    )

    def to_json(self) -> dict[str, Any]:
        """Every field as a JSON-ready object (`from_json` reads it back).

        >>> AgentConfig.from_json(AgentConfig(model="gpt-4o").to_json()) == AgentConfig(model="gpt-4o")
        True
        """
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: object) -> AgentConfig:
        """The configuration `to_json` wrote; a `ConfigError` names any unknown or bad field."""
        if not isinstance(data, dict):
            raise ConfigError(f"AgentConfig.from_json expects an object; got {type(data).__name__}")
        known = {field.name for field in attrs.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"AgentConfig.from_json: unknown field(s) {quoted_keys(unknown)}")
        try:
            return cls(**data)
        except RecursionError:  # quoting a deeply nested bad value
            raise ConfigError(
                "AgentConfig.from_json: a field's value is nested too deeply"
            ) from None

    def __attrs_post_init__(self) -> None:
        if self.observation_type == "som" and self.action_space != "pyautogui":
            raise ConfigError(
                "AgentConfig: observation_type 'som' needs action_space 'pyautogui' "
                "(the tagged screenshot is only explained to code-writing agents); "
                f"got {excerpt(self.action_space)}"
            )
        from osharm_core.scaling import resolve_preset  # see _scaling

        resolve_preset(self.scaling, self.model)  # a preset's grid must suit the model's protocol


def check_config(value: object) -> AgentConfig:
    """`value` when it is an `AgentConfig`, else a `TypeError` saying so (a dict is read
    with `AgentConfig.from_json`).

    >>> check_config({"model": "gpt-4o"})
    Traceback (most recent call last):
    ...
    TypeError: config must be an AgentConfig (build one from a dict with AgentConfig.from_json); got dict {'model': 'gpt-4o'}
    """
    if not isinstance(value, AgentConfig):
        hint = (
            " (build one from a dict with AgentConfig.from_json)"
            if isinstance(value, Mapping)
            else ""
        )
        raise TypeError(
            f"config must be an AgentConfig{hint}; got {type(value).__name__} {excerpt(value)}"
        )
    return value
