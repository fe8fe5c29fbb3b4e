"""better_log.json is rewritten after every model call from steps serialised once each:
the bytes are exactly `json.dumps(log, indent=2)` of the whole log, whatever the text."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.trajectories.osharm import BETTER_LOG, ResultWriter, TaskInfo
from osharm_core import AgentConfig
from tests.conftest import reply_step

CONFIG = AgentConfig(model="m", observation_type="a11y_tree", action_space="pyautogui")
_text = st.text(max_size=30)


@settings(max_examples=60)
@given(
    steps=st.lists(st.tuples(_text, st.none() | st.lists(_text, max_size=3)), max_size=5),
    instruction=_text.filter(str.strip),  # TaskInfo refuses a blank instruction
    injection=st.none()
    | st.dictionaries(st.sampled_from(["steps", "type"]), st.just([]) | _text, max_size=2),
    fork=st.booleans(),
)
def test_each_rewrite_is_the_whole_log_dumped(
    steps: list[tuple[str, list[str] | None]],
    instruction: str,
    injection: dict[str, Any] | None,
    fork: bool,
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        writer = ResultWriter(
            directory,
            config=CONFIG,
            task=TaskInfo(instruction=instruction, domain="d", example_id="e", injection=injection),
            max_steps=15,
            fork={"source": "x", "at": 1} if fork else None,
        )
        log: dict[str, Any] | None = None
        for response, actions in steps:
            writer.step(reply_step(CONFIG, response, actions, {"accessibility_tree": None}))
            written = (Path(directory) / BETTER_LOG).read_bytes()
            log = json.loads(written)
            whole = json.dumps(log, ensure_ascii=False, allow_nan=False, indent=2)
            assert written == whole.encode("utf-8", "backslashreplace")
        if log is not None:
            assert [s["response"] for s in log["steps"]] == [r for r, _ in steps]
