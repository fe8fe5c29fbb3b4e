"""The judge over result trees on disk: ours and OS-Harm's layouts, what each judge type is shown, captions, resume."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from adapters.judge import (
    Captioner,
    JudgeModel,
    JudgeSettings,
    Verdict,
    judge_tree,
    task_kind,
    trajectory_folders,
)
from adapters.judge.run import NO_SCREENSHOT
from adapters.testing import FakeClient
from osharm_core import ConfigError, ImagePart, TextPart
from tests.conftest import OBSERVATIONS
from tests.judge.simulator import verdict
from tests.judge.trees import osharm_folder, run_task_list, write_verdict

SAFE = json.dumps(verdict())


def _scripted(*replies: str) -> JudgeModel:
    return JudgeModel(client=FakeClient(replies), name="scripted", wire="arguments")


def _captioner(*captions: str) -> Captioner:
    return Captioner(client=FakeClient(captions or ("A desktop.",)), name="captioner")


def _user_parts(client: FakeClient, call: int = 0) -> tuple[TextPart | ImagePart, ...]:
    return client.requests[call].messages[1].parts


def test_a_tree_the_library_wrote_is_judged_folder_by_folder_with_its_domains_and_kinds(
    tmp_path: Path,
) -> None:
    """`run-tasks` folders are found under the model's folder; each is judged step by step
    with the screenshots and trees its agent saw, and the summary groups them."""
    results = run_task_list(tmp_path)
    unsafe = json.dumps(verdict(success=False, safety=False, step=1))
    judge = _scripted(SAFE, unsafe, SAFE)
    report = judge_tree(results, judge, settings=JudgeSettings(judge_type="default"))

    assert [(o.place.domain, o.place.example_id, o.kind) for o in report.outcomes] == [
        ("chrome", "__injected_page", "injection"),
        ("os", "___delete_logs", "misbehaviour"),
        ("os", "_harass_colleague", "misuse"),
    ]
    parts = _user_parts(judge.client)  # type: ignore[arg-type]
    assert sum(isinstance(p, ImagePart) for p in parts) == 2  # two model calls: a click, DONE
    assert sum(isinstance(p, TextPart) and "accessibility tree" in p.text for p in parts) == 2
    assert "The task given to the agent: Do __injected_page" in parts[0].text  # type: ignore[union-attr]
    rows = {row.group: row.cells()[1:] for row in report.summary.rows()}
    assert rows["all"] == ("3", "66.7%", "66.7%", "0")
    assert rows["domain os"] == ("2", "50.0%", "50.0%", "0")
    assert rows["kind misbehaviour"] == ("1", "0.0%", "0.0%", "0")


def test_an_osharm_folder_is_judged_from_its_better_log_alone(tmp_path: Path) -> None:
    """A reference-written folder (no tree files, a screenshot name off by one after a step
    with no action) shows each step the screenshot it saw and better_log's tree text."""
    folder = osharm_folder(tmp_path / "os" / "_task", ("Looking.", "Typing.", "DONE"))
    (folder / "step_1_20250101@120000.png").rename(folder / "step_1_20250101@120000.moved")
    log = json.loads((folder / "better_log.json").read_text(encoding="utf-8"))
    log["steps"][1]["screenshot_file"] = "step_1_20250101@120000.png"  # no longer there
    (folder / "better_log.json").write_text(json.dumps(log), encoding="utf-8")

    judge = _scripted(SAFE)
    judge_tree(tmp_path, judge, settings=JudgeSettings(judge_type="default"))
    parts = _user_parts(judge.client)  # type: ignore[arg-type]
    images = [p for p in parts if isinstance(p, ImagePart)]
    assert len(images) == 3  # the missing one falls back to step_0.png, as the reader resolves it
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    assert any("label\tStep 2 tree" in t for t in texts)
    assert "Step 1: the agent's response\nTyping." in texts


@pytest.mark.parametrize(
    ("ran", "override", "images", "trees"),
    [
        ("a11y_tree", None, 0, 3),
        ("screenshot", None, 3, 0),
        ("som", None, 3, 0),
        ("screenshot_a11y_tree", "a11y_tree", 0, 3),
        ("a11y_tree", "screenshot", 3, 0),
    ],
)
def test_the_step_by_step_judge_shows_what_the_agent_saw_unless_told_otherwise(
    tmp_path: Path, ran: str, override: str | None, images: int, trees: int
) -> None:
    """Each step shows the run's own observation parts (better_log's params), or those of
    the observation type given."""
    osharm_folder(tmp_path / "os" / "_task", observation_type=ran)
    judge = _scripted(SAFE)
    settings = JudgeSettings(judge_type="default", observation_type=override)  # type: ignore[arg-type]
    judge_tree(tmp_path, judge, settings=settings)
    parts = _user_parts(judge.client)  # type: ignore[arg-type]
    assert sum(isinstance(p, ImagePart) for p in parts) == images
    assert sum(isinstance(p, TextPart) and "accessibility tree" in p.text for p in parts) == trees


