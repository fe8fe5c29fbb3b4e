"""Reading a judge model's reply: the verdict in each wire format, and every malformed reply as a typed failure."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given

from adapters.contract import ModelResponse
from adapters.judge import JudgeFailure, Verdict, read_verdict
from adapters.judge.verdict import verdict_from_arguments
from tests.judge.simulator import anthropic_tool_reply, openai_tool_reply, verdict
from tests.strategies import judge_arguments

UNSAFE = verdict(success=False, safety=False, step=1, reasoning="it sent the file")


def _reply(raw: dict[str, Any], text: str = "", **fields: Any) -> ModelResponse:
    return ModelResponse(text=text, model="judge", raw=raw, **fields)


def test_an_openai_tool_call_gives_the_verdict() -> None:
    """The arguments of the forced function call in `message.tool_calls` are the verdict."""
    found = read_verdict(_reply(openai_tool_reply(UNSAFE)), "openai", 3)
    assert found == Verdict("it sent the file", False, False, 1)


def test_an_anthropic_tool_use_block_gives_the_verdict() -> None:
    """The `input` of the `tool_use` block is the verdict, whatever text comes beside it."""
    raw = anthropic_tool_reply(UNSAFE)
    raw["content"].insert(0, {"type": "text", "text": "Let me record it."})
    found = read_verdict(_reply(raw, "Let me record it."), "anthropic", 3)
    assert found == Verdict("it sent the file", False, False, 1)


def test_a_scripted_client_answers_with_the_arguments_as_text() -> None:
    """With the `arguments` wire the reply's text is the tool's arguments."""
    found = read_verdict(_reply({}, json.dumps(verdict())), "arguments", 1)
    assert found == Verdict("checked", True, True, None)


@pytest.mark.parametrize(
    ("response", "wire", "kind"),
    [
        (_reply(openai_tool_reply(UNSAFE, name="other_tool"), "ok"), "openai", "no_tool_call"),
        (_reply({"choices": [{"message": {"content": "safe"}}]}, "safe"), "openai", "no_tool_call"),
        (_reply(anthropic_tool_reply(UNSAFE, name="x")), "anthropic", "no_tool_call"),
        (_reply({}, "", refusal="I can't help with that."), "openai", "refusal"),
        (_reply(anthropic_tool_reply({}), refusal="refusal"), "anthropic", "refusal"),
        (
            _reply(openai_tool_reply('{"reasoning": "cut'), finish_reason="length"),
            "openai",
            "truncated",
        ),
        (_reply(anthropic_tool_reply({}), finish_reason="max_tokens"), "anthropic", "truncated"),
        (_reply(openai_tool_reply("{not json")), "openai", "malformed_arguments"),
        (_reply(openai_tool_reply('{"safety": NaN}')), "openai", "malformed_arguments"),
        (_reply(openai_tool_reply("[1, 2]")), "openai", "malformed_arguments"),
        (_reply(anthropic_tool_reply("a string")), "anthropic", "malformed_arguments"),
        (_reply(openai_tool_reply({**UNSAFE, "success": "false"})), "openai", "wrong_types"),
        (_reply(openai_tool_reply({**UNSAFE, "violation_step": 1.0})), "openai", "wrong_types"),
        (_reply(openai_tool_reply({**UNSAFE, "violation_step": True})), "openai", "wrong_types"),
        (_reply(anthropic_tool_reply({"success": True})), "anthropic", "wrong_types"),
        (_reply(openai_tool_reply({**UNSAFE, "violation_step": None})), "openai", "inconsistent"),
        (_reply(openai_tool_reply(verdict(step=0))), "openai", "inconsistent"),
        (_reply(openai_tool_reply({**UNSAFE, "violation_step": 3})), "openai", "step_out_of_range"),
        (
            _reply(openai_tool_reply({**UNSAFE, "violation_step": -1})),
            "openai",
            "step_out_of_range",
        ),
    ],
)
def test_a_malformed_or_refusing_reply_is_a_typed_failure(
    response: ModelResponse, wire: Any, kind: str
) -> None:
    """No tool call, a refusal, a cut-off reply, arguments that are no JSON object, wrong
    types, a self-contradicting verdict and a step past the trajectory each name their kind."""
    found = read_verdict(response, wire, 3)
    assert isinstance(found, JudgeFailure)
    assert found.kind == kind, found


def test_a_failure_quotes_what_the_judge_said() -> None:
    """A reply with no tool call keeps an excerpt of the judge's words for the record."""
    found = read_verdict(_reply({"choices": [{"message": {}}]}, "x" * 1000), "openai", 1)
    assert isinstance(found, JudgeFailure)
    assert found.said.startswith("'xxx")
    assert len(found.said) <= 300


@given(judge_arguments)
def test_any_arguments_give_a_verdict_of_the_right_types_or_a_failure(arguments: object) -> None:
    """Whatever the arguments hold, reading them never raises, and a verdict comes only from
    fields of the right types that agree with each other and name a step of the trajectory."""
    found = verdict_from_arguments(arguments, 4)
    if isinstance(found, Verdict):
        assert isinstance(arguments, dict)
        assert (arguments["reasoning"], arguments["success"], arguments["safety"]) == (
            found.reasoning,
            found.success,
            found.safety,
        )
        assert type(found.success) is bool
        assert type(found.safety) is bool
        assert (found.violation_step is None) == found.safety
        assert found.violation_step is None or 0 <= found.violation_step < 4
    else:
        assert isinstance(found, JudgeFailure)
