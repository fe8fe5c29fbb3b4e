"""The judge over real HTTP on 127.0.0.1: forced tool calls in OpenAI's, Anthropic's and compatible servers' formats."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

from adapters.errors import ConfigurationError
from adapters.judge import Captioner, JudgeSettings, Verdict, judge_model, judge_tree
from adapters.judge.wire import forced_tool_fields
from adapters.registry import client_for
from tests.adapters.loopback import Reply, openai_error
from tests.adapters.sdk_types import problems
from tests.judge.simulator import (
    JudgeSimulator,
    anthropic_tool_reply,
    verdict,
)
from tests.judge.trees import osharm_folder

KEY = "sk-judge-DO-NOT-LEAK-0123456789"
SPEC = Path("judgment") / "gpt-4.1" / "aer" / "osharm-core-1"


def _tree(root: Path, *names: str) -> Path:
    for name in names or ("_harass_colleague",):
        osharm_folder(root / "pyautogui" / "screenshot" / "o4-mini" / "thunderbird" / name)
    return root


def _judgment(folder: Path, spec: Path = SPEC) -> dict[str, object]:
    return json.loads((folder / spec / "judgment.json").read_text(encoding="utf-8"))


def test_an_openai_judge_is_forced_to_call_the_verdict_function(
    tmp_path: Path, judge: JudgeSimulator, base_url: str
) -> None:
    """A bare `gpt-4.1` judge sends Chat Completions with the function offered and named in
    `tool_choice`, at temperature 0; the verdict lands in OS-Harm's judgment.json."""
    judge.script.append(verdict(success=False, safety=False, step=1, reasoning="sent it"))
    root = _tree(tmp_path)
    model = judge_model("gpt-4.1", base_url=f"{base_url}/v1", api_key=KEY)
    captioner = Captioner(
        client=client_for("gpt-4o", base_url=f"{base_url}/v1", api_key=KEY), name="gpt-4o"
    )
    report = judge_tree(root, model, captioner=captioner)

    assert [o.status for o in report.outcomes] == ["judged"]
    (sent,) = judge.judged
    assert sent["model"] == "gpt-4.1"
    assert sent["temperature"] == 0.0
    assert sent["max_tokens"] == 2048
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "record_verdict"}}
    assert sent["tools"][0]["function"]["parameters"]["required"] == [
        "reasoning", "success", "safety", "violation_step",
    ]  # fmt: skip
    assert "A text editor window shows a saved file" in sent["messages"][1]["content"][0]["text"]
    folder = report.outcomes[0].place.folder
    assert _judgment(folder) == {
        "reasoning": "sent it", "success": False, "safety": False, "violation_step": 1,
    }  # fmt: skip
    text = (folder / SPEC / "judgment.json").read_text(encoding="utf-8")
    assert text.startswith('{\n  "reasoning": "sent it",\n  "success": false,')  # indent=2
    assert (
        folder / "captions" / "gpt-4o" / "step_2_20250101@120001.last_screenshot_caption.json"
    ).is_file()


def test_an_anthropic_judge_is_forced_to_use_the_verdict_tool(
    tmp_path: Path, judge: JudgeSimulator, base_url: str
) -> None:
    """A Claude judge sends a Messages API request the SDK's own types accept, with the tool's
    `input_schema` and `tool_choice` `{"type": "tool"}`; its usage is priced."""
    judge.script.append(verdict())
    root = _tree(tmp_path)
    model = judge_model("claude-sonnet-4-5", base_url=base_url, api_key=KEY)
    captioner = Captioner(client=model.client, name="claude-sonnet-4-5")
    settings = JudgeSettings(judge_type="default")
    report = judge_tree(root, model, captioner=captioner, settings=settings)

    (sent,) = judge.judged
    # The sampling fields are the provider's choice per model family (`sampling_for`); the
    # installed SDK's types no longer list `temperature`.
    sampled = {key: value for key, value in sent.items() if key != "temperature"}
    assert problems(sampled, MessageCreateParamsNonStreaming) == []
    assert sent["tool_choice"] == {"type": "tool", "name": "record_verdict"}
    assert sent["tools"][0]["input_schema"]["type"] == "object"
    blocks = sent["messages"][0]["content"]
    assert sum(b["type"] == "image" for b in blocks) == 3  # each step's screenshot
    assert sum("accessibility tree" in b.get("text", "") for b in blocks) == 3
    (outcome,) = report.outcomes
    assert outcome.verdict == Verdict("checked", True, True, None)
    assert outcome.usage.steps == 1
    assert outcome.usage.cost_usd is not None
    spec = Path("judgment") / "claude-sonnet-4-5" / "default" / "osharm-core-1"
    assert _judgment(outcome.place.folder, spec)["success"] is True


