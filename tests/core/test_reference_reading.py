"""The fallback reading of computer_13 replies finds the blocks the reference finds."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from returns.result import Success

from osharm_core.parsing import _REFERENCE_OPENINGS, _reference_blocks, parse_actions_from_string
from osharm_core.vocabulary import SPECIAL_WORDS
from tests.core import _fence_oracle
from tests.strategies import any_text, fence_heavy_replies


@given(fence_heavy_replies() | any_text)
@settings(max_examples=600)
@example("```json\n\n```")
@example("```json \n```\n{}\n```")
@example("``````\n``` \n```")
@example("```json\t{} ```json {} \n```")
def test_reference_blocks_match_the_oracle(text: str) -> None:
    """The linear block finder gives the very blocks the backtracking reading gives."""
    json_opening, bare_opening = _REFERENCE_OPENINGS
    assert list(_reference_blocks(text, json_opening)) == _fence_oracle.blocks(text, "```json")
    assert list(_reference_blocks(text, bare_opening)) == _fence_oracle.blocks(text, "```")


def _oracle_actions(text: str) -> list[object] | None:
    """What the reference's reading gives when every value it reads is one action."""
    blocks = _fence_oracle.blocks(text, "```json") or _fence_oracle.blocks(text, "```")
    try:
        values = [json.loads(content) for _, _, content in blocks] or [json.loads(text)]
    except ValueError:
        return None
    usable = all(isinstance(v, dict) or v in SPECIAL_WORDS for v in values)
    return values if usable else None


@given(fence_heavy_replies())
@settings(max_examples=600)
def test_a_reply_the_reference_reads_is_read(text: str) -> None:
    """Whenever the reference's reading gives only actions, the parser gives actions too."""
    if _oracle_actions(text) is not None:
        assert isinstance(parse_actions_from_string(text), Success)


@pytest.mark.parametrize("length", [10_000, 200_000])
def test_the_block_finder_is_linear_on_unclosed_openings(length: int) -> None:
    """Many openings with no closing fence after them are each looked at once (the
    reference's backtracking pattern takes quadratic time on them)."""
    text = "```json x" * (length // 9)
    assert list(_reference_blocks(text, _REFERENCE_OPENINGS[0])) == []
    assert parse_actions_from_string(text).value_or(None) is None
