"""A custom client password never reaches what OSWorldServerEnv's errors, or the CLI, say."""

from __future__ import annotations

import ast
import json
import pickle
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from adapters import EnvironmentFailure, OSWorldServerEnv, TaskSetupError
from adapters.cli import main
from adapters.runs._secrets import Redactor
from tests.adapters.loopback import LoopbackServer, Received, Reply
from tests.facade.test_env_url import _args
from tests.facade.test_environments import serve_vm
from tests.strategies import client_passwords

#: Passwords with what JSON, Python's repr and the shell escape, and words to look for.
PASSWORDS = (
    "s3cr3t-Pa55word",
    "qu\"ote back\\slash it's",
    "ünïcødé-pässwörd-中文",
    "tab\there 'single' \"double\"",
)


def _timed_out(received: Received) -> Reply:
    """OSWorld's server on a command that overran: 500, the `TimeoutExpired` words as JSON
    (a string command to run without a shell split as `shlex` splits it first)."""
    sent = received.json()
    command = sent["command"]
    try:
        if isinstance(command, str) and not sent.get("shell"):
            command = shlex.split(command)
        words = str(subprocess.TimeoutExpired(command, 120))
    except ValueError as exc:  # an unclosed quote: nothing ran
        words = str(exc)
    return Reply(500, json.dumps({"status": "error", "message": words}))


@pytest.fixture
def echoing() -> Iterator[LoopbackServer]:
    """A loopback VM whose command endpoints answer 500, quoting the command they were sent."""
    with LoopbackServer() as server:
        serve_vm(server)
        for path in ("/execute", "/setup/execute", "/setup/launch"):
            server.route("POST", path, _timed_out)
        server.route("POST", "/setup/execute_with_verification", _timed_out)
        yield server


SUDO = "echo {CLIENT_PASSWORD} | sudo -S true"
#: The setup steps that fill the password in (OSWorld's execute and command), as tasks give it.
SUDO_STEPS = (
    {"type": "execute", "parameters": {"command": ["bash", "-c", SUDO]}},
    {"type": "command", "parameters": {"command": SUDO, "shell": True}},
)


def _echoed_command(message: str) -> str:
    """The command the server's words quote, read back through every quoting layer: the
    error's excerpt of the body (a Python literal), the JSON body, then `TimeoutExpired`'s
    words (which hold the argument list's repr, or the shell string as it is)."""
    body = json.loads(ast.literal_eval(message.split("HTTP 500: ", 1)[1]))
    words = body["message"].removeprefix("Command '").removesuffix("' timed out after 120 seconds")
    return " ".join(ast.literal_eval(words)) if words.startswith("[") else words


def _assert_free_of(password: str, error: BaseException) -> None:
    """`error` says neither the password nor any escaped form of it, read back or not."""
    message = str(error)
    assert "[redacted]" in message
    assert password not in message
    assert password not in repr(error)
    assert password not in str(pickle.loads(pickle.dumps(error)))
    assert "echo [redacted] | sudo -S true" in _echoed_command(message)


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("index", range(len(SUDO_STEPS)))
def test_a_setup_command_the_server_quotes_is_redacted(
    echoing: LoopbackServer, password: str, index: int
) -> None:
    """Each kind of step whose command overran fails the task without saying the password."""
    env = OSWorldServerEnv(echoing.base_url, timeout=5.0, client_password=password, settle=0)
    with pytest.raises(TaskSetupError) as failed:
        env.reset({"id": "sudo", "config": [SUDO_STEPS[index]]})
    env.close()
    sent = echoing.requests[-1].json()["command"]
    assert password in (sent if isinstance(sent, str) else sent[2])  # the VM got it whole
    assert str(failed.value).startswith(
        f"task 'sudo': setup config[0] ({SUDO_STEPS[index]['type']})"
    )
    _assert_free_of(password, failed.value)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(password=client_passwords)
