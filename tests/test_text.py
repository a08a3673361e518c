"""frost.text: byte-level BPE checked against a naive trainer written here and against HF
tokenizers."""

import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frost.config import UsageError
from frost.text import (
    GPT4_PATTERN,
    Tokenizer,
    count_chunks,
    kjv_text,
    load,
    save,
    save_hf,
    split_chunks,
    stream_files,
    token_dtype,
    train,
    train_counts,
)
from frost.text import io as text_io
from frost.text.bpe import _pieces

tokenizers = pytest.importorskip("tokenizers")
EOT = "<|endoftext|>"
HYPO = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# ----------------------------------------------------------------------------- references


def naive_train(counts: dict[str, int], vocab_size: int) -> list[tuple[int, int, int]]:
    """Textbook BPE: recount every pair at every step; highest count wins, ties go to the smallest
    (left, right) pair; a merge whose bytes already are a token reuses that token's id."""
    words = {tuple(w.encode("utf-8")): n for w, n in counts.items()}
    vocab = [bytes([i]) for i in range(256)]
    merges = []
    while len(vocab) < vocab_size:
        pairs = Counter()
        for w, n in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += n
        if not pairs:
            break
        a, b = min(pairs, key=lambda p: (-pairs[p], p))
        new = vocab[a] + vocab[b]
        c = vocab.index(new) if new in vocab else len(vocab)
        if c == len(vocab):
            vocab.append(new)
        merges.append((a, b, c))
        merged = {}
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == (a, b):
                    out.append(c)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = n
        words = merged
    return merges


def hf_trainer(vocab_size: int):
    """HF tokenizers' BPE trainer, set up like ours: our regex, then byte-level with no regex."""
    from tokenizers import Regex, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(GPT4_PATTERN), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    return tok, trainer


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def lines():
    return kjv_text().splitlines(keepends=True)


@pytest.fixture(scope="module")
def small():
    """A tokenizer trained on 300k characters of the KJV, with two special tokens."""
    return train(kjv_text()[:300_000], 1000, special_tokens=[EOT, "<|pad|>"], workers=1)


@pytest.fixture(scope="module")
def kjv4k():
    return train(kjv_text(), 4096, special_tokens=[EOT])


@pytest.fixture(scope="module")
def hf4k(kjv4k, tmp_path_factory):
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    save_hf(kjv4k, path)
    return tokenizers.Tokenizer.from_file(str(path))


# ----------------------------------------------------------------------------- round trips

unicode_text = st.one_of(
    st.text(),  # any code point but surrogates
    st.text(
        st.sampled_from("😀👍🏽🇫🇷👨‍👩‍👧汉字かなカナ한국어 \t\n\r\u00a0\u3000é'sS1"), max_size=60
    ),
    st.builds(
        lambda n, m, s: " " * n + "\n" * m + s,
        st.integers(0, 3000),
        st.integers(0, 50),
        st.text(max_size=5),
    ),
)


@HYPO
@given(s=unicode_text)
def test_decode_encode_round_trip(small, s):
    ids = small.encode(s, special="text")
    assert all(0 <= i < small.vocab_size for i in ids)
    assert small.decode(ids) == s


def test_round_trip_corpus_and_edges(small):
    text = kjv_text()[300_000:400_000]
    assert small.decode(small.encode(text)) == text
    assert small.encode("") == [] and small.decode([]) == ""
    assert small.decode(small.encode(" " * 10_000 + "x")) == " " * 10_000 + "x"


@HYPO
@given(
    s=st.text(st.characters(max_codepoint=127))
    | st.text(st.sampled_from(" \t\n\r\x0b\x0c\x1c\x1fa1'.sS"))
)
def test_ascii_fast_path_splits_like_the_regex_module(s):
    assert split_chunks(GPT4_PATTERN, s) == regex.findall(GPT4_PATTERN, s)


def test_split_chunks_keeps_unmatched_text():
    assert split_chunks(GPT4_PATTERN, "Hello world!!") == ["Hello", " world", "!!"]
    assert split_chunks(r"\d+", "ab12cd3") == [
        "ab",
        "12",
        "cd",
        "3",
    ]  # gaps become chunks, as in HF
    tok = Tokenizer([], pattern=r"\d+")
    assert tok.decode(tok.encode("ab12cd3")) == "ab12cd3"


