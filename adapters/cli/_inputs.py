"""What the `osharm-agent` commands read: their option groups and the values behind them.

Each option group (`add_observation_options`, `add_agent_options`,
`add_model_options`) sits next to the function that turns its parsed values
into what a command needs: the observation dict and its instruction, the
`AgentConfig`, the model client. A mistake in any of them raises `UsageError`,
which the CLI reports as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, Final

from adapters._files import MAX_JSON_BYTES, read_regular
from adapters.contract import ModelClient
from adapters.engine.client import HttpModelClient
from adapters.engine.limits import Limiter
from adapters.errors import ConfigurationError, TrajectoryError, UsageError
from adapters.providers._credentials import check_key, url_problem
from adapters.registry import REGISTRY
from adapters.trajectories import replay as _replay
from adapters.trajectories.jsonl import MAX_TRAJECTORY_BYTES, open_trajectory
from osharm_core import AgentConfig
from osharm_core.config import ACTION_SPACES, OBSERVATION_TYPES, PLATFORMS
from osharm_core.errors import excerpt
from osharm_core.limits import SERVER_PROFILES, ServerLimits
from osharm_core.scaling import scaling_choices

#: The file in a task directory that holds its instruction.
TASK_FILE: Final = "task.json"


def path_option(text: str) -> str:
    """An argparse type for a path option: an empty or whitespace-only one (which would be the
    current directory) is refused, and argparse names the option."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"needs a path; got the empty path {excerpt(text)}")
    return text


