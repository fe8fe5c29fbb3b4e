"""Agent configuration: the reference PromptAgent's knobs as one frozen value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs
from attrs.validators import ge, instance_of, le, matches_re

from osharm_core.errors import (
    ConfigError,
    Validator,
    excerpt,
    from_fields,
    one_of,
    refusing,
    strict_int,
    strict_number,
    true_or_false,
)
from osharm_core.limits import MAX_CONFIG_INT, SERVER_PROFILE_RULE, ServerLimits, server_limits

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


_INTEGER_LIMIT: Final = "2**63 - 1"


def _integer(low: int) -> Validator:
    return refusing(
        f"an integer from {low} to {_INTEGER_LIMIT}", strict_int, ge(low), le(MAX_CONFIG_INT)
    )


def _number(high: float) -> Validator:
    return refusing(f"a number from 0.0 to {high}", strict_number, ge(0.0), le(high))


#: The name goes on the wire as it is: " o3" would reach the API, and miss the o-series rules.
_MODEL_NAME: Final = refusing(
    "a non-empty string, and must not begin or end with whitespace",
    instance_of(str),
    matches_re(r"\S(.*\S)?", re.DOTALL),
)
_PASSWORD_RULE: Final = "a non-empty one-line string without backticks"


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
    if not isinstance(value, str) or not value:
        problem = "an empty string" if value == "" else f"a {type(value).__name__}"
    elif "\n" in value or "`" in value:
        problem = f"a string of {len(value)} characters holding a line break or a backtick"
    else:
        return value
    raise ConfigError(f"{name} must be {_PASSWORD_RULE}; got {problem}")


def _profile(value: object) -> object:
    """Limits given as a mapping (JSON's, or any other) made `ServerLimits`; the rest as given."""
    return server_limits(value) if isinstance(value, Mapping) else value


def _known_profile(_: object, __: attrs.Attribute[Any], value: object) -> None:
    server_limits(value)  # type: ignore[arg-type]


_SERVER_PROFILE: Final = refusing(SERVER_PROFILE_RULE, _known_profile)


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

    model: str = attrs.field(default="gpt-4-vision-preview", validator=_MODEL_NAME)
    max_tokens: int = attrs.field(default=1500, validator=_integer(1))
    top_p: float = attrs.field(default=0.9, validator=_number(1.0))
    temperature: float = attrs.field(default=0.5, validator=_number(2.0))
    action_space: ActionSpace = attrs.field(default="computer_13", validator=one_of(ACTION_SPACES))
    observation_type: ObservationType = attrs.field(
        default="screenshot_a11y_tree", validator=one_of(OBSERVATION_TYPES)
    )
    max_trajectory_length: int = attrs.field(default=3, validator=_integer(0))
    a11y_tree_max_tokens: int = attrs.field(default=10000, validator=_integer(1))
    platform: Platform = attrs.field(default="ubuntu", validator=one_of(PLATFORMS))
    #: Read the ubuntu class/description columns from the real ubuntu attributes
    #: namespace (the reference reads the windows one and leaves them empty).
    ubuntu_attributes: bool = attrs.field(default=False, validator=true_or_false)
    #: Set-of-marks: test for single-colour boxes on the untouched screenshot
    #: (the reference tests the image while it is being drawn on).
    som_test_original: bool = attrs.field(default=False, validator=true_or_false)
    #: The desktop user's password, named in the prompt's sudo sentence (OSWorld
    #: runners pass `client_password`); the default keeps the reference's bytes.
    client_password: str = attrs.field(default="password", validator=_password)
    #: How screenshots are scaled before sending: "native" (as captured, the
    #: reference's bytes; on an `anthropic-computer/` model the `claude` or
    #: `claude-hires` size Anthropic would shrink it to, see `effective_scaling`; any
    #: other preset is fitted within that size there, see `resolve_preset`),
    #: "auto" (the model family's preset) or a preset name
    #: (see `osharm_core.scaling.PRESETS`, or "max_pixels=N"). Checked with the model,
    #: once every field is (see `resolve_preset`).
    scaling: str = "native"
    #: The limits requests must fit: None (no limit), a profile name ("nginx",
    #: "vllm-default", "anthropic") or explicit `ServerLimits`.
    server_profile: str | ServerLimits | None = attrs.field(
        default=None, converter=_profile, validator=_SERVER_PROFILE
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
        return from_fields(cls, data)

    def __attrs_post_init__(self) -> None:
        if self.observation_type == "som" and self.action_space != "pyautogui":
            raise ConfigError(_SOM_NEEDS_CODE + excerpt(self.action_space))
        from osharm_core.scaling import (
            resolve_preset,
        )  # scaling draws with marks, which reads config

        resolve_preset(self.scaling, self.model)  # a known preset whose grid suits the model


_SOM_NEEDS_CODE: Final = (
    "AgentConfig: observation_type 'som' needs action_space 'pyautogui' (the tagged "
    "screenshot is only explained to code-writing agents); got "
)


def check_config(value: object) -> AgentConfig:
    """`value` when it is an `AgentConfig`, else a `TypeError` saying so (a dict is read
    with `AgentConfig.from_json`): for the adapters' entry points, which take configs from
    their callers.

    >>> check_config({"model": "gpt-4o"})
    Traceback (most recent call last):
    ...
    TypeError: config must be an AgentConfig (build one from a dict with AgentConfig.from_json); got dict {'model': 'gpt-4o'}
    """
    if isinstance(value, AgentConfig):
        return value
    hint = " (build one from a dict with AgentConfig.from_json)" * isinstance(value, Mapping)
    raise TypeError(
        f"config must be an AgentConfig{hint}; got {type(value).__name__} {excerpt(value)}"
    )