def test_no_password_json_repr_or_the_shell_escape_shows_in_a_setup_failure(
    echoing: LoopbackServer, password: str
) -> None:
    """Whatever characters the password holds, the failure says `[redacted]` where it stood."""
    env = OSWorldServerEnv(echoing.base_url, timeout=5.0, client_password=password, settle=0)
    for step in SUDO_STEPS:
        with pytest.raises(TaskSetupError) as failed:
            env.reset({"config": [step]})
        _assert_free_of(password, failed.value)
    env.close()


def test_a_command_split_by_the_server_is_redacted_token_by_token(echoing: LoopbackServer) -> None:
    """A string command run without a shell is split by the server (`shlex`): the password's
    words, quoted one by one in the argument list's repr, are redacted together."""
    password = "two words\\pw"
    env = OSWorldServerEnv(echoing.base_url, timeout=5.0, client_password=password, settle=0)
    step = {"type": "execute", "parameters": {"command": "echo {CLIENT_PASSWORD} done"}}
    with pytest.raises(TaskSetupError) as failed:
        env.reset({"config": [step]})
    env.close()
    assert "'two', 'wordspw'" not in str(failed.value)
    assert _echoed_command(str(failed.value)) == "echo [redacted] done"


def test_a_step_s_noted_failure_does_not_quote_the_password(echoing: LoopbackServer) -> None:
    """An action typing the password (the prompt tells the model it) that the vocabulary
    refuses, or whose command fails, is noted in the step's info without it."""
    password = PASSWORDS[1]
    env = OSWorldServerEnv(echoing.base_url, timeout=5.0, client_password=password)
    refused = {"action_type": "TYPING", "text": password, "speed": 2}
    notes = [env.step(refused)[3], env.step(f"pyautogui.typewrite({password!r})")[3]]
    env.close()
    assert "bad computer_13 action" in notes[0]["error"]
    assert "[redacted]" in notes[0]["error"]
    assert "HTTP 500" in notes[1]["error"]
    for note in notes:
        assert password not in json.dumps(note)
        assert "slash" not in str(note)


def test_the_default_password_is_no_secret_and_short_ones_are_left_alone() -> None:
    """OSWorld's public default, and passwords under 4 characters, redact nothing."""
    text = "client_password: echo password | sudo -S; pw"
    assert Redactor.of("pw").text(text) == text
    with LoopbackServer() as server:
        env = OSWorldServerEnv(serve_vm(server).base_url, timeout=5.0)
        assert env.redactor.text(text) == text
        env.close()


def _chained() -> None:
    """Raise an `EnvironmentFailure` quoting a password while another quoting it is handled."""
    try:
        raise ValueError("bad: hunter22")
    except ValueError:
        raise EnvironmentFailure("POST /setup/execute: 'hunter22'") from None


def test_an_error_is_scrubbed_along_its_chain_in_place() -> None:
    """The error keeps its type and fields; the errors it came from lose the password too."""
    with pytest.raises(EnvironmentFailure) as raised:
        _chained()
    Redactor.of("hunter22").scrub(raised.value)
    assert str(raised.value) == "POST /setup/execute: '[redacted]'"
    assert str(raised.value.__context__) == "bad: [redacted]"


def test_the_cli_failure_line_does_not_show_the_password(
    echoing: LoopbackServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`osharm-agent run --client-password` with a setup step that overran: the task's failure
    line, and every file the run wrote, say `[redacted]`."""
    password = PASSWORDS[3]
    argv = _args(tmp_path, "--env-url", echoing.base_url, "--settle", "0")
    task = {"id": "_a", "instruction": "Update", "config": SUDO_STEPS[:1]}
    (tmp_path / "examples" / "os" / "_a.json").write_text(json.dumps(task), encoding="utf-8")
    argv += ["--client-password", password]
    assert main(argv) == 1  # the task failed
    captured = capsys.readouterr()
    (line,) = [line for line in captured.out.splitlines() if "[os/_a] failed" in line]
    assert "[redacted]" in line
    for fragment in ("tab", "single", "double"):
        assert fragment not in captured.out + captured.err
    for written in (tmp_path / "results").rglob("*"):
        if written.is_file():
            assert "single" not in written.read_text(encoding="utf-8", errors="replace")
