"""Replay: a model client that answers from a recorded trajectory, and an environment
that serves a directory of observations, so a run is reproducible with no model and no VM.

`ReplayClient` gives back the recorded replies in order (reachable as
`client_for("replay:PATH")`); `ReplayEnv` has the methods OSWorld's loop calls
on a `DesktopEnv` (`reset`, `_get_obs`, `step`, `evaluate`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from adapters._checks import path_argument
from adapters._files import read_regular
from adapters.contract import ModelClient, ModelRequest, ModelResponse
from adapters.errors import ReplayExhausted, TrajectoryError
from adapters.trajectories.jsonl import (
    MAX_TRAJECTORY_BYTES,
    TRAJECTORY_FILE,
    TrajectoryEntry,
    open_trajectory,
)
from adapters.trajectories.osharm import BETTER_LOG, TRAJ_FILE
from adapters.trajectories.osworld_plain import restated_reply

if TYPE_CHECKING:
    from adapters.registry import ClientOptions, ModelRegistry
from osharm_core import AccessibilityTreeError, Action, CoordinateFrame, ScreenshotError
from osharm_core.errors import check_flag

logger = logging.getLogger(__name__)

REPLAY_SCHEME: Final = "replay:"
_TERMINAL: Final = frozenset({"DONE", "FAIL"})


class ReplayClient:
    """A `ModelClient` that answers with the replies of a recorded trajectory, in order.

    Each call returns the next recorded reply as a `ModelResponse` with the
    recorded usage and continuation, the model that answered then, the frame
    its coordinates were written in (so the agent reads the recorded actions
    whatever its own scaling; a hand-written script whose lines name no model
    states no frame, and its replies are read in the agent's own), and
    `tries=1`; the request's content is not looked at. Past the last reply it
    raises `ReplayExhausted`. `path` is a `trajectory.jsonl`, its directory, or an
    OS-Harm / OSWorld task result folder; a plain OSWorld folder's actions were parsed by
    whatever agent ran, so each step's recorded actions are restated as its reply
    (`restated_reply`): the agent executes them again.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        loaded = open_trajectory(path)
        if loaded.torn_tail is not None:
            logger.warning("%s: %s", loaded.path, loaded.torn_tail)
        self.path = loaded.path
        self.entries = loaded.entries
        self._next = 0

    @property
    def remaining(self) -> int:
        """How many recorded replies are left."""
        return len(self.entries) - self._next

    def complete(self, request: ModelRequest) -> ModelResponse:
        """The next recorded reply."""
        if self._next >= len(self.entries):
            raise ReplayExhausted(
                f"{self.path} holds {len(self.entries)} replies and all were used; "
                f"call {self._next + 1} asked for another",
                provider="replay",
                model=request.model,
            )
        entry = self.entries[self._next]
        self._next += 1
        text = entry.response if entry.response_recorded else restated_reply(entry.actions)
        return ModelResponse(
            text=text,
            usage=entry.usage,
            model=entry.response_model or entry.model or request.model,
            tries=1,
            raw={"replay": str(self.path), "step": entry.step},
            continuation=entry.continuation,
            finish_reason=entry.finish_reason,
            refusal=entry.refusal,
            frame=_written_in(entry),
        )

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        """The same as `complete`, for async callers."""
        return self.complete(request)


def _written_in(entry: TrajectoryEntry) -> CoordinateFrame | Literal["unscaled"] | None:
    """The frame a recorded reply was written in (see `ModelResponse.frame`): a recording
    writes the frame of every scaled step, so a line that names its model and no frame was
    unscaled; a line naming neither (a script of replies) states none (`None`)."""
    frame = entry.read_frame
    if frame is not None:
        return frame
    return "unscaled" if entry.model or entry.reply_frame is not None else None


class ForkClient:
    """A recorded run up to step `at`, then a live model: the decoupled evaluation of RedTeamCUA.

    The first `at` calls are answered with the recorded replies (byte for
    byte, so the agent parses and executes the same actions and builds the same
    history); every later call goes to `live`. Replayed responses carry
    `raw["replay"]`, so a record can say where the hand-over happened, and are
    `prepaid`: the run that recorded them paid for them, so they add nothing
    to this run's usage totals or budget caps.

    The live model starts a new provider chain: the last replayed response
    carries no continuation (as after `PromptAgent.start_new_chain()`), so the
    live model gets the whole history as plain messages, never the recorded
    model's response ids, call ids or native turns (another vendor's, perhaps,
    or a chain whose safety checks were pending).
    """

    def __init__(self, recorded: str | os.PathLike[str], live: ModelClient, *, at: int) -> None:
        self.prefix = ReplayClient(recorded)
        if (
            isinstance(at, bool)
            or not isinstance(at, int)
            or not 0 <= at <= len(self.prefix.entries)
        ):
            raise TrajectoryError(
                f"cannot fork at step {at!r}: {self.prefix.path} records "
                f"{len(self.prefix.entries)} step(s)"
            )
        self.live = live
        self.at = at
        self.calls = 0

    @property
    def replays_next(self) -> bool:
        """Whether the next call is answered from the recording: a prepaid reply, for which an
        agent takes no place under a budget's caps (a cap reached meanwhile stops the first live
        call, not the replay)."""
        return self.calls < self.at

    def complete(self, request: ModelRequest) -> ModelResponse:
        """The recorded reply while in the prefix, else the live model's."""
        self.calls += 1
        if self.calls <= self.at:
            return self._replayed(request)
        return self.live.complete(request)

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        """The same as `complete`, for async callers."""
        self.calls += 1
        if self.calls <= self.at:
            return self._replayed(request)
        return await self.live.acomplete(request)

    def _replayed(self, request: ModelRequest) -> ModelResponse:
        """The next recorded reply, prepaid; at the hand-over without its continuation."""
        response = attrs.evolve(self.prefix.complete(request), prepaid=True)
        if self.calls == self.at:
            response = attrs.evolve(response, continuation=None)
        return response


def _replay_factory(options: ClientOptions) -> ModelClient:
    if not options.model:
        raise TrajectoryError(f"a replay model is written 'replay:PATH'; got {options.name!r}")
    return ReplayClient(options.model)


def register(registry: ModelRegistry) -> None:
    """Make `replay:PATH` model names answer from a recorded trajectory."""
    registry.register_scheme(
        "replay",
        _replay_factory,
        description="replay:<trajectory.jsonl or its directory> (recorded replies; no key, no network)",
    )


def is_terminal(action: object) -> bool:
    """Whether an action ends the episode (DONE or FAIL, as a string or a computer_13 dict)."""
    if isinstance(action, dict):
        action = action.get("action_type")
    return isinstance(action, str) and action.strip() in _TERMINAL


def is_recording(directory: str | os.PathLike[str]) -> bool:
    """Whether `directory` is a recording (it holds `trajectory.jsonl`) or an OS-Harm / OSWorld
    result folder (`better_log.json` or `traj.jsonl`), not a plain observation directory: its
    step files are then read as a recording's, never through a symbolic link."""
    folder = Path(directory)
    return any(os.path.lexists(folder / name) for name in (TRAJECTORY_FILE, BETTER_LOG, TRAJ_FILE))


#: A step's observation in a result folder or recording: `step_0`, `step_{N}_{stamp}`, `step_0001`.
_STEP_STEM: Final = re.compile(r"step_([0-9]{1,40})(?:_(.*))?", re.DOTALL)


def _saved_order(stems: set[str], recording: bool) -> tuple[str, ...]:
    """Step files (`step_0`, `step_{N}_{stamp}`, `step_0001`) by step number, then the rest of
    the name (the time stamp), then the name itself, so `step_10_...` follows `step_9_...`,
    not `step_1_...`; other names after them, by name. That is a recording's or result
    folder's order whatever else it holds; a folder of your own is served so only when all
    its names are step files, else in name order (`start.png` before `step_1.png`)."""
    steps: list[tuple[int, str, str]] = []
    others: list[str] = []
    for stem in stems:
        found = _STEP_STEM.fullmatch(stem)
        if found is None:
            others.append(stem)
        else:
            steps.append((int(found[1]), found[2] or "", stem))
    if others and not recording:
        return tuple(sorted(stems))
    return tuple(stem for *_, stem in sorted(steps)) + tuple(sorted(others))


def observation_names(
    directory: str | os.PathLike[str], *, follow_links: bool = True
) -> tuple[str, ...]:
    """The observations in a directory: each `NAME.png` / `NAME.xml` stem, in name order,
    but step files (`step_N...`, as result folders and recordings name them) by step number
    and then time stamp: in a recording (`is_recording`) always, first; in a folder of your
    own when all its names are step files.

    Set-of-marks images (`*_som.png`) are derived, not observations, and are
    left out; a stem with only one of the two files still counts. With
    `follow_links=False` (a recording, see `is_recording`) symbolic links are
    left out too; the default counts a link to a file (a directory the user
    put together may link its observations).
    """
    folder = Path(directory)
    stems = {
        p.stem
        for p in folder.iterdir()
        if p.suffix in (".png", ".xml")
        and (follow_links or not p.is_symlink())
        and p.is_file()
        and not p.stem.endswith("_som")
    }
    return _saved_order(stems, is_recording(folder))


def _read_file(path: Path, what: str, follow_links: bool) -> bytes:
    # `jsonl_format._read_regular` does the same; read here directly, a step's observations
    # keep the trajectory format off the live step's path (tests/facade/test_step_path.py).
    return read_regular(
        path, what, MAX_TRAJECTORY_BYTES, TrajectoryError, follow_links=follow_links
    )


def load_observation(
    directory: str | os.PathLike[str], name: str, *, follow_links: bool = True
) -> dict[str, Any]:
    """The OSWorld observation dict for `NAME.png` / `NAME.xml` in `directory` (missing ones are None).

    A part that cannot be read (not a regular file, too large, not UTF-8; with
    `follow_links=False`, for a recording's files, a symbolic link) is an
    `ObservationError`: `AccessibilityTreeError` or `ScreenshotError`, naming the file.
    The default follows links: a plain observation directory is the user's own.
    """
    folder = Path(directory)
    png, xml = folder / f"{name}.png", folder / f"{name}.xml"
    there = os.path.exists if follow_links else os.path.lexists
    tree = screenshot = None
    if there(xml):
        try:
            text = _read_file(xml, "accessibility tree", follow_links)
            tree = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise AccessibilityTreeError(f"{xml} is not UTF-8 text: {exc}") from None
        except TrajectoryError as exc:
            raise AccessibilityTreeError(str(exc)) from None
    if there(png):
        try:
            screenshot = _read_file(png, "screenshot", follow_links)
        except TrajectoryError as exc:
            raise ScreenshotError(str(exc)) from None
    return {"screenshot": screenshot, "accessibility_tree": tree, "terminal": None}


class ReplayEnv:
    """An environment that serves a directory of observations, for loops written against OSWorld.

    The directory holds `NAME.png` / `NAME.xml` pairs (served in sorted
    order) or is a recorded trajectory directory (its `step_NNNN` files).
    `reset()` returns the first observation; every `step(action, pause)`
    moves to the next one (`pause` is accepted and ignored: nothing runs);
    DONE or FAIL ends the episode without moving, and so does running out of
    observations. `evaluate()` returns `evaluator(actions)` when one was given,
    else `None`: a replay has no checker of its own, so nothing judged the episode
    (a result folder then gets `unscored.txt`, not a score). Observations are read from
    disk when served. A plain directory's symbolic links are followed (the
    user put it together); a recording's or result folder's are neither listed
    nor read (see `is_recording`).

    With `per_turn=True` the desktop moves once per model turn instead, as
    the jsonl runner shows it (one observation per turn, however many actions
    a reply holds): whoever drives the episode calls `begin_turn()` before
    each model call (`run_episode` and `arun_episode` do, for an environment
    whose `per_turn` is true); the first action of a turn moves to the next
    observation, the turn's later actions return that same one, and a turn
    that executed no action moves on when the next one begins.

    An empty `directory` (the current directory) or a `per_turn` that is not a bool is a
    `ConfigError`.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        instruction: str | None = None,
        evaluator: Callable[[Sequence[Action]], float] | None = None,
        per_turn: bool = False,
    ) -> None:
        self.directory = path_argument("directory", directory)
        check_flag("per_turn", per_turn)
        if not self.directory.is_dir():
            raise TrajectoryError(f"no observation directory at {self.directory}")
        #: Whether the directory is a recording or result folder (see `is_recording`): then its
        #: symbolic links are neither listed nor read; a plain directory's links are followed.
        self.recording = is_recording(self.directory)
        self.names = observation_names(self.directory, follow_links=not self.recording)
        if not self.names:
            raise TrajectoryError(
                f"{self.directory} holds no observations (NAME.png and/or NAME.xml files)"
            )
        self.instruction = instruction
        self._evaluator = evaluator
        self.index = 0
        self.done = False
        self.actions: list[Action] = []
        self._obs: dict[str, Any] | None = None
        #: Whether the desktop moves once per model turn (see `begin_turn`), not per action.
        self.per_turn = per_turn
        self._turns = 0
        self._acted = False

    def reset(self, task_config: object = None, **_: object) -> dict[str, Any]:
        """Start over at the first observation and return it."""
        self.index = 0
        self.done = False
        self.actions = []
        self._obs = None
        self._turns, self._acted = 0, False
        return self._get_obs()

    def begin_turn(self) -> tuple[dict[str, Any], bool] | None:
        """A model turn begins (`per_turn` only): `None` when it sees the observation the last
        action left, else `(observation, done)` after a turn that executed no action moved on
        (`done`: the observations ran out, and this turn is not to be taken)."""
        if not self.per_turn:
            return None
        moved = None
        if self._turns and not self._acted and not self.done:
            moved = self.advance()
        self._turns += 1
        self._acted = False
        return moved

    def _get_obs(self) -> dict[str, Any]:
        if self._obs is None:
            self._obs = load_observation(
                self.directory, self.names[self.index], follow_links=not self.recording
            )
            self._obs["instruction"] = self.instruction
        return self._obs

    @property
    def observation_name(self) -> str:
        """The stem of the observation being served."""
        return self.names[self.index]

    def advance(self) -> tuple[dict[str, Any], bool]:
        """Move to the next observation; returns it and whether the observations ran out."""
        if self.index + 1 >= len(self.names):
            self.done = True
        else:
            self.index += 1
            self._obs = None
        return self._get_obs(), self.done

    def step(
        self, action: Action, pause: float = 0
    ) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        """Take one action: `(observation, reward, done, info)` as OSWorld's `DesktopEnv.step` returns."""
        if self.per_turn and not self._turns:
            raise TrajectoryError(
                f"{self.directory}: a per-turn replay needs begin_turn() before each model turn"
            )
        self.actions.append(action)
        if not self.done:
            if is_terminal(action):
                self.done = True
            elif not (self.per_turn and self._acted):
                self.advance()
        self._acted = True
        info = {"observation": self.observation_name, "step": len(self.actions)}
        return self._get_obs(), 0.0, self.done, info

    def evaluate(self) -> float | None:
        """The episode's score: `evaluator(actions)` when one was given, else `None` (unscored)."""
        return None if self._evaluator is None else float(self._evaluator(tuple(self.actions)))

    def close(self) -> None:
        """Nothing to release: observations are read from disk when served."""