# ----------------------------------------------------------------------------- trainer vs naive


def test_trainer_matches_naive_on_kjv():
    counts = count_chunks(kjv_text()[:30_000], workers=1)
    assert train_counts(counts, 256 + 300).merges == naive_train(counts, 256 + 300)


@HYPO
@given(
    texts=st.lists(st.text(st.sampled_from("aab c'\n1é😀"), max_size=40), max_size=12),
    n_merges=st.integers(0, 40),
)
def test_trainer_matches_naive(texts, n_merges):
    counts = Counter(c for t in texts for c in regex.findall(GPT4_PATTERN, t))
    assert train(texts, 256 + n_merges, workers=1).merges == naive_train(counts, 256 + n_merges)


def test_ties_and_int64_counts():
    # 3e9 overflows int32; "cd" and "ce" tie, so the smaller pair (c, d) goes first
    counts = {"ce": 2_000_000_000, "ab": 3_000_000_000, "cd": 2_000_000_000}
    expect = [(97, 98, 256), (99, 100, 257), (99, 101, 258)]
    assert train_counts(counts, 259).merges == expect
    for seed in range(5):  # no dependence on insertion (hash) order
        items = list(counts.items())
        random.Random(seed).shuffle(items)
        assert train_counts(dict(items), 259).merges == expect


def test_duplicate_token_reuses_id():
    # (a, a) -> "aa"; (aa, a) and (a, aa) both spell "aaa": one token, two merges (HF allows this
    # too)
    tok = Tokenizer([(97, 97, 256), (256, 97, 257), (97, 256, 257)])
    assert tok.vocab_size == 258 and tok.encode("aaa") == [257]
    with pytest.raises(ValueError, match="not"):
        Tokenizer([(97, 97, 256), (97, 98, 256)])


def test_streaming_matches_in_memory(tmp_path):
    text = kjv_text()[:200_000] + "\n\n  last line  \n\n"
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    whole = count_chunks(text, workers=1)
    assert count_chunks(stream_files([path], size=1000), workers=1) == whole
    kjv = kjv_text()  # 4 MB: cut into ~1 MB pieces, counted in two worker processes
    assert count_chunks(kjv, workers=2) == Counter(regex.findall(GPT4_PATTERN, kjv))
    pieces = list(_pieces(text, size=700))
    assert "".join(pieces) == text and len(pieces) > 200
    assert Counter(c for p in pieces for c in split_chunks(GPT4_PATTERN, p)) == whole
    assert sum(n * len(c) for c, n in whole.items()) == len(text)


def test_vocab_size_checks():
    with pytest.raises(ValueError, match="at least 257"):
        train("hello", 256, special_tokens=[EOT])
    assert train("ab" * 10, 300).vocab_size <= 300  # stops when no pair is left


# ----------------------------------------------------------------------------- HF tokenizers


def test_hf_export_gives_our_ids_on_the_whole_corpus(kjv4k, hf4k, lines):
    ours = kjv4k.encode_batch(lines, workers=2)
    theirs = [e.ids for e in hf4k.encode_batch(lines)]
    assert ours == theirs
    assert sum(map(len, ours)) > 900_000


@HYPO
@given(s=unicode_text)
def test_hf_export_on_any_text(kjv4k, hf4k, s):
    assert kjv4k.encode(s, special="allow") == hf4k.encode(s).ids


def test_long_chunk_matches_hf_in_n_log_n_time(kjv4k, hf4k):
    rng = random.Random(0)  # one chunk of 60k letters (the GPT-4 pattern does not cap \p{L}+)
    chunk = "a" * 10_000 + "".join(rng.choices("etaoinshrdlucmfwypvbgk", k=50_000))
    start = time.perf_counter()
    ids = kjv4k.encode(chunk)
    # 40k letters took 7.8 s when each merge rescanned the chunk
    assert time.perf_counter() - start < 5
    assert ids == hf4k.encode(chunk).ids and kjv4k.decode(ids) == chunk