def positive_count(text: str) -> int:
    """An argparse type for a count such as --max-steps or --workers: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"needs a whole number; got {excerpt(text)}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1; got {value}")
    return value


def _base_url(text: str) -> str:
    """An argparse type for --base-url: checked as the clients check it (`url_problem`), so a
    malformed one is a usage error naming the option; a blank one stays unset."""
    problem = url_problem(text.strip()) if text.strip() else None
    if problem is not None:
        raise argparse.ArgumentTypeError(f"the base URL {problem}")
    return text


# --- the observation and its instruction -----------------------------------------


def add_observation_options(parser: argparse.ArgumentParser) -> None:
    """The observation to act on (a path or --screenshot/--a11y) and --instruction."""
    parser.add_argument(
        "observation",
        nargs="?",
        help="a directory of observations (its first one is used), or NAME / NAME.png / NAME.xml",
    )
    parser.add_argument("--screenshot", metavar="PNG", help="the screenshot file")
    parser.add_argument("--a11y", metavar="XML", help="the accessibility-tree file")
    parser.add_argument(
        "--instruction",
        help="the task (default: 'instruction' in the directory's task.json, else a "
        "recording's own steps')",
    )


def _task_json(file: Path) -> object:
    data = _read_file(file, "task file", MAX_JSON_BYTES)
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{file} is not valid JSON: {exc}") from None
    except RecursionError:
        raise UsageError(f"{file} is nested too deeply to read") from None


def _read_task_instruction(directory: Path) -> str | None:
    file = directory / TASK_FILE
    if not file.exists():
        return None
    data = _task_json(file)
    instruction = data.get("instruction") if isinstance(data, dict) else None
    if not isinstance(instruction, str) or not instruction.strip():
        raise UsageError(f"{file} has no 'instruction' string")
    return instruction


def task_place(directory: Path, name: str | None = None) -> tuple[str, str]:
    """`(domain, example_id)` of a task directory: its task.json's `domain` and `id`, when given.

    Without them the domain is `local` and the id `name` (default: the directory's name); a
    key given as anything but a non-empty string is a `UsageError` naming the file and key.
    """
    file = directory / TASK_FILE
    name = directory.name if name is None else name
    if not file.exists():
        return "local", name
    data = _task_json(file)
    if not isinstance(data, dict):
        raise UsageError(f"{file} is not a JSON object")
    for key in ("domain", "id"):
        if key in data and (not isinstance(data[key], str) or not data[key]):
            raise UsageError(
                f"{file}: {key!r} names the result folder, so it is a non-empty string; "
                f"got {excerpt(data[key])}"
            )
    return data.get("domain", "local"), data.get("id", name)


def _recorded_instruction(directory: Path) -> str | None:
    """The instruction a recording's lines (or a result folder's log) hold, when they agree."""
    try:
        entries = open_trajectory(directory).entries
    except TrajectoryError as exc:
        raise UsageError(str(exc)) from None
    said: dict[str, int] = {}
    for entry in entries:
        if entry.instruction.strip():
            said.setdefault(entry.instruction, entry.step)
    if len(said) > 1:
        (first, one), (second, other) = list(said.items())[:2]
        raise UsageError(
            f"the steps of the recording {directory} hold different instructions (step {one}: "
            f"{excerpt(first)}, step {other}: {excerpt(second)}): pass --instruction"
        )
    return next(iter(said), None)


def task_instruction(given: str | None, directory: Path | None) -> str:
    """The task: `given` (--instruction), else the one in `directory`'s task.json, else (a
    recording or result folder without task.json) the one its steps hold."""
    if given is not None:
        return given
    found = _read_task_instruction(directory) if directory is not None else None
    recording = directory is not None and found is None and _replay.is_recording(directory)
    if recording:
        assert directory is not None
        found = _recorded_instruction(directory)
    if found is None:
        where = f" and {directory / TASK_FILE} does not exist" if directory is not None else ""
        if recording:
            where += ", nor do the recording's steps hold one"
        raise UsageError(f"no instruction: pass --instruction{where}")
    return found


def _read_file(path: str | Path, what: str, limit: int = MAX_TRAJECTORY_BYTES) -> bytes:
    """A regular file of at most `limit` bytes (a FIFO or device is refused, not read)."""
    try:
        return read_regular(Path(path), what, limit, UsageError)
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}") from None


def observation(args: argparse.Namespace) -> tuple[dict[str, Any], Path | None]:
    """The observation dict the arguments name, and the directory to look for task.json in."""
    if args.screenshot or args.a11y:
        if args.observation:
            raise UsageError("give either an observation path or --screenshot/--a11y, not both")
        tree = None
        if args.a11y:
            try:
                tree = _read_file(args.a11y, "accessibility tree").decode("utf-8")
            except UnicodeDecodeError:
                raise UsageError(f"{args.a11y} is not UTF-8 text") from None
        screenshot = _read_file(args.screenshot, "screenshot") if args.screenshot else None
        return {"screenshot": screenshot, "accessibility_tree": tree}, None
    if not args.observation:
        raise UsageError(
            "give an observation: a directory, NAME(.png|.xml), or --screenshot/--a11y"
        )
    path = Path(args.observation)
    if path.is_dir():
        # A recording's files are read as the recording's (no links); a plain directory's followed.
        follow = not _replay.is_recording(path)
        names = _replay.observation_names(path, follow_links=follow)
        if not names:
            raise UsageError(f"{path} holds no observations (NAME.png / NAME.xml files)")
        return _replay.load_observation(path, names[0], follow_links=follow), path
    stem = path.with_suffix("") if path.suffix in (".png", ".xml") else path
    if not any(stem.with_name(stem.name + ext).is_file() for ext in (".png", ".xml")):
        raise UsageError(f"no such observation: {path} (no {stem}.png or {stem}.xml)")
    return _replay.load_observation(stem.parent, stem.name), stem.parent


# --- the agent --------------------------------------------------------------------


def add_agent_options(parser: argparse.ArgumentParser) -> None:
    """The agent's configuration, with OS-Harm's run.py defaults."""
    group = parser.add_argument_group("agent (defaults as OS-Harm's run.py)")
    group.add_argument("--observation-type", choices=OBSERVATION_TYPES, default="a11y_tree")
    group.add_argument("--action-space", choices=ACTION_SPACES, default="pyautogui")
    group.add_argument("--platform", choices=PLATFORMS, default="ubuntu")
    group.add_argument("--temperature", type=float, default=1.0)
    group.add_argument("--top-p", type=float, default=0.9)
    group.add_argument("--max-tokens", type=int, default=1500)
    group.add_argument("--max-trajectory-length", type=int, default=3)
    group.add_argument("--a11y-tree-max-tokens", type=int, default=10000)
    group.add_argument(
        "--scaling",
        default="native",
        metavar="PRESET",
        help=f"screenshot scaling: {', '.join(scaling_choices())} (default native: as captured; "
        "for anthropic-computer/ models the claude or claude-hires size, which Anthropic's API "
        "would shrink a larger screenshot to, with clicks mapped back to the screen)",
    )
    group.add_argument(
        "--client-password",
        default="password",
        metavar="PASSWORD",
        help="the desktop user's sudo password: the prompt names it, and with --env-url a "
        "task's setup commands get it for {CLIENT_PASSWORD} (default password, OSWorld's; "
        "the default keeps the reference's prompt bytes)",
    )
    group.add_argument(
        "--ubuntu-attributes",
        action="store_true",
        help="read ubuntu trees' class and description from their real attributes (the "
        "reference leaves those columns empty on ubuntu; off keeps its prompt bytes)",
    )
    group.add_argument(
        "--som-test-original",
        action="store_true",
        help="set-of-marks: test for single-colour boxes on the untouched screenshot (the "
        "reference tests the image while drawing on it; off keeps its behaviour)",
    )
    group.add_argument(
        "--server-profile",
        type=server_profile_arg,
        metavar="PROFILE",
        help=f"request limits: {', '.join(SERVER_PROFILES)}, or max_bytes=N,max_images=N,"
        "max_input_tokens=N (default: no limit)",
    )


def server_profile_arg(text: str) -> str | ServerLimits:
    """A `--server-profile` value: a profile name, or `key=N` limits separated by commas."""
    if text in SERVER_PROFILES:
        return text
    limits: dict[str, int] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a profile ({', '.join(SERVER_PROFILES)}) nor key=N limits"
            )
        limits[key.strip()] = int(value)
    try:
        return ServerLimits(**limits)
    except TypeError:
        raise argparse.ArgumentTypeError(
            f"unknown limit in {text!r}; use max_bytes, max_images, max_input_tokens"
        ) from None


def agent_config(args: argparse.Namespace) -> AgentConfig:
    """The `AgentConfig` the agent and model options describe."""
    return AgentConfig(
        model=args.model,
        observation_type=args.observation_type,
        action_space=args.action_space,
        platform=args.platform,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=args.max_tokens,
        max_trajectory_length=args.max_trajectory_length,
        a11y_tree_max_tokens=args.a11y_tree_max_tokens,
        scaling=getattr(args, "scaling", "native"),
        server_profile=getattr(args, "server_profile", None),
        client_password=getattr(args, "client_password", "password"),
        ubuntu_attributes=getattr(args, "ubuntu_attributes", False),
        som_test_original=getattr(args, "som_test_original", False),
    )


# --- the model --------------------------------------------------------------------


def add_model_options(parser: argparse.ArgumentParser, *, client: bool = True) -> None:
    """--model, and with `client` the options that reach the model (--base-url, --api-key-env)."""
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model",
        default="gpt-4o",
        help="model name (gpt-4o, claude-..., compat/<model>, replay:PATH, ...; default gpt-4o)",
    )
    if client:
        group.add_argument(
            "--base-url", type=_base_url, help="API base URL (OpenAI-style ones include /v1)"
        )
        group.add_argument(
            "--api-key-env",
            metavar="VAR",
            help="name of the environment variable holding the API key",
        )


#: The library's messages name its keyword arguments; the command line's options stand in.
_OPTION_WORDS: Final = (
    ("or pass api_key=...", "or pass --api-key-env VAR (the variable holding the key)"),
    ("base_url=... required; api_key optional", "--base-url URL required; key optional"),
    ("; api_key optional", "; key optional"),
    ("base_url=...", "--base-url URL"),
    ("api_key=...", "--api-key-env VAR"),
)


def option_words(text: str) -> str:
    """`text` with the Python arguments it names (`base_url=...`, `api_key=...`) given as the
    command line's options (`--base-url URL`, `--api-key-env VAR`).

    >>> option_words("OpenAI needs an API key: set OPENAI_API_KEY or pass api_key=...")
    'OpenAI needs an API key: set OPENAI_API_KEY or pass --api-key-env VAR (the variable holding the key)'
    """
    for words, option in _OPTION_WORDS:
        text = text.replace(words, option)
    return text


def replay_source(model: str) -> Path | None:
    """The recording a `replay` model name reads, however it is spelled (`replay:P`,
    `REPLAY:P`, `replay/P`, `replay|P`: what the registry takes); None for other names and
    for names the registry refuses (they are reported when the client is made)."""
    try:
        scheme, rest, _ = REGISTRY.resolve(model)
    except ConfigurationError:
        return None
    return Path(rest) if scheme == _replay.REPLAY_SCHEME.rstrip(":") else None


def model_client(
    args: argparse.Namespace,
    model: str | None = None,
    *,
    limiter: Limiter | None = None,
    max_connections: int | None = None,
) -> ModelClient:
    """The client for `model` (default --model), with --base-url and the key --api-key-env names."""
    api_key = None
    if args.api_key_env is not None and not args.api_key_env.strip():
        raise UsageError("--api-key-env needs the name of a variable")
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env, "").strip()
        if not api_key:
            raise UsageError(
                f"the environment variable {args.api_key_env} (--api-key-env) is not set"
            )
        check_key(api_key, f"{args.api_key_env} (--api-key-env)", provider=model or args.model)
    try:
        return REGISTRY.client_for(
            model or args.model,
            base_url=args.base_url,
            api_key=api_key,
            limiter=limiter,
            max_connections=max_connections,
        )
    except ConfigurationError as exc:
        raise ConfigurationError(option_words(str(exc))) from None


class ModelClients:
    """A run's model clients, one per model name and rate limiter: the tasks of a run share
    their model's `HttpModelClient` (its connections reused) instead of each building one
    that holds a socket until the garbage collector finds it. Other clients (a `replay:` one
    keeps its place in its recording, a plugin's may keep anything) are built per task and
    not kept. `close()` / `aclose()` close the kept ones; a copy sent to a Ray worker starts
    empty there (clients stay in the process that made them).
    """

    def __init__(self, args: argparse.Namespace, *, max_connections: int | None = None) -> None:
        self._args = args
        self._max_connections = max_connections
        self._kept: dict[tuple[str, int], HttpModelClient] = {}

    def get(self, model: str | None = None, *, limiter: Limiter | None = None) -> ModelClient:
        """The client of `model` (default --model) sharing `limiter`, built on first use."""
        name: str = model or self._args.model
        key = (name, id(limiter))
        kept = self._kept.get(key)
        if kept is not None:
            return kept
        client = model_client(
            self._args, name, limiter=limiter, max_connections=self._max_connections
        )
        if isinstance(client, HttpModelClient):  # it holds no episode's state
            self._kept[key] = client
        return client

    def close(self) -> None:
        """Close the kept clients' synchronous connections."""
        kept, self._kept = list(self._kept.values()), {}
        for client in kept:
            client.close()

    async def aclose(self) -> None:
        """Close the kept clients' connections (the running event loop's and the sync ones)."""
        kept, self._kept = list(self._kept.values()), {}
        for client in kept:
            await client.aclose()

    def __getstate__(self) -> dict[str, Any]:
        return {"args": self._args, "max_connections": self._max_connections}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._args, self._kept = state["args"], {}
        self._max_connections = state.get("max_connections")
