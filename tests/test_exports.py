"""The public names DESIGN.md promises exist and are exported from the packages."""

from __future__ import annotations

import osharm_core

DESIGN_CORE_NAMES = {
    "AgentConfig",
    "system_prompt",
    "Observation",
    "AgentState",
    "linearize_accessibility_tree",
    "trim_accessibility_tree",
    "tag_screenshot",
    "prepare_step",
    "complete_step",
    "parse_code_from_string",
    "parse_code_from_som_string",
    "parse_actions_from_string",
    "validate_computer_13",
    "render_openai_chat",
}


def test_core_exports_every_design_name() -> None:
    """Every name in DESIGN.md's table for osharm_core is importable from the package."""
    missing = DESIGN_CORE_NAMES - set(osharm_core.__all__)
    assert not missing
    for name in osharm_core.__all__:
        assert hasattr(osharm_core, name), name


def test_all_is_complete() -> None:
    """__all__ lists every public name the package defines, once each."""
    public = {n for n in vars(osharm_core) if not n.startswith("_")}
    modules = {n for n, v in vars(osharm_core).items() if type(v).__name__ == "module"}
    assert public - modules - {"annotations"} == set(osharm_core.__all__)
    assert len(osharm_core.__all__) == len(set(osharm_core.__all__))


def test_adapters_export_the_design_names() -> None:
    """adapters exports PromptAgent, client_for, the client classes and the fake client."""
    import adapters

    for name in ("PromptAgent", "client_for", "FakeClient", "HttpModelClient", "ReplayClient"):
        assert name in adapters.__all__
    public = {n for n in vars(adapters) if not n.startswith("_")}
    modules = {n for n, v in vars(adapters).items() if type(v).__name__ == "module"}
    assert public - modules == set(adapters.__all__)


def test_client_for_accepts_the_design_keywords() -> None:
    """client_for takes exactly the keywords outside code calls it with."""
    import inspect

    from adapters import client_for

    params = inspect.signature(client_for).parameters
    assert list(params) == ["model", "base_url", "api_key", "http_client", "retry", "timeout"]
    assert all(params[p].kind is inspect.Parameter.KEYWORD_ONLY for p in list(params)[1:])