def test_decode_refuses_ids_out_of_range(small):
    for bad in ([-1], [small.vocab_size], [5, -3, 7], np.array([1, small.vocab_size + 9])):
        with pytest.raises(UsageError, match="out of range"):
            small.decode(bad)
    assert small.decode(np.array(small.encode("In the beginning"))) == "In the beginning"


def test_hf_special_tokens_and_decode(kjv4k, hf4k):
    s = f"In the beginning{EOT}God  \n\n created 😀"
    ids = kjv4k.encode(s, special="allow")
    assert hf4k.encode(s).ids == ids and ids.count(kjv4k.special[EOT]) == 1
    assert hf4k.decode(ids, skip_special_tokens=False) == s == kjv4k.decode(ids)


def test_compression_within_one_percent_of_hf(lines):
    split = int(0.9 * len(lines))
    held_out = "".join(lines[split:])
    ours = train(lines[:split], 4096)
    hf, trainer = hf_trainer(4096)
    hf.train_from_iterator(lines[:split], trainer)
    n_bytes = len(held_out.encode("utf-8"))
    ours_bpt = n_bytes / len(ours.encode(held_out))
    hf_bpt = n_bytes / len(hf.encode(held_out).ids)
    assert abs(ours_bpt / hf_bpt - 1) < 0.01, (ours_bpt, hf_bpt)


# ----------------------------------------------------------------------------- special tokens


def test_special_tokens_allowed_refused_or_text(small):
    s = f"a{EOT}b<|pad|>"
    with pytest.raises(ValueError, match="special token"):
        small.encode(s)
    allowed = small.encode(s, special="allow")
    assert [i for i in allowed if i >= 1000 - 2] == [small.special[EOT], small.special["<|pad|>"]]
    as_text = small.encode(s, special="text")
    assert all(i < 998 for i in as_text) and small.decode(as_text) == small.decode(allowed) == s
    with pytest.raises(ValueError, match="special must be"):
        small.encode(s, special="yes")
    assert small.encode_batch(["x", s], special="allow") == [small.encode("x"), allowed]


# ----------------------------------------------------------------------------- files


def test_save_load_round_trip(small, tmp_path):
    path = tmp_path / "tok.json"
    save(small, path)
    back = load(path)
    assert (back.merges, back.special, back.pattern) == (small.merges, small.special, small.pattern)
    text = kjv_text()[-20_000:]
    assert back.encode(text) == small.encode(text)
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically


