"""AgentConfig: the reference defaults and validation that names the bad field."""

from __future__ import annotations

import attrs
import pytest

from osharm_core import AgentConfig, ConfigError
from tests.facade.helpers import REFERENCE_DEFAULTS


def test_defaults_are_the_reference_agents() -> None:
    """Every default equals the reference PromptAgent's constructor default."""
    config = AgentConfig()
    assert attrs.asdict(config) == {
        **REFERENCE_DEFAULTS,
        "ubuntu_attributes": False,
        "som_test_original": False,
        "scaling": "native",
        "server_profile": None,
    }


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("observation_type", "video", "observation_type must be one of screenshot, a11y_tree"),
        ("action_space", "xdotool", "action_space must be one of computer_13, pyautogui"),
        ("platform", "macos", "platform must be one of ubuntu, windows"),
        ("max_tokens", 0, r"max_tokens must be an integer from 1 to .*; got 0$"),
        ("max_tokens", 1.5, r"max_tokens must be an integer from 1 .*; got 1\.5$"),
        ("top_p", 1.5, r"top_p must be a number from 0\.0 to 1\.0; got 1\.5$"),
        ("temperature", float("nan"), "temperature must be a number from 0.0 to 2.0; got nan$"),
        ("temperature", True, "temperature must be a number from 0.0 to 2.0; got True$"),
        ("max_trajectory_length", -1, "max_trajectory_length must be an integer from 0 .*; got -1"),
        ("a11y_tree_max_tokens", 0, "a11y_tree_max_tokens must be an integer from 1 .*; got 0"),
        ("model", "  ", "model must be a non-empty string.*; got '  '$"),
    ],
)
def test_bad_values_name_the_field(field: str, value: object, message: str) -> None:
    """A bad value raises a ValueError naming the field and what it allows."""
    with pytest.raises(ConfigError, match=message):
        AgentConfig(**{field: value})  # type: ignore[arg-type]


def test_som_needs_pyautogui() -> None:
    """The pair som + computer_13 is refused at construction, as the reference does."""
    with pytest.raises(ValueError, match="som"):
        AgentConfig(observation_type="som", action_space="computer_13")
    assert AgentConfig(observation_type="som", action_space="pyautogui").observation_type == "som"


def test_evolve_revalidates() -> None:
    """Changing a config with attrs.evolve runs the same validation."""
    with pytest.raises(ConfigError):
        attrs.evolve(
            AgentConfig(action_space="pyautogui", observation_type="som"),
            action_space="computer_13",
        )


def test_frozen() -> None:
    """A config cannot be changed in place."""
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        AgentConfig().model = "x"  # type: ignore[misc]


@pytest.mark.parametrize("field", ["ubuntu_attributes", "som_test_original"])
@pytest.mark.parametrize("value", ["false", "no", 0, 1, None, [1], 1.0])
def test_flags_take_only_booleans(field: str, value: object) -> None:
    """The string "false" (or 0, None, ...) does not turn an option on: only a bool is taken,
    and from_json names the field."""
    with pytest.raises(ConfigError, match=f"AgentConfig.{field} must be true or false"):
        AgentConfig.from_json({field: value})
    assert getattr(AgentConfig(**{field: True}), field) is True


@pytest.mark.parametrize(
    "field", ["max_tokens", "top_p", "temperature", "max_trajectory_length", "a11y_tree_max_tokens"]
)
@pytest.mark.parametrize("value", [10**5000, -(10**5000), 2**63], ids=["huge", "-huge", "2**63"])
def test_huge_numbers_are_a_config_error_naming_the_field(field: str, value: int) -> None:
    """A number too large to write as text (or past a 64-bit int) is refused as a ConfigError,
    not a raw ValueError from quoting it; the largest 64-bit int is still taken."""
    with pytest.raises(ConfigError, match=f"AgentConfig.{field} must be"):
        AgentConfig.from_json({field: value})
    assert AgentConfig(max_tokens=2**63 - 1).max_tokens == 2**63 - 1


@pytest.mark.parametrize(
    "field", ["observation_type", "action_space", "platform", "scaling", "server_profile", "model"]
)
def test_a_huge_bad_value_is_quoted_in_part(field: str) -> None:
    """A megabyte of garbage in a field gives a message of a line, not a megabyte."""
    value = " " * 10 if field == "model" else "x" * 1_000_000
    with pytest.raises(ConfigError, match=f"AgentConfig.{field} must") as caught:
        AgentConfig(**{field: value})  # type: ignore[arg-type]
    assert len(str(caught.value)) < 400


@pytest.mark.parametrize(
    ("password", "problem"),
    [
        ("hunter2\nmore", "a string of 12 characters holding a line break or a backtick"),
        ("pass`word", "a string of 9 characters holding a line break or a backtick"),
        ("", "an empty string"),
        (1234, "a int"),
    ],
)
def test_a_refused_password_is_never_echoed(password: object, problem: str) -> None:
    """The client password is a secret: the error says what is wrong with it, not what it is."""
    with pytest.raises(ConfigError, match="client_password must be") as caught:
        AgentConfig(client_password=password)  # type: ignore[arg-type]
    assert str(caught.value).endswith(f"got {problem}")
    if password:
        assert str(password) not in str(caught.value)
