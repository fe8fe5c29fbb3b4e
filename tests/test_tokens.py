"""Trimming with cl100k_base built from the bundled rank file: the reference's cut, never over the bound."""

from __future__ import annotations

import functools
import importlib
import importlib.resources
import subprocess
import sys
from typing import Any

import pytest
import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public
from hypothesis import given
from hypothesis import strategies as st

from osharm_core import _cl100k, tokens
from osharm_core.accessibility import linearize_accessibility_tree
from osharm_core.errors import ConfigError
from osharm_core.tokens import (
    CL100K_SHA256,
    TRIM_MARKER,
    RankFileError,
    cl100k_encoding,
    encoding_from_rank_file,
    trim_accessibility_tree,
    trim_with_split,
)
from tests import strategies as s
from tests.conftest import OBSERVATIONS

RANK_FILE = importlib.resources.files("osharm_core.data").joinpath("cl100k_base.tiktoken")


def encode(text: str) -> list[int]:
    """The token ids of `text`, special-token text counted as plain text."""
    return list(cl100k_encoding().encode_ordinary(text))


def reference_trim(text: str, max_tokens: int) -> str:
    """The reference's rule: past the limit, decode the first `max_tokens` tokens and mark the cut."""
    ids = encode(text)
    if len(ids) <= max_tokens:
        return text
    return str(cl100k_encoding().decode(ids[:max_tokens])) + TRIM_MARKER


def test_bundled_rank_file_has_the_published_hash() -> None:
    """The shipped rank file is the published cl100k_base file."""
    import hashlib

    assert hashlib.sha256(RANK_FILE.read_bytes()).hexdigest() == CL100K_SHA256


def test_encoding_matches_tiktoken_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pattern, special tokens and ranks equal tiktoken's own cl100k_base definition."""
    ours = cl100k_encoding()
    monkeypatch.setattr(
        tiktoken_ext.openai_public, "load_tiktoken_bpe", lambda *a, **k: dict(ours._mergeable_ranks)
    )
    theirs = tiktoken.Encoding(**tiktoken_ext.openai_public.cl100k_base())
    assert ours.name == theirs.name == "cl100k_base"
    assert ours._pat_str == theirs._pat_str
    assert ours._special_tokens == theirs._special_tokens
    assert ours.n_vocab == theirs.n_vocab == 100277
    sample = 'Hello world! 日本語 🧪 <|endoftext|>\n\n  push-button\tOK\t"quoted"  '
    assert ours.encode_ordinary(sample) == theirs.encode_ordinary(sample)


def test_known_token_ids() -> None:
    """A well-known cl100k_base example encodes to its published ids."""
    assert encode("hello world") == [15339, 1917]


def test_encoding_is_built_once() -> None:
    """The encoding is cached: every call returns the same object."""
    assert cl100k_encoding() is cl100k_encoding()


def test_loading_needs_neither_network_nor_tiktoken_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the encoding never calls tiktoken's downloading, caching loader."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("tiktoken's loader must not be used")

    monkeypatch.setattr(tiktoken.load, "load_tiktoken_bpe", refuse)
    monkeypatch.setattr(tiktoken.load, "read_file", refuse)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", refuse)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/nonexistent/never-used")
    rebuilt = importlib.reload(_cl100k)
    assert rebuilt.ENCODING.encode_ordinary("hello world") == [15339, 1917]
    assert cl100k_encoding().encode_ordinary("hello world") == [15339, 1917]


_FIRST_USE_IN_THREADS = """
import threading, tiktoken
built = []
original = tiktoken.Encoding.__init__
def counting(self, *args, **kwargs):
    built.append(1)
    original(self, *args, **kwargs)
tiktoken.Encoding.__init__ = counting
from osharm_core import cl100k_encoding
barrier = threading.Barrier(32)
seen = []
def first_use():
    barrier.wait()
    seen.append(id(cl100k_encoding()))
threads = [threading.Thread(target=first_use) for _ in range(32)]
for t in threads: t.start()
for t in threads: t.join()
print(len(built), len(seen), len(set(seen)))
"""