def test_the_aer_judge_reads_responses_and_a_cached_caption_of_the_last_screenshot(
    tmp_path: Path,
) -> None:
    """`aer` sends no image to the judge: the responses, then the caption of the last saved
    screenshot, asked once and reused while that screenshot is unchanged."""
    folder = osharm_folder(tmp_path / "os" / "_task")
    captioner = _captioner("Mousepad shows notes.", "Mousepad shows other notes.")
    judge = _scripted(SAFE, SAFE, SAFE)
    settings = JudgeSettings(rejudge=True)
    judge_tree(tmp_path, judge, captioner=captioner, settings=settings)
    judge_tree(tmp_path, judge, captioner=captioner, settings=settings)
    assert captioner.client.calls == 1  # type: ignore[attr-defined]
    (asked,) = captioner.client.requests  # type: ignore[attr-defined]
    assert asked.messages[1].parts[1] == ImagePart(asked.messages[1].parts[1].data)
    (text,) = _user_parts(judge.client, 1)  # type: ignore[arg-type]
    assert isinstance(text, TextPart)
    assert "Step 2:\nDONE" in text.text
    assert "Mousepad shows notes." in text.text
    cache = (
        folder / "captions" / "captioner" / "step_2_20250101@120001.last_screenshot_caption.json"
    )
    record = json.loads(cache.read_text(encoding="utf-8"))
    assert record["caption"] == "Mousepad shows notes."
    assert len(record["sha256"]) == 64

    (folder / "step_2_20250101@120001.png").write_bytes(
        (OBSERVATIONS / "xfce4_terminal_shell.png").read_bytes()
    )
    judge_tree(tmp_path, judge, captioner=captioner, settings=settings)
    assert captioner.client.calls == 2  # type: ignore[attr-defined]
    assert "other notes" in _user_parts(judge.client, 2)[0].text  # type: ignore[arg-type,union-attr]


def test_a_folder_with_no_screenshot_is_judged_with_that_said(tmp_path: Path) -> None:
    """With no screenshot saved at all, the `aer` judge is told so and no caption is asked."""
    folder = osharm_folder(tmp_path / "os" / "_task", ("DONE",))
    (folder / "step_0.png").unlink()
    judge, captioner = _scripted(SAFE), _captioner()
    judge_tree(tmp_path, judge, captioner=captioner)
    assert captioner.client.calls == 0  # type: ignore[attr-defined]
    assert NO_SCREENSHOT in _user_parts(judge.client)[0].text  # type: ignore[arg-type,union-attr]


def test_the_all_step_aer_judge_reads_each_steps_caption_before_its_response(
    tmp_path: Path,
) -> None:
    """`all_step_aer`: each step's screenshot captioned (each stem once: the final screenshot
    is the last step's, its caption reused), shown before the step's response; no image."""
    folder = osharm_folder(tmp_path / "os" / "_task")
    captioner = _captioner("Step zero screen.", "Step one screen.", "Step two screen.")
    judge = _scripted(SAFE)
    judge_tree(
        tmp_path, judge, captioner=captioner, settings=JudgeSettings(judge_type="all_step_aer")
    )
    assert captioner.client.calls == 3  # type: ignore[attr-defined]
    (text,) = _user_parts(judge.client)  # type: ignore[arg-type]
    assert isinstance(text, TextPart)
    described = "the screen before the action, as described by a captioning model"
    assert f"Step 0: {described}\nStep zero screen.\nStep 0:\n" in text.text
    assert f"Step 2: {described}\nStep two screen.\nStep 2:\nDONE" in text.text
    assert text.text.count("Step two screen.") == 2  # the last step's screen is the final one
    assert sorted(p.name for p in (folder / "captions" / "captioner").iterdir()) == [
        "step_0.last_screenshot_caption.json",
        "step_1_20250101@120000.last_screenshot_caption.json",
        "step_2_20250101@120001.last_screenshot_caption.json",
    ]
    spec = folder / "judgment" / "scripted" / "all_step_aer" / "osharm-core-1"
    assert (spec / "judgment.json").is_file()


def test_the_captioned_default_judge_shows_each_screen_and_its_caption(tmp_path: Path) -> None:
    """`captioned_default`: step by step as `default` shows it, each screenshot followed by its
    caption; with the trees alone shown, the screenshots are still captioned."""
    osharm_folder(tmp_path / "os" / "_task", ("Looking.", "DONE"))
    captioner = _captioner("First screen.", "Second screen.")
    judge = _scripted(SAFE, SAFE)
    settings = JudgeSettings(judge_type="captioned_default")
    judge_tree(tmp_path, judge, captioner=captioner, settings=settings)
    parts = _user_parts(judge.client)  # type: ignore[arg-type]
    kinds = [type(p).__name__ for p in parts]
    assert kinds.count("ImagePart") == 2
    first = kinds.index("ImagePart")
    assert "First screen." in parts[first + 1].text  # type: ignore[union-attr]
    trees_only = JudgeSettings(
        judge_type="captioned_default", observation_type="a11y_tree", rejudge=True
    )
    judge_tree(tmp_path, judge, captioner=captioner, settings=trees_only)
    assert captioner.client.calls == 2  # type: ignore[attr-defined]  # cached
    again = _user_parts(judge.client, 1)  # type: ignore[arg-type]
    assert not any(isinstance(p, ImagePart) for p in again)
    assert any(isinstance(p, TextPart) and "Second screen." in p.text for p in again)


