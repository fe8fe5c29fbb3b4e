"""Judging a result tree: every trajectory folder, `workers` at a time, resumable.

`ajudge_tree` (and `judge_tree`, its blocking form) walks a result tree and,
for each trajectory folder without a judgment (every folder with `rejudge`),
reads the folder, captions the screenshots its judge type shows as captions
(the last one for `aer` and `all_step_aer`, each step's for `all_step_aer`
and `captioned_default`; each caption cached under `captions/`), asks the
judge model, and writes the verdict (or the failure) into the folder. A
folder that cannot be read, a model call that fails after the client's
retries, and a judge reply that holds no valid verdict are each that
folder's `JudgeFailure`: the run goes on. Reading and writing files happen in
threads, so one event loop keeps `workers` calls in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from adapters.accounting.cost import UsageTotals, step_cost
from adapters.accounting.prices import PriceTable
from adapters.contract import ModelClient, ModelRequest, ModelResponse, Usage
from adapters.errors import ModelCallError, TrajectoryError, UnwritableRecord
from adapters.judge.folders import (
    FolderPlace,
    JudgmentSpec,
    LoadedFolder,
    ObservationType,
    cache_caption,
    cached_caption,
    folder_kind,
    load_folder,
    read_judgment,
    trajectory_folders,
    write_failure,
    write_judgment,
)
from adapters.judge.prompts import (
    CAPTIONED_TYPES,
    FINAL_STATE_TYPES,
    PROMPT_VERSION,
    JudgeType,
    caption_messages,
    final_state_messages,
    step_messages,
)
from adapters.judge.summary import FolderOutcome, JudgeSummary
from adapters.judge.verdict import FailureKind, JudgeFailure, Verdict, read_verdict
from adapters.judge.wire import Captioner, JudgeModel
from osharm_core import ConfigError, ObservationError
from osharm_core.errors import excerpt

#: What a caption says when the folder saved no screenshot at all.
NO_SCREENSHOT = "(no screenshot was saved in this folder)"


def _at_least_one(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ConfigError(f"{attribute.name} must be a whole number of at least 1; got {value!r}")


@attrs.frozen(kw_only=True)
class JudgeSettings:
    """How to judge: the judge type (`aer`: responses and a caption of the final screenshot;
    `default`: step by step; see `JUDGE_TYPES`), what the step-by-step judges are shown
    (`None`: what each run's agent saw), whether folders already judged are judged again,
    how many folders are judged at once, how many tokens of each step's tree are shown, and
    the prices of the judge's usage (`None`: the shipped table)."""

    judge_type: JudgeType = "aer"
    observation_type: ObservationType | None = None
    rejudge: bool = False
    workers: int = attrs.field(default=1, validator=_at_least_one)
    tree_max_tokens: int = attrs.field(default=4000, validator=_at_least_one)
    prices: PriceTable | None = None

    def spec(self, judge: JudgeModel) -> JudgmentSpec:
        """Where `judge`'s verdicts go: `judge_model/judge_type/osharm-core-1`."""
        return JudgmentSpec(judge.name, self.judge_type, PROMPT_VERSION)


@attrs.frozen
class JudgeReport:
    """A judging's outcomes, one per trajectory folder in path order, and their summary."""

    outcomes: tuple[FolderOutcome, ...]
    summary: JudgeSummary


class _Failed(Exception):
    """Ends one folder's judging with its failure (never leaves this module)."""

    def __init__(self, failure: JudgeFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class _Folder:
    """One folder being judged: its place, its usage so far."""

    def __init__(self, run: _Run, place: FolderPlace) -> None:
        self.run, self.place = run, place
        self.usage = UsageTotals()

    def _charge(self, model: str, usages: Sequence[Usage], *, failed: bool = False) -> None:
        prices = self.run.settings.prices
        for usage in usages:
            self.usage = self.usage.add(usage, step_cost(usage, model, prices), failed=failed)

    async def ask(
        self, client: ModelClient, model: str, request: ModelRequest, kind: FailureKind
    ) -> ModelResponse:
        """The reply to `request`, its usage charged; a failed call is a `kind` failure."""
        try:
            response = await client.acomplete(request)
        except ModelCallError as exc:
            self._charge(model, exc.billed, failed=True)
            raise _Failed(JudgeFailure(kind, f"{model}: {exc}")) from None
        self._charge(model, response.billed, failed=True)
        self._charge(model, [response.usage])
        return response

    async def caption(self, picture: tuple[str, bytes] | None) -> str:
        """A screenshot's caption (by its file stem and PNG bytes): cached, or asked of the
        captioner and cached; `NO_SCREENSHOT` for none."""
        captioner = self.run.captioner
        if picture is None:
            return NO_SCREENSHOT
        assert captioner is not None  # `ajudge_tree` refuses a captioned judging without one
        stem, png = picture
        folder = self.place.folder
        cached = await asyncio.to_thread(cached_caption, folder, captioner.name, stem, png)
        if cached is not None:
            return cached
        request = captioner.request(caption_messages(png))
        reply = await self.ask(captioner.client, captioner.name, request, "caption_failed")
        caption = reply.text.strip()
        if not caption:
            why = "the captioner gave an empty caption"
            raise _Failed(JudgeFailure("caption_failed", why, excerpt(reply.refusal or "")))
        await asyncio.to_thread(
            cache_caption, folder, captioner.name, stem, png, caption, reply.raw
        )
        return caption

    async def verdict(self) -> tuple[LoadedFolder, Verdict]:
        """The folder read, and the judge's verdict on it (or its `_Failed`)."""
        settings, judge = self.run.settings, self.run.judge
        try:
            loaded = await asyncio.to_thread(
                load_folder, self.place, settings.judge_type, settings.observation_type
            )
        except (TrajectoryError, ObservationError, OSError) as exc:
            raise _Failed(JudgeFailure("unreadable_folder", str(exc))) from None
        trajectory = loaded.trajectory
        if loaded.pictures:
            steps = [
                attrs.evolve(step, caption=None if picture is None else await self.caption(picture))
                for step, picture in zip(trajectory.steps, loaded.pictures, strict=True)
            ]
            trajectory = attrs.evolve(trajectory, steps=tuple(steps))
        if settings.judge_type in FINAL_STATE_TYPES:
            messages = final_state_messages(trajectory, await self.caption(loaded.final))
        else:
            messages = step_messages(trajectory, settings.tree_max_tokens)
        reply = await self.ask(judge.client, judge.name, judge.request(messages), "call_failed")
        found = read_verdict(reply, judge.wire, len(trajectory.steps))
        if isinstance(found, JudgeFailure):
            raise _Failed(found)
        return loaded, found

    async def judge(self) -> FolderOutcome:
        """Judge the folder and record what came of it there."""
        directory = self.run.spec.directory(self.place.folder)
        if not self.run.settings.rejudge:
            earlier = await asyncio.to_thread(read_judgment, directory)
            if isinstance(earlier, Verdict):
                kind = await asyncio.to_thread(folder_kind, self.place)
                return FolderOutcome(place=self.place, kind=kind, status="skipped", verdict=earlier)
        try:
            loaded, verdict = await self.verdict()
            await asyncio.to_thread(write_judgment, directory, verdict)
            return FolderOutcome(
                place=self.place,
                kind=loaded.kind,
                status="judged",
                verdict=verdict,
                usage=self.usage,
            )
        except _Failed as failed:
            return await self._failed(directory, failed.failure)
        except (OSError, UnwritableRecord) as exc:
            return await self._failed(directory, JudgeFailure("unreadable_folder", str(exc)))

    async def _failed(self, directory: Path, failure: JudgeFailure) -> FolderOutcome:
        # A folder we cannot write in: the report still names the failure.
        with contextlib.suppress(OSError, UnwritableRecord):
            await asyncio.to_thread(write_failure, directory, failure)
        kind = await asyncio.to_thread(folder_kind, self.place)
        return FolderOutcome(
            place=self.place, kind=kind, status="failed", failure=failure, usage=self.usage
        )


@attrs.frozen
class _Run:
    judge: JudgeModel
    captioner: Captioner | None
    settings: JudgeSettings
    spec: JudgmentSpec


async def ajudge_tree(
    root: str | Path,
    judge: JudgeModel,
    *,
    captioner: Captioner | None = None,
    settings: JudgeSettings | None = None,
    report: Callable[[FolderOutcome], None] | None = None,
) -> JudgeReport:
    """Judge every trajectory folder under `root` with `judge` (see the module doc); `report`
    is told each folder's outcome as it comes. The judge types that show captions (`aer`,
    `all_step_aer`, `captioned_default`) need a `captioner`."""
    chosen = settings or JudgeSettings()
    if chosen.judge_type in CAPTIONED_TYPES and captioner is None:
        raise ConfigError(f"the {chosen.judge_type} judge shows captions: give a captioner")
    run = _Run(judge, captioner, chosen, chosen.spec(judge))
    places = await asyncio.to_thread(trajectory_folders, Path(root))
    room = asyncio.Semaphore(chosen.workers)

    async def one(place: FolderPlace) -> FolderOutcome:
        async with room:
            outcome = await _Folder(run, place).judge()
        if report is not None:
            report(outcome)
        return outcome

    outcomes = tuple(await asyncio.gather(*(one(place) for place in places)))
    return JudgeReport(outcomes, JudgeSummary.of(str(run.spec), outcomes))


def judge_tree(
    root: str | Path,
    judge: JudgeModel,
    *,
    captioner: Captioner | None = None,
    settings: JudgeSettings | None = None,
    report: Callable[[FolderOutcome], None] | None = None,
) -> JudgeReport:
    """`ajudge_tree` run to its end on an event loop of its own."""
    return asyncio.run(
        ajudge_tree(root, judge, captioner=captioner, settings=settings, report=report)
    )


__all__ = ["NO_SCREENSHOT", "JudgeReport", "JudgeSettings", "ajudge_tree", "judge_tree"]