def _edit(text, change):
    data = json.loads(text)
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda s: s[: len(s) // 2], "not valid JSON"),
        (lambda s: "", "not valid JSON"),
        (lambda s: s.replace('"frost-bpe"', '"other"'), "not a Frost tokenizer"),
        (lambda s: s.replace('"version":1', '"version":99'), "version 99"),
        (lambda s: s.replace('"merges"', '"merge"'), "missing field"),
        (lambda s: _edit(s, lambda d: d["merges"][0].append(7)), "triples"),
        (lambda s: _edit(s, lambda d: d["merges"][0].__setitem__(2, 400)), "does not exist"),
        (lambda s: _edit(s, lambda d: d["merges"][5].__setitem__(2, 256)), "not"),
        (
            lambda s: _edit(s, lambda d: d["special_tokens"].__setitem__(EOT, 3)),
            "special token ids",
        ),
        (lambda s: _edit(s, lambda d: d.__setitem__("pattern", "(unclosed")), "not a valid regex"),
        (lambda s: _edit(s, lambda d: d.__setitem__("pattern", "")), "matches the empty string"),
        (
            lambda s: _edit(s, lambda d: d.__setitem__("pattern", r"\s*")),
            "matches the empty string",
        ),
    ],
)
def test_malformed_file_errors_name_the_file(small, tmp_path, damage, message):
    path = tmp_path / "broken.json"
    save(small, path)
    path.write_text(damage(path.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(UsageError, match=message) as err:
        load(path)
    assert str(path) in str(err.value)
    with pytest.raises(UsageError, match="cannot read"):
        load(tmp_path / "missing.json")


def test_loading_a_hf_file_says_what_it_is(small, tmp_path):
    save_hf(small, tmp_path / "tokenizer.json")
    with pytest.raises(ValueError, match="HF tokenizer.json"):
        load(tmp_path / "tokenizer.json")


def _gpt2_folder(tok, folder, names):
    """`tok` as a GPT-2 tokenizer folder under `names` (vocabulary file, merges file)."""
    chars = text_io._byte_chars()
    tokens = ["".join(chars[b] for b in token) for token in tok.vocab] + list(tok.special)
    folder.mkdir()
    (folder / names[0]).write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    merges = [f"{tokens[a]} {tokens[b]}" for a, b, _ in tok.merges]
    (folder / names[1]).write_text("\n".join(["#version: 0.2", *merges]) + "\n")


def _cut(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(
    "layout, damage, fault, message",
    [
        (0, lambda f: (f / "vocab.bpe").unlink(), "vocab.bpe", "not found"),
        (0, lambda f: (f / "encoder.json").unlink(), "encoder.json", "not found"),
        (0, lambda f: _cut(f / "encoder.json"), "encoder.json", "not valid JSON"),
        (0, lambda f: (f / "vocab.bpe").write_bytes(b"\xff\xfe"), "vocab.bpe", "not UTF-8"),
        (1, lambda f: (f / "merges.txt").unlink(), "merges.txt", "not found"),
        (1, lambda f: _cut(f / "vocab.json"), "vocab.json", "not valid JSON"),
        (1, lambda f: (f / "vocab.json").write_text("[1, 2]"), "vocab.json", "not a GPT-2 vocab"),
        (1, lambda f: [p.unlink() for p in f.iterdir()], "", "holds no GPT-2 tokenizer files"),
    ],
)
def test_a_broken_gpt2_folder_names_the_file_at_fault_and_both_layouts(
    small, tmp_path, layout, damage, fault, message
):
    """OpenAI's layout (encoder.json + vocab.bpe) or transformers' (vocab.json + merges.txt): a
    missing, cut or malformed file is named, never the other layout's."""
    folder = tmp_path / "gpt2"
    _gpt2_folder(small, folder, text_io.GPT2_LAYOUTS[layout])
    assert text_io.load_gpt2(folder).encode("In the beginning") == small.encode("In the beginning")
    damage(folder)
    with pytest.raises(UsageError, match=message) as error:
        text_io.load_gpt2(folder)
    said = str(error.value)
    assert said.startswith(str(folder / fault)) and "\n" not in said
    assert "encoder.json + vocab.bpe, or vocab.json + merges.txt" in said


# ----------------------------------------------------------------------------- CLI


def test_cli_train_and_encode(tmp_path, capsys):
    from frost.cli import main

    docs = [kjv_text()[:50_000], kjv_text()[50_000:80_000]]
    paths = []
    for i, doc in enumerate(docs):
        paths.append(tmp_path / f"doc{i}.txt")
        paths[-1].write_text(doc, encoding="utf-8")
    tok_path, out = tmp_path / "tok.json", tmp_path / "tokens.bin"
    assert (
        main(
            [
                "tokenizer",
                "train",
                *map(str, paths),
                "--vocab-size",
                "600",
                "-o",
                str(tok_path),
                "--special",
                EOT,
            ]
        )
        == 0
    )
    tok = load(tok_path)
    assert (
        tok.vocab_size == 600
        and tok.merges == train(docs, 600, special_tokens=[EOT], workers=1).merges
    )
    assert (
        main(
            [
                "tokenizer",
                "encode",
                "--tokenizer",
                str(tok_path),
                *map(str, paths),
                "-o",
                str(out),
                "--eot",
                EOT,
            ]
        )
        == 0
    )
    ids = np.memmap(out, dtype=token_dtype(tok.vocab_size), mode="r")
    eot = [tok.special[EOT]]
    assert (
        ids.dtype == np.uint16
        and ids.tolist() == tok.encode(docs[0]) + eot + tok.encode(docs[1]) + eot
    )
    assert token_dtype(65536) == np.uint32
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically
    # a special token in the text is refused by default
    paths[1].write_text(f"a{EOT}b", encoding="utf-8")
    for extra in (["--eot", EOT], ["--eot", "<|nope|>"]):
        assert (
            main(
                [
                    "tokenizer",
                    "encode",
                    "--tokenizer",
                    str(tok_path),
                    *map(str, paths),
                    "-o",
                    str(out),
                    *extra,
                ]
            )
            == 2
        )
    assert np.memmap(out, dtype=np.uint16, mode="r").tolist() == ids.tolist()  # the old file stands
    assert "<|nope|>" in capsys.readouterr().err


def test_cli_mistakes_are_one_line(tmp_path, capsys):
    from frost.cli import main

    (tmp_path / "data.bin").write_bytes(bytes(range(256)) * 10)
    (tmp_path / "a.txt").write_text("hello world, " * 50, encoding="utf-8")
    a, tok = str(tmp_path / "a.txt"), str(tmp_path / "tok.json")
    cases = [
        (["train", str(tmp_path / "data.bin"), "--vocab-size", "300"], "data.bin: not UTF-8 text"),
        (["train", str(tmp_path / "nope.txt"), "--vocab-size", "300"], "nope.txt"),
        (["train", a, "--vocab-size", "100"], "use at least 256"),
        (["train", a, "--vocab-size", "300", "--pattern", ""], "--pattern '': must not be empty"),
        (["train", a, "--vocab-size", "300", "--pattern", r"\s*"], "matches the empty string"),
        (["train", a, "--vocab-size", "300", "--pattern", "(x"], "not a valid regex"),
        (
            ["train", a, "--vocab-size", "300", "--workers", "0"],
            "--workers 0: must be a whole number >= 1",
        ),
        (["encode", "--tokenizer", tok, a], "tok.json: cannot read"),
        (
            ["train", a, "--vocab-size", "300", "--hf", str(tmp_path / "no" / "hf.json")],
            "there is no folder",
        ),
        (["train", a, "--vocab-size", "300", "--hf", str(tmp_path)], "is a folder; give a file"),
        (["encode", "--tokenizer", tok, a, "--eot", ""], "--eot '': must not be empty"),
    ]
    for argv, message in cases:
        assert (
            main(["tokenizer", *argv, "-o", tok if argv[0] == "train" else str(tmp_path / "t.bin")])
            == 2
        )
        err = capsys.readouterr().err
        shown = err.rsplit("\r", 1)[-1]  # what a terminal shows: a progress bar, if any, was erased
        assert shown.startswith("frost: error: ") and message in shown and err.count("\n") == 1, (
            argv,
            err,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.txt",
        "data.bin",
    ]  # nothing (half-)written


def test_imports_and_the_numba_cache(tmp_path):
    """frost.text loads lazily, bpe does not import io (nor numba, until training); with no cache
    folder numba could write (here, NUMBA_CACHE_DIR, ~/.cache), the merge loop warns, and
    compiles."""
    from frost.text import merge

    shutil.copy(merge.__file__, tmp_path / "merge_copy.py")
    (tmp_path / "__pycache__").write_text("")
    code = (
        "import sys, frost.text.cli, frost.text; assert 'numpy' not in sys.modules and 'regex' not "
        "in sys.modules\nimport frost.text.bpe; assert 'frost.text.io' not in sys.modules and "
        "'numba' not in sys.modules\nimport merge_copy"
    )
    env = {
        **os.environ,
        "NUMBA_CACHE_DIR": "/dev/null/numba",
        "XDG_CACHE_HOME": "/dev/null/cache",
        "HOME": "/dev/null",
    }
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0 and "set NUMBA_CACHE_DIR to a writable folder" in run.stderr, (
        run.stderr
    )


def test_kjv_corpus():
    text = kjv_text()
    assert text.startswith("In the beginning God created the heaven and the earth.\n")
    assert text.count("\n") == 31103 and 4_000_000 < len(text) < 4_300_000
    json.dumps(text[:10])  # plain str
