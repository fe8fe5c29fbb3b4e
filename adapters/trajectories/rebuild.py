"""A recorded step's messages, rebuilt: what the agent sent at step k of a recorded run.

Works on our own `trajectory.jsonl` and on OS-Harm / OSWorld result folders,
ours or the reference's. Each earlier step of the same episode (a recorder
kept across `agent.reset()` marks where each episode starts) is replayed
through the core (`prepare_step` on the recorded observation, then
`complete_step` on the recorded reply), so the history is the one the agent
had. A step whose raw tree was kept (our trajectories and result folders) is
processed exactly as it was; a reference-written folder keeps only the
linearized tree in better_log.json, which is trimmed to `a11y_tree_max_tokens`
the same way the agent trims (set-of-marks needs the raw tree and is refused
there).

Screenshots are scaled with the recording's own `scaling` and cut down as its
`degradation` records say the request was cut to fit a server profile (the
cuts are repeated, not measured again); a step whose rebuilt frame or size
does not match what was recorded is refused, naming what the recording lacks,
rather than shown different from what was sent.

The other settings that shape the prompt (`PROMPT_SETTINGS`) are stated on
every line of a newer `trajectory.jsonl` and in better_log's `params`; a
configuration that contradicts one is refused. The client password is never
kept, only whether it was not the default (`Recording.withheld`): such a
run's steps are rebuilt only with the password given.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from adapters.errors import TrajectoryError
from adapters.trajectories.jsonl import (
    TrajectoryEntry,
    _read_regular,
    episode_steps,
    open_trajectory,
)
from adapters.trajectories.osharm import (
    BETTER_LOG,
    is_result_folder,
    read_better_log,
    result_folder_entries,
)
from osharm_core import AgentConfig, AgentState, ConfigError, CoordinateFrame, Observation
from osharm_core.budget import count_tokens, refit_step
from osharm_core.config import SCREENSHOT_TYPES, TREE_TYPES
from osharm_core.errors import ObservationError, StateError, excerpt
from osharm_core.prompts import DEFAULT_PASSWORD
from osharm_core.state import ObservationRecord
from osharm_core.step import (
    LinearizedTree,
    StepRequest,
    complete_step,
    prepare_step,
    step_messages,
)
from osharm_core.tokens import trim_accessibility_tree

#: better_log.json's `params` that shape the messages, as `AgentConfig` fields.
_PARAMS: Final = ("max_trajectory_length", "a11y_tree_max_tokens", "max_tokens", "top_p")
#: better_log.json's `params` our writer adds only when true (`prompt_params`).
_FOLDER_FLAGS: Final = ("ubuntu_attributes", "som_test_original")
#: The `AgentConfig` fields that shape the prompt beyond the model, observation type, action
#: space, platform and scaling, which an older recording does not state.
PROMPT_SETTINGS: Final = (
    "max_trajectory_length",
    "a11y_tree_max_tokens",
    "ubuntu_attributes",
    "som_test_original",
    "client_password",
)
#: Every `AgentConfig` field that shapes the messages a recording may state.
_SHAPING: Final = ("model", "observation_type", "action_space", "platform", "scaling")


@attrs.frozen
class RebuiltStep:
    """Step `step` of a recorded run: the configuration and instruction it ran under, its request."""

    step: int
    config: AgentConfig
    instruction: str
    request: StepRequest


@attrs.frozen
class Recording:
    """A recorded run, read once: its steps, the directory its files are named from, the
    `AgentConfig` fields it states, and (result folders only) each step's linearized tree.

    `withheld` names the fields the run set to something other than the default
    that the recording does not keep (`client_password`, a secret): a rebuild
    needs them given.
    """

    directory: Path
    entries: tuple[TrajectoryEntry, ...]
    settings: Mapping[str, Any]
    trees: tuple[object, ...] = ()
    withheld: frozenset[str] = frozenset()

    @property
    def unstated(self) -> tuple[str, ...]:
        """The `PROMPT_SETTINGS` the recording says nothing about (an older one): a rebuild
        takes them from its configuration."""
        known = {*self.settings, *self.withheld}
        return tuple(name for name in PROMPT_SETTINGS if name not in known)


def load_recording(path: str | os.PathLike[str]) -> Recording:
    """The recording at `path`: a `trajectory.jsonl`, its directory, or a result folder.

    `settings` are the model, observation type, action space, platform and
    scaling of its first step (scaling left out when steps have frames but no
    line states it: an older recording) and the `PROMPT_SETTINGS` it states:
    those on its first line, or for a result folder better_log's `params`
    that shape the messages (an absent `ubuntu_attributes` or
    `som_test_original` there is false, as the reference's always are). A
    folder holding better_log.json is a result folder, as for `open_trajectory`.
    """
    folder = Path(path)
    if folder.is_dir() and is_result_folder(folder):
        return folder_recording(folder)
    loaded = open_trajectory(path)
    settings, withheld = _settings(loaded.entries, path)
    return Recording(loaded.path.parent, loaded.entries, settings, withheld=withheld)


def folder_recording(folder: str | os.PathLike[str]) -> Recording:
    """The OS-Harm / OSWorld result folder `folder` as a `Recording`, its better_log.json
    read once (a `TrajectoryError` when it holds none, or one that cannot be read)."""
    folder = Path(folder)
    log = read_better_log(folder)
    entries = result_folder_entries(folder, log)
    trees = tuple(s.get("a11y_tree") if isinstance(s, Mapping) else None for s in log["steps"])
    params = log.get("params")
    settings, withheld = _settings(entries, folder)
    if isinstance(params, Mapping):
        stated, withheld = _folder_settings(params, folder / BETTER_LOG)
        settings.update(stated)
    return Recording(folder, entries, settings, trees, withheld)


def _folder_settings(
    params: Mapping[str, Any], file: Path
) -> tuple[dict[str, Any], frozenset[str]]:
    """better_log's `params` that shape the messages, and whether the password is withheld."""
    stated = {k: params[k] for k in _PARAMS if k in params}
    flags = {}
    for name in (*_FOLDER_FLAGS, "custom_client_password"):
        value = params.get(name, False)
        if not isinstance(value, bool):
            raise TrajectoryError(
                f"{file}: params.{name} must be true or false; got {excerpt(value)}"
            )
        flags[name] = value
    stated.update({name: flags[name] for name in _FOLDER_FLAGS})
    if flags["custom_client_password"]:
        return stated, frozenset({"client_password"})
    return {**stated, "client_password": DEFAULT_PASSWORD}, frozenset()


def _line_settings(entry: TrajectoryEntry) -> tuple[dict[str, Any], frozenset[str]]:
    """The settings one line states (all but scaling), and whether its password is withheld."""
    settings: dict[str, Any] = {
        "observation_type": entry.observation_type,
        "action_space": entry.action_space,
        "platform": entry.platform,
    }
    if entry.model:
        settings["model"] = entry.model
    stated = attrs.asdict(entry, recurse=False)
    for name in ("max_trajectory_length", "a11y_tree_max_tokens", *_FOLDER_FLAGS):
        value = stated[name]
        if value is not None:
            settings[name] = value
    if entry.custom_client_password:
        return settings, frozenset({"client_password"})
    if entry.custom_client_password is not None:
        settings["client_password"] = DEFAULT_PASSWORD
    return settings, frozenset()


def _settings(
    entries: Sequence[TrajectoryEntry], path: object
) -> tuple[dict[str, Any], frozenset[str]]:
    if not entries:
        raise TrajectoryError(f"{path} holds no steps")
    first = entries[0]
    settings, withheld = _line_settings(first)
    # A recording states its scaling when not native, and a frame for every scaled step:
    # with no frame anywhere it was not scaled; frames without the setting (an older
    # recording) leave it to the caller, and a rebuilt frame that differs is refused.
    if first.scaling != "native" or all(e.frame is None for e in entries):
        settings["scaling"] = first.scaling
    return settings, withheld


def _check_config(
    config: AgentConfig, settings: Mapping[str, Any], withheld: frozenset[str], where: str
) -> None:
    """Refuse a configuration that contradicts a stated setting, or lacks a withheld one.

    The password is never shown: it may be a secret.
    """
    given = attrs.asdict(config, recurse=False)
    for name in (*_SHAPING, *PROMPT_SETTINGS):
        if name not in settings or given[name] == settings[name]:
            continue
        if name == "client_password":
            raise TrajectoryError(
                f"{where}: the run named the default client password in its prompt; the "
                "configuration names another, which would rebuild a prompt it did not send"
            )
        raise TrajectoryError(
            f"{where}: the recording says {name} {settings[name]!r}; rebuilding with "
            f"{given[name]!r} would give a request other than the one sent"
        )
    if "client_password" in withheld and config.client_password == DEFAULT_PASSWORD:
        raise TrajectoryError(
            f"{where}: the run named a client password of its own in its prompt, and the "
            "recording does not keep it (only that it was not the default): give it "
            "(render --client-password PASSWORD) to rebuild its steps"
        )


def recorded_under(recording: Recording | str | os.PathLike[str], config: AgentConfig) -> bool:
    """Whether `recording` (or the one at that path) can be read, and states no setting that
    shapes the prompt (nor a withheld password) other than `config`'s."""
    try:
        if not isinstance(recording, Recording):
            recording = load_recording(recording)
        _check_config(config, recording.settings, recording.withheld, str(recording.directory))
    except TrajectoryError:
        return False
    return True


def _file(directory: Path, name: str | None, step: int, what: str) -> bytes | None:
    """The step file a recording's line names; a symbolic link there is refused, not followed
    (the line's plain name must not read a file outside the recording's folder)."""
    if name is None:
        return None
    try:
        return _read_regular(directory / name, what, follow_links=False)
    except (OSError, TrajectoryError, ValueError) as exc:  # ValueError: a NUL or lone surrogate
        raise TrajectoryError(
            f"step {step}: cannot read its {what} {excerpt(name)}: {exc}"
        ) from None


def _tree_text(data: bytes, name: str | None, step: int) -> str:
    """A recorded tree file's text: it is written in UTF-8 (the text the agent read), so
    anything else is a `TrajectoryError`, never a tree that differs from the one sent."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrajectoryError(
            f"step {step}: its accessibility tree {excerpt(name)} is not UTF-8 text ({exc}), "
            "as trees are saved, so it cannot be read as the tree the step sent (a folder "
            "written before trees were saved as UTF-8 keeps them as the environment gave them)"
        ) from None


def _request(
    config: AgentConfig,
    state: AgentState,
    entry: TrajectoryEntry,
    recording: Recording,
    linear: object,
) -> StepRequest:
    request = _prepared(config, state, entry, recording.directory, linear)
    if entry.degradation is not None:
        try:
            request = refit_step(config, state, request, entry.degradation)
        except StateError as exc:
            raise TrajectoryError(f"{recording.directory}, step {entry.step}: {exc}") from None
    _check_sent(config, entry, request, recording.unstated)
    return request


def _prepared(
    config: AgentConfig,
    state: AgentState,
    entry: TrajectoryEntry,
    directory: Path,
    linear: object,
) -> StepRequest:
    kind = config.observation_type
    # An a11y_tree prompt holds no image: a recording need not keep the screenshot for it.
    shown = entry.screenshot if kind in SCREENSHOT_TYPES else None
    screenshot = _file(directory, shown, entry.step, "screenshot")
    # Nor the tree for a screenshot prompt.
    read = entry.accessibility_tree if kind in TREE_TYPES else None
    tree_bytes = _file(directory, read, entry.step, "accessibility tree")
    if kind in SCREENSHOT_TYPES and screenshot is None:
        raise TrajectoryError(
            f"step {entry.step}: observation type {kind!r} needs the screenshot, "
            "and the recording kept none"
        )
    if kind not in TREE_TYPES or tree_bytes is not None:
        tree = None if tree_bytes is None else _tree_text(tree_bytes, read, entry.step)
        observation = Observation(screenshot=screenshot, accessibility_tree=tree)
        try:
            return prepare_step(config, state, entry.instruction, observation)
        except ObservationError as exc:
            files = " and ".join(excerpt(name) for name in (shown, read) if name is not None)
            raise TrajectoryError(
                f"{directory}, step {entry.step}: its recorded observation ({files}) "
                f"cannot be read: {exc}"
            ) from None
    if kind == "som" or config.ubuntu_attributes or not isinstance(linear, str):
        what = (
            "set-of-marks needs the raw tree"
            if kind == "som"
            else "ubuntu_attributes needs the raw tree (better_log keeps it linearized "
            "the reference's way)"
            if config.ubuntu_attributes
            else "no tree was kept"
        )
        raise TrajectoryError(
            f"step {entry.step}: observation type {kind!r} needs the accessibility tree: {what}"
        )
    record = ObservationRecord(
        screenshot=None
        if kind not in SCREENSHOT_TYPES or screenshot is None
        else base64.b64encode(screenshot).decode("ascii"),
        accessibility_tree=trim_accessibility_tree(linear, config.a11y_tree_max_tokens),
    )
    messages = step_messages(config, state, entry.instruction, record)
    # The whole table, so a recorded downscale maps it and trims it again as the step did.
    table = LinearizedTree.of_table(linear, config.platform)
    return StepRequest(messages=messages, observation=record, linearized=table)


def _frame_text(frame: CoordinateFrame | None) -> str:
    if frame is None:
        return "unscaled"
    return (
        f"a {frame.screen_width}x{frame.screen_height} screen sent as "
        f"{frame.image_width}x{frame.image_height} ({frame.grid})"
    )


def _check_sent(
    config: AgentConfig, entry: TrajectoryEntry, request: StepRequest, unstated: Sequence[str]
) -> None:
    """Refuse a rebuilt step whose frame or measured size is not the one recorded."""
    recorded = None if entry.frame is None or entry.frame.is_identity else entry.frame
    rebuilt = request.frame if request.frame is None or not request.frame.is_identity else None
    if recorded != rebuilt:
        hint = (
            "the recording does not say which scaling made its frame: give the run's scaling "
            "(render --scaling)"
            if entry.scaling == "native"
            else "the recorded frame and screenshot do not agree, or the recording predates a "
            "change in how this scaling sizes the screenshot (pixel presets of anthropic-computer "
            "models are fitted within Anthropic's image limit)"
        )
        raise TrajectoryError(
            f"step {entry.step}: the recording says its screenshot was {_frame_text(recorded)}; "
            f"rebuilt with scaling {config.scaling!r} it is {_frame_text(rebuilt)}: {hint}"
        )
    degradation = entry.degradation
    if degradation is None:
        return
    images = sum(len(m.images) for m in request.messages)
    tokens = count_tokens(request.messages, config.model)
    sent = degradation.after
    if (images, tokens) != (sent.images, sent.input_tokens):
        why = (
            f"a setting the recording does not state ({', '.join(unstated)}) differs from the run's"
            if unstated
            else "the recording states every setting that shapes the prompt, so the prompts "
            "or the token count have changed since it was recorded"
        )
        raise TrajectoryError(
            f"step {entry.step}: rebuilt, its request holds {images} image(s) and ~{tokens} "
            f"input tokens, but the recording measured {sent.images} and ~{sent.input_tokens} "
            f"as sent: {why}"
        )


def _episode_start(entries: Sequence[TrajectoryEntry], step: int) -> int:
    """The index of the first entry of step `step`'s episode; refused when a step of it is missing."""
    places = episode_steps(entries)
    place = places[step - 1]
    start = step - place
    if start < 0 or places[start:step] != tuple(range(1, place + 1)):
        raise TrajectoryError(
            f"step {step} was step {place} of its agent's episode, but the recording does not "
            f"hold the {place - 1} step(s) before it in that episode (a step was not recorded), "
            "so its history cannot be rebuilt"
        )
    return start


def rebuild_step(
    recording: Recording | str | os.PathLike[str], step: int, config: AgentConfig | None = None
) -> RebuiltStep:
    """The request the agent made at `step` (1-based) of `recording` (or the one at that path).

    `config` defaults to the recording's own `settings` over `AgentConfig()`;
    one that contradicts a setting the recording states, or lacks the client
    password it withheld, is refused. Each step runs under the settings its
    own line states (a run may change them between steps), and the returned
    `config` is step `step`'s. The history is the steps of the same episode
    before it. Raises `TrajectoryError` naming the step when the recording
    does not hold what the step needs.
    """
    if not isinstance(recording, Recording):
        recording = load_recording(recording)
    entries = recording.entries
    if not 1 <= step <= len(entries):
        raise TrajectoryError(
            f"{recording.directory} has steps 1 to {len(entries)}; asked for {step}"
        )
    if config is None:
        try:
            config = AgentConfig(**recording.settings)
        except (ConfigError, TypeError) as exc:
            raise TrajectoryError(
                f"{recording.directory}: its recorded settings are invalid: {exc}"
            ) from None
    _check_config(config, recording.settings, recording.withheld, str(recording.directory))
    start = _episode_start(entries, step)
    configs = []
    for entry in entries[start:step]:
        config = _line_config(config, entry)
        configs.append(config)
    # Messages show the last `max_trajectory_length` turns: the state keeps only the most any
    # step shows, so each step costs the same however long the history before it.
    keep = max(c.max_trajectory_length for c in configs)
    state = AgentState()
    request = None
    for index, config in enumerate(configs, start=start):
        entry = entries[index]
        linear = recording.trees[index] if index < len(recording.trees) else None
        request = _request(config, state, entry, recording, linear)
        if index + 1 < step:
            state, _ = complete_step(
                config,
                _last_turns(state, keep),
                request,
                entry.response,
                reply_frame=entry.reply_frame,
            )
    assert request is not None
    return RebuiltStep(step, config, entries[step - 1].instruction, request)


def _last_turns(state: AgentState, keep: int) -> AgentState:
    """`state` with only its last `keep` turns (itself when it holds no more)."""
    cut = len(state) - keep
    if cut <= 0:
        return state
    return AgentState(
        state.observations[cut:], state.actions[cut:], state.thoughts[cut:], state.continuation
    )


def _line_config(config: AgentConfig, entry: TrajectoryEntry) -> AgentConfig:
    """`config` with the settings `entry`'s line states over it: an agent's settings may be
    changed between steps (`agent.max_trajectory_length = 1`), and each step ran under its own."""
    stated, withheld = _line_settings(entry)
    if "client_password" in withheld:
        _check_config(config, {}, withheld, f"step {entry.step}")
    given = attrs.asdict(config, recurse=False)
    changed = {k: v for k, v in stated.items() if given[k] != v}
    if not changed:
        return config
    try:
        return attrs.evolve(config, **changed)
    except ConfigError as exc:
        raise TrajectoryError(
            f"step {entry.step}: its recorded settings are invalid: {exc}"
        ) from None


__all__ = [
    "PROMPT_SETTINGS",
    "RebuiltStep",
    "Recording",
    "folder_recording",
    "load_recording",
    "rebuild_step",
]
