"""What a model, a server, a desktop or a task sends, as the CLI and the logs show it.

A refusal, a finish or stop reason, a server's error message, a task.json id, an
observation's file name, a reply or a page's words may hold escape sequences (OSC 52 writes
the clipboard, CSI clears the screen), carriage returns and newlines that forge output lines,
C1 controls, bidirectional overrides, or megabytes of text. Every line the CLI and the
library's warnings print escapes them and is bounded; text piped out of `predict` and
`render` stays exact; `--json` output escapes them as JSON does.
"""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from stamina.instrumentation import get_on_retry_hooks

from adapters import PromptAgent
from adapters._wire import CONTROL_CHARACTERS, json_for_terminal, log_quote, printable
from adapters.cli import MAX_LOG_TEXT, _log_handler, _step, main
from adapters.contract import ModelRequest, ModelResponse
from adapters.providers.computer_use import reply_text
from adapters.testing import FakeClient
from adapters.trajectories.jsonl import parse_entry
from osharm_core import Message, TextPart
from tests.adapters.helpers import loopback_client
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion, openai_error
from tests.conftest import CLI_CHILD, OBSERVATIONS, file_system_names
from tests.strategies import terminal_json, terminal_text

ROOT = Path(__file__).resolve().parents[2]
TREE = OBSERVATIONS / "mousepad_notes.xml"

#: Clipboard write, screen clear, a carriage return and a forged line, C1 CSI, a bidi override.
HOSTILE = "x\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\r\x1b[K\n[os/t1] finished, score 1.0\x9b31m\u202e"
#: Anything a terminal acts on or a reader takes for a line break, raw.
RAW = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def _raw_controls(text: str) -> list[str]:
    return RAW.findall(text)


# --- the escaping helpers ------------------------------------------------------------


@given(terminal_text)
def test_printable_leaves_no_control_a_terminal_acts_on(text: str) -> None:
    assert not CONTROL_CHARACTERS.search(printable(text))
    kept = printable(text, keep="\n\t")
    assert not CONTROL_CHARACTERS.search(kept.replace("\n", "").replace("\t", ""))
    assert kept.count("\n") == text.count("\n")


@given(terminal_json)
def test_json_for_terminal_is_the_same_json_with_no_raw_control(value: object) -> None:
    for indent in (None, 1):
        text = json_for_terminal(value, indent=indent)
        assert json.loads(text) == value
        structural = text if indent is None else text.replace("\n", "")
        assert not CONTROL_CHARACTERS.search(structural)
        assert not re.search("[\ud800-\udfff]", text)


def test_progress_keeps_its_names() -> None:
    """`printable` moved to `adapters._wire` (the providers log through it); progress still has it."""
    from adapters.runs import progress

    assert progress.printable is printable
    assert "printable" in progress.__all__


# --- library warnings: quoted escaped and cut at the source ---------------------------


