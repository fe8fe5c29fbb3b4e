"""Result trees written by hand for the report's tests, its benchmark and its screenshot: OS-Harm
result folders, our JSONL trajectories and plain OSWorld folders, with judgments, safety
events and screenshots of any size."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from PIL import Image, ImageDraw

from adapters.trajectories.jsonl import TrajectoryEntry
from osharm_core import CoordinateFrame

#: A layout's folders above the domain: action space, observation type, model.
LAYOUT: Final = ("pyautogui", "screenshot", "gpt-4o")
STAMP: Final = "20260101@120000"
#: A reply that tries to break out of every context it is shown in.
HOSTILE: Final = '</script><img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def png(width: int = 192, height: int = 108, colour: str = "#dfe6ee", label: str = "") -> bytes:
    """A small PNG of `width` x `height`, a grid drawn on it (and `label`), so a marker's place
    can be seen on a picture of it."""
    image = Image.new("RGB", (width, height), colour)
    draw = ImageDraw.Draw(image)
    for x in range(0, width, max(1, width // 8)):
        draw.line([(x, 0), (x, height)], fill="#b8c2cc")
    for y in range(0, height, max(1, height // 6)):
        draw.line([(0, y), (width, y)], fill="#b8c2cc")
    if label:
        draw.text((4, 4), label, fill="#1d2330")
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _put(path: Path, data: bytes | Path, *, link: bool = False) -> None:
    """`data` written to `path`; a path is copied (or hard-linked, with `link`, to save disk)."""
    if isinstance(data, Path):
        if link:
            os.link(data, path)
        else:
            path.write_bytes(data.read_bytes())
    else:
        path.write_bytes(data)


def result_folder(
    root: Path,
    domain: str,
    example_id: str,
    steps: Sequence[Mapping[str, Any]],
    *,
    instruction: str = "Open the file menu.",
    image: bytes | Path | None = None,
    result: str | None = "1.0",
    judgment: Mapping[str, Any] | None = None,
    error: str | None = None,
    link: bool = False,
    layout: Sequence[str] = LAYOUT,
    images: Sequence[bytes | Path] = (),
) -> Path:
    """An OS-Harm result folder: `steps` (each `response`, `actions`, and optionally
    `safety_events`, `usage`, `cost_usd`) in better_log.json, a screenshot before each step
    (`images[n]` before step n + 1, else `image`, default a small PNG), traj.jsonl,
    result.txt (`None`: none; `error` adds OSWorld's error line) and `judgment` as
    judgment/gpt-4.1/aer/v3/judgment.json."""
    folder = root.joinpath(*layout, domain, example_id)
    folder.mkdir(parents=True)
    shots = [*images, *[png() if image is None else image] * (len(steps) + 1)]
    _put(folder / "step_0.png", shots[0], link=link)
    logged, lines = [], []
    for number, step in enumerate(steps, 1):
        seen = "step_0.png" if number == 1 else f"step_{number - 1}_{STAMP}.png"
        logged.append({"a11y_tree": None, "screenshot_file": seen, **step})
        after = f"step_{number}_{STAMP}.png"
        _put(folder / after, shots[number], link=link)
        for action in step.get("actions") or ():
            lines.append({"step_num": number, "action_timestamp": STAMP, "action": action,
                          "reward": 0, "done": False, "info": {}, "screenshot_file": after})  # fmt: skip
    log = {
        "params": {"model": layout[2], "action_space": layout[0], "observation_type": layout[1]},
        "task": {"jailbreak": False, "injection": None, "instruction": instruction},
        "steps": logged,
    }
    (folder / "better_log.json").write_text(json.dumps(log, indent=2), encoding="utf-8")
    if error is not None:
        lines.append({"Error": error})
    traj = "".join(json.dumps(line) + "\n" for line in lines)
    (folder / "traj.jsonl").write_text(traj, encoding="utf-8")
    if result is not None:
        (folder / "result.txt").write_text(f"{result}\n", encoding="utf-8")
    if judgment is not None:
        judged = folder / "judgment" / "gpt-4.1" / "aer" / "v3"
        judged.mkdir(parents=True)
        (judged / "judgment.json").write_text(json.dumps(judgment, indent=2), encoding="utf-8")
    return folder


def trajectory(
    folder: Path,
    steps: Sequence[Mapping[str, Any]],
    *,
    instruction: str = "Open the file menu.",
    image: bytes | None = None,
    frame: CoordinateFrame | None = None,
    som: bool = False,
    finished: bool = True,
) -> Path:
    """Our JSONL trajectory: one line per step (each `response`, `actions`, and optionally
    `masks`, `safety_events`, `usage`, `cost_usd`, `latency`), its screenshot beside it as
    `step_NNNN.png` (or `step_NNNN_som.png`, with `som`), finished.json unless not `finished`."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for number, step in enumerate(steps, 1):
        name = f"step_{number:04d}{'_som' if som else ''}.png"
        (folder / name).write_bytes(png() if image is None else image)
        extra = {k: v for k, v in step.items() if k not in ("response", "actions", "masks")}
        masks = step.get("masks")
        entry = TrajectoryEntry(
            step=number,
            time=f"2026-01-01T12:00:{number * 2:02d}.000+00:00",
            instruction=instruction,
            model="gpt-4o",
            observation_type="som" if som else "screenshot",
            response=step["response"],
            actions=tuple(step["actions"]) if step["actions"] is not None else None,
            screenshot=None if som else name,
            som_screenshot=name if som else None,
            masks=None if masks is None else tuple(tuple(m) for m in masks),
            frame=frame,
            latency=1.5,
        )
        lines.append(json.dumps({**entry.to_json(), **extra}) + "\n")
    (folder / "trajectory.jsonl").write_text("".join(lines), encoding="utf-8")
    if finished:
        (folder / "finished.json").write_text('{"score": 1.0}\n', encoding="utf-8")
    return folder


def plain_folder(
    folder: Path, steps: Sequence[Sequence[Any]], *, result: str = "0.0", image: bytes | None = None
) -> Path:
    """A plain OSWorld folder: traj.jsonl (each step's actions, with a `response`), the
    screenshots step_0.png and step_N_STAMP.png, and result.txt; no better_log.json."""
    folder.mkdir(parents=True)
    shot = png() if image is None else image
    (folder / "step_0.png").write_bytes(shot)
    lines = []
    for number, actions in enumerate(steps, 1):
        after = f"step_{number}_{STAMP}.png"
        (folder / after).write_bytes(shot)
        for action in actions:
            lines.append({"step_num": number, "action_timestamp": STAMP, "action": action,
                          "response": f"reply {number}", "reward": 0, "done": False,
                          "info": {}, "screenshot_file": after})  # fmt: skip
    (folder / "traj.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")
    (folder / "result.txt").write_text(f"{result}\n", encoding="utf-8")
    return folder


def click(x: int, y: int) -> str:
    """A pyautogui click reply's code."""
    return f"import pyautogui\npyautogui.click({x}, {y})"


def reply(code: str, words: str = "I click the menu.") -> str:
    """A reply: `words`, then `code` in a fenced block."""
    return f"{words}\n```python\n{code}\n```"
