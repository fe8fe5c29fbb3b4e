"""A run's manifest: what made the results under a result root, kept as `manifest.json` there.

A `RunManifest` is a frozen value: the library's version and, in a git checkout, its
commit; Python's and the key dependencies' versions; the model, its provider and the
base URL's host (never a key); the agent's configuration as JSON (without the client
password: only whether it is custom) and its hash; a hash of each system prompt; the
price table's version; the command line with its secrets taken out; start and end
times; the workers or the Ray address; the task list's hash; and, once the run ends,
each task's outcome (status, steps, tokens, cost, seconds: the only record of usage a
result folder has).

The runner keeps it (`begin_manifest` before the first episode, `end_manifest` after the
last): a tree whose manifest records another configuration, or other prompts, is refused
(`MixedRunError`, one line naming what differs) unless the new manifest allows mixing
(`--allow-mixed`), which it then records. Each earlier run's manifest is kept in
`previous`. A run that stops on an error or an interrupt leaves `ended` null.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs

from adapters._files import create_file, read_regular
from adapters._strict_json import strict_loads
from adapters._wire import redact
from adapters.accounting.prices import default_prices
from adapters.errors import ConfigurationError, MixedRunError, TrajectoryError, error_text
from adapters.registry import REGISTRY
from osharm_core import AgentConfig
from osharm_core.prompts import DEFAULT_PASSWORD, system_prompt
from osharm_core.scaling import resolve_preset

if TYPE_CHECKING:
    from adapters.accounting.budget import Budget
    from adapters.runs.progress import RunResult
    from adapters.runs.tasks import OsworldTask, TaskOutcome

MANIFEST_FILE: Final = "manifest.json"
#: The manifest's own format (bumped when a key changes meaning).
MANIFEST_VERSION: Final = 1
#: The largest manifest.json read back (earlier runs' outcomes included).
MAX_MANIFEST_BYTES: Final = 16 * 1024 * 1024
#: The earlier runs a manifest keeps in `previous` (the oldest are dropped past this).
MAX_PREVIOUS: Final = 50
#: The distributions whose versions a manifest records (each when installed).
KEY_DEPENDENCIES: Final = (
    "attrs",
    "returns",
    "httpx",
    "httpcore",
    "anyio",
    "tiktoken",
    "stamina",
    "lxml",
    "pillow",
    "jinja2",
    "ray",
)
#: Options whose value is a secret, or may hold one (a revert command's VM password).
SECRET_OPTIONS: Final = ("--client-password", "--env-revert")
#: The screen a scaled configuration's framed prompt is hashed for (OSWorld's default VM).
FRAMED_SCREEN: Final = (1920, 1080)
_REDACTED: Final = "[redacted]"
#: The most characters of a task's detail (why it failed) an outcome keeps.
_MAX_DETAIL: Final = 500
_SECRET_VARIABLE: Final = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def config_json(config: AgentConfig) -> dict[str, Any]:
    """The configuration as JSON, its client password left out (only whether it is custom).

    >>> config_json(AgentConfig(client_password="hunter22"))["custom_client_password"]
    True
    >>> "client_password" in config_json(AgentConfig())
    False
    """
    fields = json.loads(json.dumps(config.to_json(), default=str))
    fields.pop("client_password", None)
    return {**fields, "custom_client_password": config.client_password != DEFAULT_PASSWORD}


def prompt_hashes(config: AgentConfig) -> dict[str, str]:
    """A SHA-256 of each system prompt the configuration uses: the unscaled one and, when it
    scales screenshots, the one framed for a `FRAMED_SCREEN` screenshot. Each is hashed with
    the default client password in its sudo sentence, so the hash tells nothing of a custom
    one (`custom_client_password` in the configuration says there was one)."""
    plain = attrs.evolve(config, client_password=DEFAULT_PASSWORD)
    name = f"{config.observation_type}/{config.action_space}"
    hashes = {name: _sha256(system_prompt(plain))}
    frame = resolve_preset(config.scaling, config.model).frame_for(*FRAMED_SCREEN)
    if not frame.is_identity:
        size = f"{frame.image_width}x{frame.image_height}"
        hashes[f"{name}@{size}"] = _sha256(system_prompt(plain, frame))
    return hashes


def _versions() -> dict[str, str]:
    found = {}
    for name in KEY_DEPENDENCIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def library_version() -> str:
    """osharm-core's installed version (`unknown` from a checkout that is not installed)."""
    try:
        return importlib.metadata.version("osharm-core")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_COMMIT: Final = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def _small(path: Path) -> str | None:
    """A git metadata file's text (at most 1 MiB; `None` when it cannot be read)."""
    try:
        return read_regular(path, "git file", 1 << 20).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