def test_a_refusal_and_finish_reason_are_quoted_escaped_and_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The warning quoted both whole and raw: an 8 MiB refusal was an 8 MiB line, and its OSC 52
    and newline reached the terminal and forged a task line beside the progress output."""
    refusal = HOSTILE + "A" * 1_000_000
    reply = ModelResponse(
        text="", model="m", refusal=refusal, finish_reason="stop\x1b]0;T\x07\nFORGED LINE"
    )
    agent = PromptAgent(model="gpt-4o", observation_type="a11y_tree", client=FakeClient([reply]))
    with caplog.at_level(logging.WARNING, logger="desktopenv.agent"):
        agent.predict("x", {"accessibility_tree": TREE.read_text(encoding="utf-8")})
    (message,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert message.startswith("Step 1: the model refused: x\\x1b]52;c;")
    assert "(finish reason stop\\x1b]0;T\\x07\\nFORGED LINE)" in message
    assert "(1,000,0" in message  # the refusal's length, noted where it is cut
    assert len(message) < 1_500
    assert not _raw_controls(message)


def test_an_empty_reply_quotes_its_finish_reason_escaped(caplog: pytest.LogCaptureFixture) -> None:
    reply = ModelResponse(text="", model="m", finish_reason="length\x1b[2J\u202e")
    agent = PromptAgent(model="gpt-4o", observation_type="a11y_tree", client=FakeClient([reply]))
    with caplog.at_level(logging.WARNING, logger="desktopenv.agent"):
        agent.predict("x", {"accessibility_tree": TREE.read_text(encoding="utf-8")})
    assert "gave an empty reply (finish reason length\\x1b[2J\\u202e)" in caplog.text


def test_a_native_stop_reason_is_quoted_escaped_and_cut(caplog: pytest.LogCaptureFixture) -> None:
    """A computer-use reply's stop_reason went into the warning raw."""
    stopped = "max_tokens\x1b[1A\x1b[2K\rosharm-agent: all good" + "B" * 100_000
    with caplog.at_level(logging.WARNING, logger="adapters.providers.computer_use"):
        reply_text(["thinking"], None, "pyautogui", stopped=stopped)
    (message,) = [r.getMessage() for r in caplog.records]
    assert "stopped early (max_tokens\\x1b[1A\\x1b[2K\\rosharm-agent: all good" in message
    assert len(message) < 1_000
    assert not _raw_controls(message)


def test_a_context_length_message_is_quoted_escaped(caplog: pytest.LogCaptureFixture) -> None:
    """The context-fallback warning quoted the server's error message with its controls."""
    messages = (
        Message("system", (TextPart("You control a desktop."),)),
        Message("user", (TextPart("old screen"),)),
        Message("assistant", (TextPart("WAIT"),)),
        Message("user", (TextPart("new screen"),)),
    )
    request = ModelRequest(model="compat/m", messages=messages)
    evil = "maximum context length exceeded\x1b]52;c;QUJD\x07\x1b[2J\r\nosharm-agent: FORGED"
    with LoopbackServer() as server:
        server.enqueue(
            openai_error(400, evil, code="context_length_exceeded"),
            Reply(200, chat_completion("DONE")),
        )
        client = loopback_client("compat/m", f"{server.base_url}/v1")
        with client, caplog.at_level(logging.WARNING, logger="adapters.engine.client"):
            assert client.complete(request).context_fallback
    (message,) = [r.getMessage() for r in caplog.records]
    assert "exceeded\\x1b]52;c;QUJD\\x07\\x1b[2J\\r\\nosharm-agent: FORGED)" in message
    assert not _raw_controls(message)


def test_log_quote_cuts_what_it_quotes() -> None:
    assert log_quote("\x1b" * 5_000_000).endswith("... (5,000,000 characters)")
    assert len(log_quote("\x1b" * 5_000_000)) < 3_000


# --- the CLI's log handler -------------------------------------------------------------


def test_the_cli_prints_a_hostile_refusal_as_one_bounded_escaped_line(tmp_path: Path) -> None:
    """With no handler configured, Python's last-resort handler printed the refusal warning
    raw: an OSC 52 clipboard write and a forged `[os/t1] finished` line on stderr, and a
    megabyte-long refusal as one line of a megabyte. A real process: logging as a shell has it."""
    body = chat_completion(None)
    body["choices"][0]["message"]["refusal"] = HOSTILE + "A" * 1_000_000
    body["choices"][0]["finish_reason"] = "stop\x1b]0;T\x07\nFORGED"
    with LoopbackServer() as server:
        server.enqueue(Reply(200, body))
        argv = [*CLI_CHILD, "predict", "--a11y", str(TREE), "--model"]
        argv += ["compat/m", "--base-url", server.base_url + "/v1", "--instruction", "x"]
        done = subprocess.run(argv, capture_output=True, cwd=ROOT, check=False)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert err.count("\n") == 1
    assert err.startswith("Step 1: the model refused: x\\x1b]52;c;ZWNobyBwd25lZA==\\x07")
    assert "finish reason stop\\x1b]0;T\\x07\\nFORGED" in err
    assert len(err) < 2_000
    assert not _raw_controls(err)


