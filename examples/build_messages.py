"""Build the messages of one agent step for a bundled observation and print them.

Run: python examples/build_messages.py [OBSERVATION_TYPE] [ACTION_SPACE]
No key, no network: this is the pure core alone.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from osharm_core import (
    AgentConfig,
    AgentState,
    Observation,
    TextPart,
    complete_step,
    prepare_step,
)

HERE = Path(__file__).parent / "observations"


def main() -> None:
    kind = sys.argv[1] if len(sys.argv) > 1 else "screenshot_a11y_tree"
    space = sys.argv[2] if len(sys.argv) > 2 else "pyautogui"
    config = AgentConfig(model="gpt-4o", observation_type=kind, action_space=space)  # type: ignore[arg-type]
    observation = Observation(
        screenshot=(HERE / "mousepad_notes.png").read_bytes(),
        accessibility_tree=(HERE / "mousepad_notes.xml").read_text(encoding="utf-8"),
    )
    instruction = "Save the meeting notes as notes.txt in the home folder."
    request = prepare_step(config, AgentState(), instruction, observation)
    for message in request.messages:
        print(f"=== {message.role} ===")
        for part in message.parts:
            if isinstance(part, TextPart):
                print(part.text)
            else:
                digest = hashlib.sha256(part.data.encode()).hexdigest()[:12]
                print(f"[image {part.media_type}, {len(part.data)} base64 chars, sha256 {digest}]")
    reply = "I will open the Save dialog.\n```python\npyautogui.hotkey('ctrl', 's')\n```"
    state, actions = complete_step(config, AgentState(), request, reply)
    print("=== parsed actions for a sample reply ===")
    print(actions)
    print(f"state now holds {len(state)} turn(s)")


if __name__ == "__main__":
    main()