def test_the_a11y_tree_judge_shows_the_trees_alone_and_needs_no_captioner(tmp_path: Path) -> None:
    """`a11y_tree`: each step's tree and response, whatever the run's agent saw."""
    osharm_folder(tmp_path / "os" / "_task", observation_type="screenshot")
    judge = _scripted(SAFE)
    judge_tree(tmp_path, judge, settings=JudgeSettings(judge_type="a11y_tree"))
    parts = _user_parts(judge.client)  # type: ignore[arg-type]
    assert not any(isinstance(p, ImagePart) for p in parts)
    assert sum(isinstance(p, TextPart) and "accessibility tree" in p.text for p in parts) == 3


@pytest.mark.parametrize("judge_type", ["aer", "all_step_aer", "captioned_default"])
def test_the_judges_that_show_captions_need_a_captioner(tmp_path: Path, judge_type: str) -> None:
    with pytest.raises(ConfigError, match=f"the {judge_type} judge shows captions"):
        judge_tree(tmp_path, _scripted(), settings=JudgeSettings(judge_type=judge_type))  # type: ignore[arg-type]


def test_folders_judged_already_are_skipped_unless_rejudged(tmp_path: Path) -> None:
    """A folder with this judge's judgment is skipped (its verdict still counted); another
    judge's judgment (OS-Harm's own) does not count; `rejudge` judges again."""
    first = osharm_folder(tmp_path / "os" / "_first")
    second = osharm_folder(tmp_path / "os" / "_second")
    write_verdict(first, "scripted/default/osharm-core-1", verdict(success=False))
    write_verdict(second, "gpt-4.1/aer/v3", verdict())
    judge = _scripted(SAFE)
    settings = JudgeSettings(judge_type="default")
    report = judge_tree(tmp_path, judge, settings=settings)
    assert [o.status for o in report.outcomes] == ["skipped", "judged"]
    assert report.outcomes[0].verdict == Verdict("checked", False, True, None)
    assert report.summary.rows()[0].cells()[1:3] == ("2", "50.0%")

    again = judge_tree(
        tmp_path, _scripted(SAFE, SAFE), settings=JudgeSettings(judge_type="default", rejudge=True)
    )
    assert [o.status for o in again.outcomes] == ["judged", "judged"]


def test_an_unreadable_folder_is_a_failure_and_the_run_goes_on(tmp_path: Path) -> None:
    """better_log.json that is no JSON, or holds no steps, fails its folder; the next is judged."""
    broken = osharm_folder(tmp_path / "os" / "_a")
    (broken / "better_log.json").write_text("{not json", encoding="utf-8")
    empty = osharm_folder(tmp_path / "os" / "_b")
    (empty / "better_log.json").write_text('{"steps": []}', encoding="utf-8")
    osharm_folder(tmp_path / "os" / "_c")
    report = judge_tree(tmp_path, _scripted(SAFE), settings=JudgeSettings(judge_type="default"))
    assert [(o.status, o.failure and o.failure.kind) for o in report.outcomes] == [
        ("failed", "unreadable_folder"),
        ("failed", "unreadable_folder"),
        ("judged", None),
    ]
    assert "better_log.json" in report.outcomes[0].failure.message  # type: ignore[union-attr]


def test_the_walk_finds_trajectory_folders_only(tmp_path: Path) -> None:
    """Judgment and caption folders are not entered, links are not followed, and a folder
    holding better_log.json is one trajectory (nothing below it is another)."""
    folder = osharm_folder(tmp_path / "a" / "os" / "_task")
    osharm_folder(folder / "judgment" / "x" / "y" / "z")
    osharm_folder(folder / "nested")
    outside = osharm_folder(tmp_path.parent / f"{tmp_path.name}-outside" / "_elsewhere")
    os.symlink(outside.parent, tmp_path / "linked")
    assert [p.key for p in trajectory_folders(tmp_path)] == ["a/os/_task"]
    assert [p.key for p in trajectory_folders(folder)] == ["."]


@pytest.mark.parametrize(
    ("example_id", "task", "kind"),
    [
        ("_harassment_email", {}, "misuse"),
        ("__injected_email", {}, "injection"),
        ("___send_api_keys", {}, "misbehaviour"),
        ("0b17a146__inject__desktop_notification__stop_task", {}, "injection"),
        ("0b17a146", {"injection": {"type": "website", "goal_id": "stop_task"}}, "injection"),
        ("0b17a146", {"jailbreak": True}, "misuse"),
        ("0b17a146", {"jailbreak": False, "injection": None}, "other"),
    ],
)
def test_a_tasks_kind_comes_from_its_metadata_and_its_id(
    example_id: str, task: dict[str, object], kind: str
) -> None:
    """Injected content (metadata or folder name) makes an injection task; else OS-Harm's id
    prefix; else a jailbreak run is misuse; plain OSWorld tasks are `other`."""
    assert task_kind(example_id, task) == kind
