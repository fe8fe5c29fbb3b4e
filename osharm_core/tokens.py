"""Token counting and trimming with tiktoken's `cl100k_base`, built from the bundled rank file.

tiktoken's own loader downloads the rank file, caches it in a temporary folder and
reads environment variables; none of that belongs in the core. The rank file ships
inside the package (`osharm_core/data/cl100k_base.tiktoken`), is read once through
`importlib.resources`, checked against its published SHA-256, and parsed here.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from types import MappingProxyType
from typing import Final

import attrs
import tiktoken

from osharm_core.errors import ConfigError, RankFileError, excerpt, number_excerpt

__all__ = [
    "CL100K_SHA256",
    "TRIM_MARKER",
    "RankFileError",
    "TokenSplit",
    "cl100k_encoding",
    "count_joined",
    "encoding_from_rank_file",
    "trim_accessibility_tree",
    "trim_with_split",
]

#: SHA-256 of the published `cl100k_base.tiktoken` rank file.
CL100K_SHA256: Final = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
#: What a trimmed text ends with.
TRIM_MARKER: Final = "[...]\n"

# cl100k_base's pre-tokenizer pattern and special tokens: format data that must
# match tiktoken's definition exactly (a test checks them against tiktoken_ext).
_CL100K_PATTERN: Final = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_CL100K_SPECIAL: Final = MappingProxyType(
    {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    }
)


def _ranks(data: bytes) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(data.splitlines(), start=1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise RankFileError(
                f"rank file line {number} is not 'BASE64TOKEN RANK': {line[:60]!r}"
            ) from None
    return ranks


def encoding_from_rank_file(data: bytes) -> tiktoken.Encoding:
    """Build the `cl100k_base` encoding from the rank file's bytes, after checking its SHA-256.

    Raises `RankFileError` when the bytes are not the published file.
    """
    digest = hashlib.sha256(data).hexdigest()
    if digest != CL100K_SHA256:
        raise RankFileError(f"cl100k_base rank file has SHA-256 {digest}, expected {CL100K_SHA256}")
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=_CL100K_PATTERN,
        mergeable_ranks=_ranks(data),
        special_tokens=dict(_CL100K_SPECIAL),
    )


def cl100k_encoding() -> tiktoken.Encoding:
    """The `cl100k_base` encoding from the bundled rank file, built once per process.

    It is built on first use, once even when many threads ask at the same time
    (the build is the body of a private module, which Python imports once).
    """
    from osharm_core import _cl100k  # deferred: building takes about 0.3 s

    return _cl100k.ENCODING


def trim_accessibility_tree(
    text: str, max_tokens: int, *, encoding: tiktoken.Encoding | None = None
) -> str:
    """Keep the first `max_tokens` tokens of `text` and append `[...]` and a newline.

    Text of at most `max_tokens` tokens comes back unchanged. Special-token text
    such as `<|endoftext|>` counts as plain text. The kept part never encodes to
    more than `max_tokens` tokens: when decoding a token prefix splits a character
    (giving U+FFFD) or re-merges into more tokens, fewer tokens are kept.

    >>> trim_accessibility_tree("one two three four", 2)
    'one two[...]\\n'
    >>> trim_accessibility_tree("short", 10)
    'short'

    A `text` that is not a str is a `TypeError`; a bad `max_tokens` or `encoding` a
    `ConfigError`.
    """
    return trim_with_split(text, max_tokens, encoding=encoding)[0]


@attrs.frozen
class TokenSplit:
    """A known head of a text: `text[:chars]` is `tokens` tokens and ends at a split point.

    A split point is where a newline meets an ASCII letter or digit. cl100k's
    pre-tokenizer never puts both into one chunk and has no look-behind, so any text that starts
    with `text[:chars]` encodes to those `tokens` tokens followed by the encoding of
    the rest alone. `TokenSplit(0, 0)` is the empty head, true of every text.
    """

    chars: int
    tokens: int


def trim_with_split(
    text: str, max_tokens: int, *, encoding: tiktoken.Encoding | None = None
) -> tuple[str, TokenSplit | None]:
    """`trim_accessibility_tree`'s result and, when trimming encoded it, a `TokenSplit` of it.

    The split comes from the tokens the trim computed anyway (None when the text
    was short enough not to be encoded, or no split point lies near its end), so
    `count_joined` can count a message holding the result by re-encoding only
    its last line.
    """
    if not isinstance(text, str):
        raise TypeError(
            f"the text to trim must be a str; got {type(text).__name__} {excerpt(text)}"
        )
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ConfigError(f"max_tokens must be a positive int; got {number_excerpt(max_tokens)}")
    if encoding is not None and not all(
        callable(getattr(encoding, name, None)) for name in ("encode_ordinary", "decode")
    ):
        raise ConfigError(
            f"encoding must be None or a tiktoken.Encoding; got {type(encoding).__name__} "
            f"{excerpt(encoding)}"
        )
    # Every token is at least one byte, so a text of at most `max_tokens` bytes fits;
    # one with more characters than that has more bytes too, and is not encoded to see.
    if len(text) <= max_tokens and len(text.encode("utf-8", "surrogatepass")) <= max_tokens:
        return text, None
    enc = encoding if encoding is not None else cl100k_encoding()
    tokens = _leading_tokens(enc, text, max_tokens)
    if len(tokens) <= max_tokens:
        return text, _split(enc, tokens, len(tokens), text)
    keep = max_tokens
    while True:
        prefix, count, split = _decoded_prefix_split(enc, tokens, keep)
        if count <= max_tokens:
            return prefix + TRIM_MARKER, split
        keep = max(0, keep - (count - max_tokens))


def count_joined(
    head: str, text: str, split: TokenSplit, tail: str, *, encoding: tiktoken.Encoding
) -> int | None:
    """The tokens of `head + text + tail`, encoding only `head` and the part of it after `split`.

    `split` must be a `TokenSplit` of `text` under `encoding` (cl100k). None when
    the join at `head`'s end is not a split point (`head` not ending in a newline
    or `text` not starting with an ASCII letter or digit): count the whole text then.
    """
    if head and not (head.endswith("\n") and text[:1].isascii() and text[:1].isalnum()):
        return None
    before = len(encoding.encode_ordinary(head)) if head else 0
    return before + split.tokens + len(encoding.encode_ordinary(text[split.chars :] + tail))


def _splits_at_lines(enc: tiktoken.Encoding) -> bool:
    """Whether `enc` pre-tokenizes as cl100k does, so the `TokenSplit` rule holds for it."""
    return getattr(enc, "_pat_str", None) == _CL100K_PATTERN


#: Where a head of the text is first cut to be encoded on its own: this many characters per
#: token kept (real tables run 2-4), then twice as far each time it holds too few tokens.
_HEAD_CHARS_PER_TOKEN: Final = 4
_SPLIT_POINT: Final = re.compile(r"\n(?=[0-9A-Za-z])")


def _leading_tokens(enc: tiktoken.Encoding, text: str, max_tokens: int) -> list[int]:
    """The tokens of `text`, or only the first ones: those of a head of it that ends at a
    split point (see `TokenSplit`) and holds more than `max_tokens`, which are the first
    tokens of the whole text. The head grows from split point to split point, each piece
    encoded once (the pieces' tokens join exactly there), so a huge text is trimmed at the
    cost of its head (8 MB of rows took 4 s and 450 MB to trim to 10,000 tokens) and no text
    costs more than one encoding of it; one with no split point past the head (a single
    huge cell) is encoded whole."""
    if not _splits_at_lines(enc):
        return enc.encode_ordinary(text)
    tokens: list[int] = []
    done = 0  # `text[:done]` is encoded, and ends at a split point (or is empty)
    bound = _HEAD_CHARS_PER_TOKEN * max_tokens
    while bound < len(text):
        point = _SPLIT_POINT.search(text, max(bound, done))
        if point is None:
            break
        tokens += enc.encode_ordinary(text[done : point.end()])
        done = point.end()
        if len(tokens) > max_tokens:
            return tokens
        bound = 2 * done
    return tokens + enc.encode_ordinary(text[done:])


#: How many tokens back from the cut `_decoded_prefix` looks for a line start.
_TAIL_WINDOW: Final = 256


def _last_split(enc: tiktoken.Encoding, tokens: list[int], keep: int) -> int | None:
    """The last token index `m <= keep` (within `_TAIL_WINDOW`) where a split point lies."""
    if not _splits_at_lines(enc):
        return None
    start = max(0, keep - _TAIL_WINDOW)
    pieces: list[bytes] = enc.decode_tokens_bytes(tokens[start:keep])
    for i in range(len(pieces) - 1, 0, -1):
        if pieces[i][:1].isalnum() and pieces[i - 1].endswith(b"\n"):
            return start + i
    return None


def _split(enc: tiktoken.Encoding, tokens: list[int], keep: int, text: str) -> TokenSplit | None:
    """The `TokenSplit` at the last split point of `text`, the decoding of `tokens[:keep]`."""
    m = _last_split(enc, tokens, keep)
    if m is None:
        return None
    rest = enc.decode(tokens[m:keep])
    chars = len(text) - len(rest)
    if chars < 1 or text[chars - 1] != "\n" or not text.endswith(rest):
        return None
    return TokenSplit(chars, m)


def _decoded_prefix(enc: tiktoken.Encoding, tokens: list[int], keep: int) -> tuple[str, int]:
    """The text of `tokens[:keep]` and how many tokens that text encodes to."""
    prefix, count, _ = _decoded_prefix_split(enc, tokens, keep)
    return prefix, count


def _decoded_prefix_split(
    enc: tiktoken.Encoding, tokens: list[int], keep: int
) -> tuple[str, int, TokenSplit | None]:
    """The text of `tokens[:keep]`, how many tokens that text encodes to, and its split.

    cl100k's pre-tokenizer never puts a newline and a following letter into one
    chunk and has no look-behind, so at a token boundary where a token ending in
    a newline meets one starting with a letter (or a digit: `\\p{N}` chunks never
    take a newline either), the encoding splits into the part
    before (exactly the original `m` tokens) and the encoding of the rest alone.
    Only that short tail is re-encoded; without such a boundary near the cut, or
    for an encoding with another pre-tokenizer, the whole prefix is.
    """
    prefix: str = enc.decode(tokens[:keep])
    m = _last_split(enc, tokens, keep)
    if m is None:
        return prefix, len(enc.encode_ordinary(prefix)), None
    rest = enc.decode(tokens[m:keep])
    count = m + len(enc.encode_ordinary(rest))
    chars = len(prefix) - len(rest)
    if chars < 1 or prefix[chars - 1] != "\n" or not prefix.endswith(rest):
        return prefix, count, None
    return prefix, count, TokenSplit(chars, m)