def test_thirty_two_threads_asking_first_build_one_encoding() -> None:
    """The encoding is built once however many threads ask for it at the same moment."""
    done = subprocess.run(
        [sys.executable, "-c", _FIRST_USE_IN_THREADS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["1", "32", "1"]


@pytest.mark.parametrize(
    "data",
    [b"", b"IQ== 0\n", RANK_FILE.read_bytes()[:-1], RANK_FILE.read_bytes() + b"\n"],
)
def test_wrong_rank_file_is_refused(data: bytes) -> None:
    """Bytes that are not exactly the published file raise RankFileError naming both hashes."""
    with pytest.raises(RankFileError, match=CL100K_SHA256):
        encoding_from_rank_file(data)


@pytest.mark.parametrize("line", [b"IQ==", b"IQ== zero", b"!!! 0", b"IQ== 0 1"])
def test_malformed_rank_line_is_refused(line: bytes) -> None:
    """A malformed rank line is a RankFileError naming its line number."""
    with pytest.raises(RankFileError, match="line 2"):
        tokens._ranks(b"Ig== 1\n" + line + b"\n")


# --- trimming ------------------------------------------------------------------------


def test_short_text_is_returned_unchanged() -> None:
    """Text within the limit comes back as the very same string."""
    text = "push-button\tOK"
    assert trim_accessibility_tree(text, 100) is text
    assert trim_accessibility_tree(text, len(encode(text))) is text


def test_cut_keeps_first_tokens_and_marks() -> None:
    """Past the limit the first max_tokens tokens are kept and "[...]" plus a newline appended."""
    text = "one two three four five"
    assert trim_accessibility_tree(text, 3) == "one two three" + TRIM_MARKER
    assert trim_accessibility_tree(text, 1) == "one" + TRIM_MARKER


def test_special_token_text_is_plain_text() -> None:
    """ "<|endoftext|>" inside a tree is counted and cut as ordinary text, never raising."""
    text = "<|endoftext|>" * 50
    trimmed = trim_accessibility_tree(text, 10)
    assert trimmed.endswith(TRIM_MARKER)
    assert len(encode(trimmed.removesuffix(TRIM_MARKER))) <= 10


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10", None])
def test_max_tokens_must_be_positive_int(bad: object) -> None:
    """A limit that is not a positive int is a ValueError that names it."""
    with pytest.raises(ValueError, match="max_tokens must be a positive int"):
        trim_accessibility_tree("text", bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", [b"abc " * 100, b"ab", None, 5, ["a", "b"]])
def test_text_must_be_a_str(text: object) -> None:
    """Bytes (a tree not yet linearized) or None are a TypeError saying a str is needed, short or
    long, not a regex or attribute error from deep inside."""
    with pytest.raises(TypeError, match="the text to trim must be a str; got"):
        trim_accessibility_tree(text, 2)  # type: ignore[arg-type]


@pytest.mark.parametrize("encoding", ["gpt2", "cl100k_base", 5, object()])
def test_encoding_must_be_an_encoding(encoding: object) -> None:
    """An encoding given by name (or anything without tiktoken's methods) is a ConfigError."""
    with pytest.raises(ConfigError, match=r"encoding must be None or a tiktoken\.Encoding; got"):
        trim_accessibility_tree("a b c d e f g h", 2, encoding=encoding)  # type: ignore[arg-type]


def test_encoding_can_be_passed_in() -> None:
    """An explicit encoding is used instead of the bundled one."""

    class Counting:
        def __init__(self) -> None:
            self.calls = 0

        def encode_ordinary(self, text: str) -> list[int]:
            self.calls += 1
            return list(range(len(text.split())))

        def decode(self, ids: list[int]) -> str:
            return " ".join("w" for _ in ids)

        def decode_tokens_bytes(self, ids: list[int]) -> list[bytes]:
            return [b"w" for _ in ids]

    fake = Counting()
    assert trim_accessibility_tree("a b c d", 2, encoding=fake) == "w w" + TRIM_MARKER
    assert fake.calls >= 1


HINDI = "\u0939\u093f\u0928\u094d\u0926\u0940"  # a word whose tokens split its characters


def test_split_character_backs_off_until_it_fits() -> None:
    """When the decoded cut re-encodes to more tokens than allowed, fewer tokens are kept."""
    text = HINDI * 10
    over = reference_trim(text, 2).removesuffix(TRIM_MARKER)
    assert over.endswith("\ufffd")
    assert len(encode(over)) == 3
    assert trim_accessibility_tree(text, 2) == "\u0939" + TRIM_MARKER
    assert trim_accessibility_tree(text, 4) == HINDI[:3] + TRIM_MARKER


@pytest.mark.parametrize("text", [HINDI * 10, "a🧪" * 40, "日本語のテキスト" * 10])
def test_cut_equals_reference_whenever_the_reference_fits(text: str) -> None:
    """At every limit the cut stays within bounds and is the reference's cut when that one fits."""
    for limit in range(1, 40):
        trimmed = trim_accessibility_tree(text, limit)
        assert len(encode(trimmed.removesuffix(TRIM_MARKER))) <= limit
        reference = reference_trim(text, limit)
        if len(encode(reference.removesuffix(TRIM_MARKER))) <= limit:
            assert trimmed == reference


def test_largest_fixture_is_trimmed_to_the_bound() -> None:
    """The linearized largest tree is cut to the default 10000 tokens exactly as the reference cuts it."""
    text = linearize_accessibility_tree(
        (OBSERVATIONS / "chromium_inventory_table.xml").read_text(encoding="utf-8")
    )
    trimmed = trim_accessibility_tree(text, 10000)
    assert trimmed == reference_trim(text, 10000)
    assert len(encode(trimmed.removesuffix(TRIM_MARKER))) <= 10000


@pytest.mark.parametrize("name", ["libreoffice_calc_sales", "xfce4_terminal_shell"])
def test_fast_prefix_count_is_exact_on_fixtures(name: str) -> None:
    """The tail-only recount of a cut equals re-encoding the whole cut, at many cut points."""
    enc = cl100k_encoding()
    text = linearize_accessibility_tree((OBSERVATIONS / f"{name}.xml").read_text(encoding="utf-8"))
    ids = enc.encode_ordinary(text)
    for keep in range(1, len(ids), max(1, len(ids) // 150)):
        prefix, count = tokens._decoded_prefix(enc, ids, keep)
        assert prefix == enc.decode(ids[:keep])
        assert count == len(enc.encode_ordinary(prefix))


# --- properties -----------------------------------------------------------------------


@given(s.trim_texts, st.integers(1, 60))
def test_trim_never_exceeds_bound(text: str, max_tokens: int) -> None:
    """The kept part never encodes to more than max_tokens; short text is untouched."""
    trimmed = trim_accessibility_tree(text, max_tokens)
    if len(encode(text)) <= max_tokens:
        assert trimmed == text
    else:
        assert trimmed.endswith(TRIM_MARKER)
        assert len(encode(trimmed.removesuffix(TRIM_MARKER))) <= max_tokens
        reference = reference_trim(text, max_tokens)
        if len(encode(reference.removesuffix(TRIM_MARKER))) <= max_tokens:
            assert trimmed == reference


@given(s.trim_texts, st.data())
def test_fast_prefix_count_is_exact(text: str, data: st.DataObject) -> None:
    """Counting only the tail after a line start gives the same count as re-encoding the cut."""
    enc = cl100k_encoding()
    ids = enc.encode_ordinary(text)
    if not ids:
        return
    keep = data.draw(st.integers(1, len(ids)))
    prefix, count = tokens._decoded_prefix(enc, ids, keep)
    assert count == len(enc.encode_ordinary(prefix))


@functools.cache
def _cl100k_spelled_otherwise() -> tiktoken.Encoding:
    """cl100k with its pattern wrapped in a group: the same tokens, but not recognised as
    cl100k, so trimming encodes the whole text and never takes a shortcut."""
    enc = cl100k_encoding()
    return tiktoken.Encoding(
        name="cl100k_spelled_otherwise",
        pat_str="(?:" + enc._pat_str + ")",
        mergeable_ranks=enc._mergeable_ranks,
        special_tokens=enc._special_tokens,
    )


@given(st.lists(s.trim_texts, min_size=1, max_size=8).map("\n".join), st.integers(1, 60))
def test_trimming_a_head_gives_what_trimming_the_whole_text_gives(
    text: str, max_tokens: int
) -> None:
    """A long text is encoded only up to a split point past the cut (8 MB used to take 4 s
    and 450 MB); the trimmed text is the one encoding all of it gives."""
    fast = trim_with_split(text, max_tokens)[0]
    assert fast == trim_with_split(text, max_tokens, encoding=_cl100k_spelled_otherwise())[0]


def test_a_huge_table_is_trimmed_at_the_cost_of_its_head() -> None:
    """Only the head is encoded: the tokens the trim reads never reach the end of 8 MB."""
    row = "push-button\tOK\t\t(10, 20)\t(30, 40)\n"
    text = row * (8_000_000 // len(row))
    enc = cl100k_encoding()
    calls: list[int] = []

    class Counting:
        _pat_str = enc._pat_str

        def __getattr__(self, name: str) -> Any:
            return getattr(enc, name)

        def encode_ordinary(self, part: str) -> list[int]:
            calls.append(len(part))
            return enc.encode_ordinary(part)

    trimmed, _ = trim_with_split(text, 1000, encoding=Counting())  # type: ignore[arg-type]
    assert trimmed == reference_trim(text, 1000)
    assert max(calls) < 100_000
