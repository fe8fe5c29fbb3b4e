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
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given

from adapters import PromptAgent
from adapters._wire import CONTROL_CHARACTERS, log_quote, printable
from adapters.cli import _COMMANDS, MAX_LOG_TEXT, _log_handler, main
from adapters.contract import ModelRequest, ModelResponse
from adapters.providers.computer_use import reply_text
from adapters.testing import FakeClient
from osharm_core import Message, TextPart
from tests.adapters.helpers import loopback_client
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion, openai_error
from tests.conftest import OBSERVATIONS
from tests.strategies import terminal_text

ROOT = Path(__file__).resolve().parents[2]
TREE = OBSERVATIONS / "mousepad_notes.xml"

#: Clipboard write, screen clear, a carriage return and a forged line, C1 CSI, a bidi override.
HOSTILE = "x\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\r\x1b[K\n[os/t1] finished, score 1.0\x9b31m\u202e"
#: Anything a terminal acts on or a reader takes for a line break, raw.
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _raw_controls(text: str) -> list[str]:
    return RAW.findall(text)


# --- the escaping helpers ------------------------------------------------------------


@given(terminal_text)
def test_printable_leaves_no_control_a_terminal_acts_on(text: str) -> None:
    assert not CONTROL_CHARACTERS.search(printable(text))
    kept = printable(text, keep="\n\t")
    assert not CONTROL_CHARACTERS.search(kept.replace("\n", "").replace("\t", ""))
    assert kept.count("\n") == text.count("\n")


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
    program = "import sys; from adapters.cli import main; sys.exit(main(sys.argv[1:]))"
    body = chat_completion(None)
    body["choices"][0]["message"]["refusal"] = HOSTILE + "A" * 1_000_000
    body["choices"][0]["finish_reason"] = "stop\x1b]0;T\x07\nFORGED"
    with LoopbackServer() as server:
        server.enqueue(Reply(200, body))
        argv = [sys.executable, "-c", program, "predict", "--a11y", str(TREE), "--model"]
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

    monkeypatch.setitem(_COMMANDS, "render", command)
    before = logging.lastResort
    assert main(["render"]) == 0
    assert logging.lastResort is before
    err = capsys.readouterr().err
    assert err.startswith("a future warning quoting x\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\x1b[2J\\r")
    assert err.count("\n") == 1
    assert len(err) < 6 * MAX_LOG_TEXT
    assert not _raw_controls(err)