def _git_dir(root: Path) -> Path | None:
    dot = root / ".git"
    if dot.is_dir():
        return dot
    pointer = _small(dot) if dot.is_file() else None
    if pointer is None or not pointer.startswith("gitdir: "):
        return None
    return (root / pointer[len("gitdir: ") :].strip()).resolve()


def git_commit(root: Path) -> str | None:
    """The commit checked out in the git work tree at `root` (its `.git` directory, or a
    worktree's `.git` file), read from git's files without running git; `None` when `root`
    is no work tree or its HEAD cannot be read."""
    git = _git_dir(root)
    head = None if git is None else _small(git / "HEAD")
    if git is None or head is None:
        return None
    head = head.strip()
    if _COMMIT.fullmatch(head):
        return head
    ref = head.removeprefix("ref: ")
    if ref == head or not ref.startswith("refs/") or ".." in ref:
        return None
    common_dir = _small(git / "commondir")
    common = git if common_dir is None else (git / common_dir.strip()).resolve()
    for base in (git, common):
        loose = _small(base / ref)
        if loose is not None and _COMMIT.fullmatch(loose.strip()):
            return loose.strip()
    for line in (_small(common / "packed-refs") or "").splitlines():
        commit, _, name = line.partition(" ")
        if name == ref and _COMMIT.fullmatch(commit):
            return commit
    return None


def _source_root() -> Path:
    """The folder holding the `adapters` package: a checkout's root when run from one."""
    return Path(__file__).resolve().parents[2]


def url_host(url: str | None) -> str | None:
    """The host of `url` (no scheme, port, user, path or query); `None` for none.

    >>> url_host("https://user:secret@llm.example.org:8443/v1?key=x")
    'llm.example.org'
    """
    if not url:
        return None
    try:
        return urllib.parse.urlsplit(url).hostname
    except ValueError:
        return None


def _without_credentials(word: str) -> str:
    """A word that is a URL, with its user, password, query and fragment taken out."""
    if "://" not in word:
        return word
    try:
        parts = urllib.parse.urlsplit(word)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return _REDACTED
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return urllib.parse.urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def redacted_command(words: Sequence[str], secrets: Iterable[str] = ()) -> tuple[str, ...]:
    """The command line with its secrets taken out: the values of `SECRET_OPTIONS`, the user,
    password and query of each URL, and every occurrence of `secrets` and of the values of
    environment variables whose names say they hold a key, token, secret or password.

    >>> redacted_command(["run", "--client-password", "pw1", "--base-url=https://u:p@h/v1?k=1"])
    ('run', '--client-password', '[redacted]', '--base-url=https://h/v1')
    """
    known = [*secrets, *(v for k, v in os.environ.items() if _SECRET_VARIABLE.search(k))]
    kept: list[str] = []
    hide_next = False
    for word in words:
        option, equals, _ = word.partition("=")
        if hide_next:
            word = _REDACTED
        elif equals and option in SECRET_OPTIONS:
            word = f"{option}={_REDACTED}"
        hide_next = word in SECRET_OPTIONS
        if equals and word.startswith("-"):
            word = f"{option}={_without_credentials(word[len(option) + 1 :])}"
        kept.append(redact(_without_credentials(word), [s for s in known if len(s) >= 8]))
    return tuple(kept)


def _secrets(config: AgentConfig) -> tuple[str, ...]:
    """The configuration's own secret: a custom client password."""
    custom = config.client_password != DEFAULT_PASSWORD
    return (config.client_password,) if custom else ()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def task_list_hash(tasks: Sequence[OsworldTask]) -> str:
    """A SHA-256 of the tasks in order: each one's domain, id and instruction."""
    return _sha256(_canonical([[t.domain, t.example_id, t.instruction] for t in tasks]))