def test_the_cli_handler_escapes_and_cuts_any_record_even_the_reply_at_info() -> None:
    """A future warning quoting something raw is still one escaped line; the agent's INFO
    `RESPONSE: %s` (the reply, whole, as the reference logs it) would be too if shown."""
    stream = io.StringIO()
    handler = _log_handler(stream)
    handler.setLevel(logging.INFO)
    record = logging.LogRecord(
        "desktopenv.agent", logging.INFO, __file__, 1, "RESPONSE: %s", (HOSTILE * 10_000,), None
    )
    handler.handle(record)
    text = stream.getvalue()
    assert text.startswith("RESPONSE: x\\x1b]52;c;")
    assert text.count("\n") == 1
    assert f"... ({len(record.getMessage()):,} characters)" in text
    assert len(text) < 6 * MAX_LOG_TEXT
    assert not _raw_controls(text)


def test_any_warning_no_handler_takes_is_printed_escaped_by_the_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only the warnings fixed at their source: any record that reaches no handler (a
    shell's case: the CLI configures none) goes through the CLI's escaping handler, which is
    put back as it was when the command ends."""
    unhandled = logging.getLogger("tests.terminal.unhandled")
    monkeypatch.setattr(unhandled, "propagate", False)  # pytest's own handlers sit on the root

    def command(args: object, out: object) -> int:
        unhandled.warning("a future warning quoting %s", HOSTILE + "A" * 100_000)
        return 0

    monkeypatch.setattr(_step, "render_command", command)
    before = logging.lastResort
    assert main(["render"]) == 0
    assert logging.lastResort is before
    err = capsys.readouterr().err
    assert err.startswith("a future warning quoting x\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b[2J\\r")
    assert err.count("\n") == 1
    assert len(err) < 6 * MAX_LOG_TEXT
    assert not _raw_controls(err)


def test_overlapping_cli_calls_put_the_process_hooks_back_once_the_last_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls in threads overlap (A starts, B starts, A ends, B ends): B must not put back
    the handler A set, which would stay the process's last resort, bound to an old stderr."""
    started, finish_a, finish_b = threading.Event(), threading.Event(), threading.Event()

    def command(args: object, out: object) -> int:
        started.set()
        (finish_a if threading.current_thread().name == "A" else finish_b).wait(10)
        return 0

    monkeypatch.setattr(_step, "render_command", command)
    before, hooks = logging.lastResort, get_on_retry_hooks()
    a = threading.Thread(target=main, args=(["render"],), name="A")
    b = threading.Thread(target=main, args=(["render"],), name="B")
    a.start()
    assert started.wait(10)
    started.clear()
    b.start()
    assert started.wait(10)
    finish_a.set()
    a.join(10)
    assert logging.lastResort is not before  # B still runs
    finish_b.set()
    b.join(10)
    assert logging.lastResort is before
    assert get_on_retry_hooks() == hooks


# --- run TASK_DIR: names from the task and its files -------------------------------------


#: The task.json id of `_hostile_task`: an OSC 8 link, a bidi override, a carriage return.
EVIL_ID = "x\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07\u202e\r[os/other] finished"


def _hostile_task(tmp_path: Path) -> tuple[Path, str]:
    """A task directory whose name, task.json id and observation file name forge lines."""
    task = tmp_path / "task\x1b]0;T\x07"
    task.mkdir()
    shutil.copyfile(TREE, task / "a\x1b[2J\x1b]52;c;QUJD\x07\n[task] step 7: observation z.xml")
    (task / "task.json").write_text(
        json.dumps({"instruction": "do it", "id": EVIL_ID}), encoding="utf-8"
    )
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    return task, f"replay:{script}"


@pytest.mark.parametrize(
    "form",
    [
        "jsonl",
        pytest.param(
            "osharm",
            marks=pytest.mark.skipif(
                not file_system_names(EVIL_ID),
                reason="this file-system encoding cannot name the id's result folder "
                "(tests/facade/test_locale.py runs that case)",
            ),
        ),
    ],
)
def test_run_over_a_task_directory_escapes_names_in_its_lines(
    form: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The step, task and summary lines of `run TASK_DIR` wrote the directory's name, its
    task.json id (in the result folder) and observation file names raw: an ESC, a BEL, a
    bidi override and a newline that wrote a step line of its own."""
    task, model = _hostile_task(tmp_path)
    argv = ["run", str(task), "--model", model, "--format", form, "--out", str(tmp_path / "o")]
    assert main([*argv, "--observation-type", "a11y_tree"]) == 0
    out = capsys.readouterr().out
    assert not _raw_controls(out)
    lines = out.splitlines()
    assert all(line.startswith(("[task\\x1b]0;T\\x07]", "summary [task")) for line in lines)
    if form == "jsonl":
        assert "observation a\\x1b[2J\\x1b]52;c;QUJD\\x07\\n[task] step 7" in lines[0]
    else:
        assert "click\\x1b]8;;\\x07\\u202e\\r[os_other] finished" in lines[0]


def test_an_unreadable_observation_with_a_hostile_name_is_one_escaped_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task, model = _hostile_task(tmp_path)
    for xml in task.glob("*.xml"):
        xml.write_text("<not xml", encoding="utf-8")
    argv = ["run", str(task), "--model", model, "--out", str(tmp_path / "o")]
    assert main([*argv, "--observation-type", "a11y_tree"]) == 1
    out = capsys.readouterr().out
    assert not _raw_controls(out)
    (summary,) = out.splitlines()
    assert "observation a\\x1b[2J\\x1b]52;c;QUJD\\x07\\n[task] step 7" in summary


# --- predict and render: text on a terminal, exact when piped; JSON escaped ---------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _script(tmp_path: Path, reply: str) -> str:
    script = tmp_path / "replies.jsonl"
    script.write_text(json.dumps({"response": reply}) + "\n", encoding="utf-8")
    return f"replay:{script}"


REPLY = "Thinking.\n\tok\x1b]0;PWNED\x07\x1b[2J\rFAKE\x9b31m\u202eevil\x00end\n```python\nDONE\n```"


def test_predict_escapes_the_reply_on_a_terminal_and_keeps_it_exact_piped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reply (the model's words) reached a terminal raw: a title, a cleared screen."""
    argv = ["predict", "--a11y", str(TREE), "--instruction", "x"]
    argv += ["--model", _script(tmp_path, REPLY)]
    assert main(argv) == 0
    assert capsys.readouterr().out == f"{REPLY}\n--- actions ---\nDONE\n"
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(argv) == 0
    shown = terminal.getvalue()
    assert shown.startswith("Thinking.\n\tok\\x1b]0;PWNED\\x07\\x1b[2J\\rFAKE\\x9b31m\\u202eevil")
    assert shown.endswith("\n--- actions ---\nDONE\n")
    assert not _raw_controls(shown)


def test_predict_json_escapes_c1_and_bidi_controls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ensure_ascii=False` let C1 controls and bidi overrides through raw (C0 was escaped)."""
    argv = ["predict", "--a11y", str(TREE), "--instruction", "x", "--json"]
    assert main([*argv, "--model", _script(tmp_path, REPLY)]) == 0
    out = capsys.readouterr().out
    assert not _raw_controls(out.rstrip("\n"))
    assert "\\u009b31m\\u202eevil" in out
    assert json.loads(out)["response"] == REPLY


#: One button, its name holding a C1 CSI and a bidi override (XML allows both).
PAGE = (
    '<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state" '
    'xmlns:cp="https://accessibility.ubuntu.example.org/ns/component">'
    '<push-button name="OK&#x9b;2J&#x202e;kO" st:visible="true" st:showing="true" '
    'st:enabled="true" cp:screencoord="(1, 2)" cp:size="(3, 4)"/></desktop-frame>'
)


def _page_task(tmp_path: Path) -> Path:
    """A task whose page (XML allows C1 and bidi controls) and instruction are hostile."""
    task = tmp_path / "page"
    task.mkdir()
    (task / "a.xml").write_text(PAGE, encoding="utf-8")
    (task / "task.json").write_text(
        json.dumps({"instruction": "do it\x1b]52;c;QUJD\x07"}), encoding="utf-8"
    )
    return task


def test_render_escapes_the_page_and_instruction_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    task = _page_task(tmp_path)
    argv = ["render", str(task), "--observation-type", "a11y_tree"]
    assert main(argv) == 0
    piped = capsys.readouterr().out
    assert "do it\x1b]52;c;QUJD\x07\n" in piped
    assert "OK\x9b2J\u202ekO" in piped
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(argv) == 0
    shown = terminal.getvalue()
    assert "do it\\x1b]52;c;QUJD\\x07\n" in shown
    assert "OK\\x9b2J\\u202ekO" in shown
    assert "\t" in shown  # the table's columns stay readable
    assert not _raw_controls(shown)
    assert shown.count("\n") == piped.count("\n")


def test_render_json_escapes_c1_and_bidi_controls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = _page_task(tmp_path)
    assert main(["render", str(task), "--observation-type", "a11y_tree", "--json"]) == 0
    out = capsys.readouterr().out
    assert "OK\\u009b2J\\u202ekO" in out
    assert not _raw_controls(out)
    rendered = json.loads(out)
    assert "OK\x9b2J\u202ekO" in rendered["messages"][1]["content"][0]["text"]


def test_replay_json_escapes_c1_and_bidi_controls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorded reply whose actions differ now: `replay --json` quotes them with their controls."""
    code = "pyautogui.write('\u202e\x9b2J')"
    line = {"step": 1, "response": f"```python\n{code}\n```", "actions": [], "model": "gpt-4o"}
    line |= {"observation_type": "a11y_tree", "action_space": "pyautogui", "instruction": "x"}
    (tmp_path / "trajectory.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert main(["replay", str(tmp_path), "--json"]) == 1
    out = capsys.readouterr().out
    assert not _raw_controls(out)
    assert json.loads(out)["differences"][0]["now"] == [code]


# --- trajectory lines: hostile values quoted by excerpt -----------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("latency", "A" * 4_000_000),
        ("cost_usd", ["\x1b"] * 1_000_000),
        ("masks", [["\x1b[2J", "A" * 4_000_000]]),
        ("max_trajectory_length", "A" * 4_000_000),
        ("a11y_tree_max_tokens", "A" * 4_000_000),
        ("episode_step", "A" * 4_000_000),
        ("usage", {"input_tokens": "A" * 4_000_000}),
    ],
)
def test_a_bad_value_in_a_trajectory_line_is_quoted_short(key: str, value: object) -> None:
    """`got {value!r}` quoted a 4 MiB value whole: a 4 MiB error line (or torn-tail note)."""
    failure = parse_entry(json.dumps({"response": "DONE", key: value})).failure()
    assert "must be" in failure
    assert len(failure) < 200
    assert not _raw_controls(failure)


def test_the_bidirectional_marks_are_escaped_too() -> None:
    """RLM, LRM and ALM reorder what a line shows as much as the overrides do."""
    reply = "[os/t1] score \u200f1.0\u061c \u200e\u202e x"
    assert printable(reply) == "[os/t1] score \\u200f1.0\\u061c \\u200e\\u202e x"
    assert json_for_terminal(reply) == '"[os/t1] score \\u200f1.0\\u061c \\u200e\\u202e x"'