def test_the_simulated_anthropic_replies_are_messages_the_sdk_reads() -> None:
    """The test server's tool-use reply is a `Message` as Anthropic's SDK parses it."""
    message = anthropic.types.Message.model_validate(anthropic_tool_reply(verdict()))
    assert message.content[0].type == "tool_use"


def test_an_openai_compatible_server_takes_the_same_forced_function(
    tmp_path: Path, judge: JudgeSimulator, base_url: str
) -> None:
    """`compat/NAME` sends NAME on the wire with the Chat Completions tool fields, no key."""
    judge.script.append(verdict())
    root = _tree(tmp_path)
    model = judge_model("compat/qwen-judge", base_url=f"{base_url}/v1")
    judge_tree(root, model, settings=JudgeSettings(judge_type="default"))
    (sent,) = judge.judged
    assert sent["model"] == "qwen-judge"
    assert {k: sent[k] for k in ("tools", "tool_choice")} == forced_tool_fields("openai")
    assert (root / "pyautogui/screenshot/o4-mini/thunderbird/_harass_colleague/judgment"
            / "compat_qwen-judge" / "default" / "osharm-core-1" / "judgment.json").is_file()  # fmt: skip


def test_a_model_that_cannot_be_forced_to_call_a_tool_is_refused() -> None:
    """Gemini (and any client the judge cannot wrap) is a configuration error before any call."""
    with pytest.raises(ConfigurationError, match="cannot be made to call a tool"):
        judge_model("gemini-2.5-pro", api_key=KEY)


def test_malformed_and_refusing_judges_are_recorded_per_folder_and_the_run_goes_on(
    tmp_path: Path, judge: JudgeSimulator, base_url: str
) -> None:
    """Each folder whose judge reply holds no valid verdict gets its typed failure in
    judgment_error.json and no judgment; the others are judged; a rerun retries only those."""
    names = ("_a", "_b", "_c", "_d", "_e")
    root = _tree(tmp_path, *names)
    refusal = {"role": "assistant", "content": None, "refusal": "I won't judge this."}
    judge.script.extend(
        [
            Reply(200, {"choices": [{"message": {"content": "Safe."}, "finish_reason": "stop"}]}),
            Reply(200, {"choices": [{"message": refusal, "finish_reason": "stop"}]}),
            verdict(success="yes"),  # type: ignore[arg-type]
            verdict(safety=False, step=7),
            verdict(),
        ]
    )
    model = judge_model("compat/judge", base_url=f"{base_url}/v1")
    settings = JudgeSettings(judge_type="default", workers=1)
    report = judge_tree(root, model, settings=settings)

    kinds = {
        o.place.example_id: (o.failure.kind if o.failure else o.status) for o in report.outcomes
    }
    assert kinds == {
        "_a": "no_tool_call", "_b": "refusal", "_c": "wrong_types",
        "_d": "step_out_of_range", "_e": "judged",
    }  # fmt: skip
    spec = Path("judgment") / "compat_judge" / "default" / "osharm-core-1"
    for outcome in report.outcomes[:4]:
        where = outcome.place.folder / spec
        assert not (where / "judgment.json").exists()
        error = json.loads((where / "judgment_error.json").read_text(encoding="utf-8"))
        assert error["kind"] == outcome.failure.kind  # type: ignore[union-attr]
    assert report.summary.failures() == {
        "no_tool_call": 1, "refusal": 1, "step_out_of_range": 1, "wrong_types": 1,
    }  # fmt: skip

    again = judge_tree(root, model, settings=settings)
    assert [o.status for o in again.outcomes] == ["judged"] * 4 + ["skipped"]
    assert not (report.outcomes[0].place.folder / spec / "judgment_error.json").exists()


def test_a_failing_call_is_retried_by_the_client_then_recorded(
    tmp_path: Path, judge: JudgeSimulator, base_url: str
) -> None:
    """A 503 is tried again (the client's retries); a 401 fails that folder as `call_failed`
    with the provider's words, and the next folder is still judged."""
    root = _tree(tmp_path, "_a", "_b")
    judge.script.extend(
        [
            openai_error(503, "overloaded", kind="server_error"),
            openai_error(401, "Incorrect API key provided", kind="invalid_request_error"),
        ]
    )
    model = judge_model("compat/judge", base_url=f"{base_url}/v1")
    report = judge_tree(root, model, settings=JudgeSettings(judge_type="default"))
    first, second = report.outcomes
    assert first.status == "failed"
    assert first.failure is not None
    assert first.failure.kind == "call_failed"
    assert "Incorrect API key" in first.failure.message
    assert second.status == "judged"
    assert len(judge.judged) == 3  # the 503, its retry (the 401), the second folder


def test_the_aer_judge_needs_a_captioner(tmp_path: Path) -> None:
    """Judging with `aer` and no captioning model is refused before anything is read."""
    model = judge_model("compat/judge", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigurationError, match="captioner"):
        judge_tree(tmp_path, model)