def _outcome_json(outcome: TaskOutcome, root: Path) -> dict[str, Any]:
    usage = outcome.usage
    try:
        folder = Path(os.path.relpath(outcome.folder, root)).as_posix()
    except ValueError:  # another drive (Windows)
        folder = os.fspath(outcome.folder)
    return {
        "folder": folder,
        "domain": outcome.task.domain,
        "example_id": outcome.task.example_id,
        "status": outcome.status,
        "score": outcome.score,
        "ended": outcome.ended,
        "detail": outcome.detail[:_MAX_DETAIL],
        "steps": outcome.steps,
        "input_tokens": None if usage is None else usage.input_tokens,
        "output_tokens": None if usage is None else usage.output_tokens,
        "cost_usd": None if usage is None else usage.cost_usd,
        "seconds": round(outcome.seconds, 3),
    }


def _frozen(value: Any) -> str:
    """A JSON part of the manifest as it is kept in the value: canonical text (immutable)."""
    return _canonical(value)


@attrs.frozen(kw_only=True)
class RunManifest:
    """What made the results under `root` (see the module). JSON parts (`config`, `prompts`,
    `outcomes`, `previous`) are kept as canonical JSON text, so the value stays immutable;
    `to_json` gives them back as objects. `root` is where it is kept, not part of its JSON."""

    root: Path = attrs.field(converter=Path, eq=False)
    layout: str
    library_version: str
    git_commit: str | None
    python: str
    dependencies: str
    model: str
    provider: str | None
    base_url_host: str | None
    config: str
    config_sha256: str
    prompts: str
    prices_version: str | None = None
    command: tuple[str, ...] = ()
    started: str | None = None
    ended: str | None = None
    workers: int | None = None
    ray_address: str | None = None
    tasks: int | None = None
    task_list_sha256: str | None = None
    allow_mixed: bool = False
    outcomes: str = "[]"
    previous: str = "[]"

    @classmethod
    def describe(
        cls,
        config: AgentConfig,
        *,
        root: str | os.PathLike[str],
        layout: str = "osharm",
        command: Sequence[str] = (),
        base_url: str | None = None,
        allow_mixed: bool = False,
    ) -> RunManifest:
        """The manifest of a run of `config` into `root` (`layout`: `osharm` result folders or
        `jsonl` trajectories), before it starts; the runner adds the rest."""
        try:
            provider: str | None = REGISTRY.resolve(config.model)[0]
        except ConfigurationError:
            provider = None
        settings = config_json(config)
        return cls(
            root=Path(root),
            layout=layout,
            library_version=library_version(),
            git_commit=git_commit(_source_root()),
            python=platform.python_version(),
            dependencies=_frozen(_versions()),
            model=config.model,
            provider=provider,
            base_url_host=url_host(base_url),
            config=_frozen(settings),
            config_sha256=_sha256(_canonical(settings)),
            prompts=_frozen(prompt_hashes(config)),
            command=redacted_command(command, _secrets(config)),
            allow_mixed=allow_mixed,
        )

    def to_json(self) -> dict[str, Any]:
        """The manifest as manifest.json holds it."""
        fields = attrs.asdict(self, recurse=False)
        fields.pop("root")
        for key in ("dependencies", "config", "prompts", "outcomes", "previous"):
            fields[key] = json.loads(fields[key])
        return {"manifest_version": MANIFEST_VERSION, **fields, "command": list(self.command)}

    def differences(self, recorded: Mapping[str, Any]) -> list[str]:
        """How `recorded` (an earlier manifest's JSON) differs from this one in configuration
        and prompts, one phrase each (empty when it does not).

        >>> m = RunManifest.describe(AgentConfig(temperature=1.0), root=".")
        >>> m.differences({"config": {**m.to_json()["config"], "temperature": 0.5},
        ...                "prompts": m.to_json()["prompts"]})
        ['temperature 0.5 then 1.0']
        """
        mine, theirs = json.loads(self.config), recorded.get("config")
        found: list[str] = []
        if not isinstance(theirs, dict):
            return ["no configuration recorded"]
        for key in sorted(mine.keys() | theirs.keys()):
            if mine.get(key) != theirs.get(key):
                found.append(f"{key} {_shown(theirs.get(key))} then {_shown(mine.get(key))}")
        prompts, recorded_prompts = json.loads(self.prompts), recorded.get("prompts")
        if prompts != recorded_prompts:
            names = sorted(set(prompts) | set(recorded_prompts or {}))
            changed = [n for n in names if prompts.get(n) != (recorded_prompts or {}).get(n)]
            found.append(f"system prompt {', '.join(changed)} differs")
        return found


def _shown(value: Any) -> str:
    return "unset" if value is None else json.dumps(value, ensure_ascii=False)


def read_manifest(root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The manifest kept at `root` as JSON (`None` when there is none); a `TrajectoryError`
    naming it when it cannot be read or is no JSON object."""
    path = Path(root) / MANIFEST_FILE
    try:
        data = read_regular(path, "run manifest", MAX_MANIFEST_BYTES, TrajectoryError)
        value = strict_loads(data.decode("utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, RecursionError) as exc:
        raise TrajectoryError(f"cannot read the run manifest {path}: {error_text(exc)}") from None
    if not isinstance(value, dict):
        raise TrajectoryError(f"the run manifest {path} is not a JSON object")
    return value


def _write(manifest: RunManifest) -> None:
    path = manifest.root / MANIFEST_FILE
    temporary = path.with_name(path.name + ".tmp")
    text = json.dumps(manifest.to_json(), indent=2, ensure_ascii=False) + "\n"
    try:
        manifest.root.mkdir(parents=True, exist_ok=True)
        create_file(temporary, text.encode("utf-8"), TrajectoryError, replace=True)
        temporary.replace(path)
    except OSError as exc:
        raise TrajectoryError(f"cannot write the run manifest {path}: {exc}") from None


def _earlier(manifest: RunManifest) -> list[Any]:
    """The runs kept at the manifest's root so far, oldest first; a `MixedRunError` when the
    last one differs (or cannot be read) and the manifest does not allow mixing."""
    where = manifest.root / MANIFEST_FILE
    try:
        recorded = read_manifest(manifest.root)
        differences = [] if recorded is None else manifest.differences(recorded)
    except TrajectoryError as exc:
        recorded, differences = None, [f"its manifest cannot be read ({exc})"]
    if differences and not manifest.allow_mixed:
        raise MixedRunError(
            f"{where} records a run with another configuration ({'; '.join(differences)}); "
            "results of both would be mixed in one tree: pass --allow-mixed (allow_mixed=True) "
            "to add this run anyway, or write to another folder"
        )
    if recorded is None:
        return []
    before = recorded.pop("previous", [])
    return [*(before if isinstance(before, list) else []), recorded][-MAX_PREVIOUS:]


def begin_manifest(
    manifest: RunManifest | None,
    tasks: Sequence[OsworldTask],
    *,
    workers: int | None = None,
    ray_address: str | None = None,
    budget: Budget | None = None,
) -> RunManifest | None:
    """The runner's hook before its first episode: `manifest` completed with the run's tasks,
    workers (or Ray address), price table and start time, checked against the one kept at
    its root (see `MixedRunError`) and written there; `None` for no manifest."""
    if manifest is None:
        return None
    prices = default_prices() if budget is None else budget.prices
    started = attrs.evolve(
        manifest,
        started=_now(),
        workers=workers,
        ray_address=ray_address,
        tasks=len(tasks),
        task_list_sha256=task_list_hash(tasks),
        prices_version=prices.version,
    )
    started = attrs.evolve(started, previous=_frozen(_earlier(started)))
    _write(started)
    return started


def end_manifest(manifest: RunManifest | None, result: RunResult) -> RunResult:
    """The runner's hook after its last episode: the manifest's end time and each task's
    outcome written; `result` given back as it is."""
    if manifest is not None:
        outcomes = [_outcome_json(outcome, manifest.root) for outcome in result.outcomes]
        _write(attrs.evolve(manifest, ended=_now(), outcomes=_frozen(outcomes)))
    return result


__all__ = [
    "MANIFEST_FILE",
    "MixedRunError",
    "RunManifest",
    "begin_manifest",
    "config_json",
    "end_manifest",
    "git_commit",
    "prompt_hashes",
    "read_manifest",
    "redacted_command",
    "task_list_hash",
    "url_host",
]
