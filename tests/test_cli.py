"""A user's mistake at the command line: exit code 2, one line naming the problem, no traceback,
no files left behind, and no waiting (each case is timed)."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from frost.cli import main as cli

R = ["train", "resnet20", "--workers", "0"]
G = ["train", "gpt"]

CASES = [  # (argv, what the message must say); "OUT" is replaced by a fresh run directory
    (R + ["--limit", "100", "--out", "OUT"], "only 100 examples (--limit 100)"),
    (G + ["--limit", "10000", "--max-steps", "3", "--out", "OUT"], "only 16 examples"),
    (G + ["--limit", "3000", "--out", "OUT"], "too little text"),
    (R + ["--epochs", "0"], "--epochs 0: must be a whole number >= 1"),
    (R + ["--epochs", "-1"], "--epochs -1: must be a whole number >= 1"),
    (R + ["--max-steps", "0"], "--max-steps 0: must be a whole number >= 1"),
    # the run's length (issue 46): one option sets it, and the schedule fits in it
    (G + ["--max-steps", "3", "--tokens", "1000"], "--max-steps 3 and --tokens 1000: each sets"),
    (R + ["--epochs", "2", "--max-steps", "3"], "--epochs 2 and --max-steps 3: each sets the run"),
    (R + ["--tokens", "1000"], "--tokens: not an option of `frost train resnet20`"),
    (G + ["--tokens", "0"], "--tokens 0: must be a whole number >= 1"),
    (G + ["--warmup", "2.5"], "--warmup 2.5: must be a whole number of steps, or a fraction"),
    (G + ["--warmup", "-0.1"], "--warmup -0.1: must be a whole number of steps, or a fraction"),
    (G + ["--min-lr", "-1"], "--min-lr -1.0: must be >= 0"),
    (
        G + ["--limit", "60000", "--max-steps", "5", "--warmup", "10", "--out", "OUT"],
        "--warmup 10: longer than the run's 5 steps",
    ),
    (G + ["--grad-accum", "0"], "--grad-accum 0: must be a whole number >= 1"),
    (
        G + ["--limit", "10000", "--grad-accum", "4", "--batch-size", "8", "--out", "OUT"],
        "--batch-size 8 x --grad-accum 4: the training data has only 16 examples",
    ),
    (G + ["--eval-every", "0"], "--eval-every 0: must be a whole number >= 1"),
    (G + ["--eval-batches", "most"], "--eval-batches 'most': must be a whole number >= 1, or all"),
    (R + ["--clip", "0"], "--clip 0.0: must be > 0"),
    (R + ["--limit", "0"], "--limit 0: must be a whole number >= 1"),
    (R + ["--limit", "-59000"], "--limit -59000: must be a whole number >= 1"),
    (R + ["--lr", "-1"], "--lr -1.0: must be > 0"),
    (R + ["--lr", "nan"], "--lr nan: must be > 0"),
    (R + ["--lr", "inf"], "--lr inf: must be > 0"),
    (R + ["--weight-decay", "-0.1"], "--weight-decay -0.1: must be >= 0"),
    (R + ["--seed", "-1"], "--seed -1: must be a whole number >= 0"),
    (R + ["--batch-size", "0"], "--batch-size 0: must be a whole number >= 1"),
    (R + ["--max-skips", "0"], "--max-skips 0: must be a whole number >= 1"),
    (R + ["--strategy", "tp"], "--strategy tp: needs --mesh"),
    (R + ["--strategy", "tp", "--mesh", "data=1,model=1"], "tensor parallelism splits a GPT"),
    (G + ["--strategy", "tp", "--mesh", "data=1"], "has no model axis"),
    (R + ["--strategy", "fsdp"], "--strategy fsdp: needs --mesh"),
    (R + ["--mesh", "data"], "--mesh 'data': expected AXIS=SIZE"),
    (R + ["--mesh", "rows=2"], "the axes are data and model"),
    (R + ["--optimizer", "nope"], "--optimizer 'nope': choose one of sgd, adam, adamw"),
    (R + ["--optimizer", "no_such_module_here:make", "--lr", "0.1"], "cannot import it"),
    (G + ["--optimizer", "sgd"], "--optimizer sgd: give --lr too"),
    (G + ["--vocab-size", "200"], "--vocab-size 200: must be a whole number >= 257"),
    (G + ["--heads", "5"], "--heads 5: must divide --dim 192"),
    (R + ["--vocab-size", "300"], "--vocab-size: not an option of `frost train resnet20`"),
    (R + ["--data", "NOWHERE"], "not a known data set"),
    # a missing data set, an empty or corrupt image folder: one line, nothing left in --out
    (["FROST_DATA=EMPTY"] + R + ["--data", "cifar10", "--out", "OUT"], "CIFAR-10 not found"),
    (["FROST_DATA=EMPTY"] + R + ["--data", "fashion-mnist", "--out", "OUT"], "apt-get install"),
    (R + ["--data", "NOIMAGES", "--out", "OUT"], "no .jpg/.jpeg/.png files in sub-folders"),
    (R + ["--data", "BADIMAGE", "--batch-size", "2", "--out", "OUT"], "cannot read image"),
    # malformed Hugging Face folders, refused as they are read
    (["sample", "--hf", "HF_LIST"], "config.json: holds a JSON list, not an object"),
    (["sample", "--hf", "HF_STR"], "n_embd '32': must be a whole number >= 1"),
    (["sample", "--hf", "HF_HEADS"], "n_head 3 must divide n_embd 32"),
    (["sample", "--hf", "HF_EPS"], "layer_norm_epsilon -1: must be > 0"),
    (["sample", "--hf", "HF_INDEX"], "model.safetensors.index.json: cannot read it as JSON"),
    (["sample", "--hf", "HF_MAP"], "weight_map ['a.safetensors']: must map each weight's name"),
    (["sample", "--hf", "NOWHERE"], "config.json: cannot read it as JSON"),
    # frost rl: steps that an iteration does not divide, observations PPO cannot take, eval of a
    # checkpoint that no `frost rl` wrote, plot of a run with nothing logged
    (["rl", "ppo", "--steps", "1", "--out", "OUT"], "--steps 1: must be a multiple of 512"),
    (["rl", "dqn", "--steps", "100", "--out", "OUT"], "must be a multiple of 8 (dqn on cartpole"),
    (["rl", "ppo", "--env", "gym:Blackjack-v1", "--out", "OUT"], "needs array observations"),
    (["rl", "eval", "NOTRL"], "not a `frost rl` checkpoint"),
    (["rl", "eval", "NOWHERE"], "no checkpoint/ here"),
    (["rl", "ppo", "--env", "gym:FrozenLake-v1", "--out", "OUT"], "not Discrete(16)"),
    (["plot", "EMPTYRUN"], "no loss records to plot yet"),
    (G + ["--data", "NOWHERE"], "neither kjv nor a text file"),
    (G + ["--data", "BINARY", "--out", "OUT"], "not UTF-8 text"),
    (R + ["--out", "STALE"], "already holds files from another run"),
    (R + ["--out", "OUT", "--resume"], "holds no run (no config.json)"),
    (["sample", "NOWHERE", "--prompt", ""], "--prompt '': must not be empty"),
    (["sample", "NOWHERE", "--top-k", "0"], "--top-k 0: must be a whole number >= 1"),
    (["sample", "NOWHERE", "--tokens", "0"], "--tokens 0: must be a whole number >= 1"),
    (["sample", "NOWHERE", "--temperature", "-1"], "--temperature -1.0: must be >= 0"),
    (["sample", "NOWHERE"], "not a `frost train gpt` run directory"),
    (["plot", "NOWHERE"], "metrics.jsonl not found"),
]

# corpora, the token cache, tokenizer files and empty values (issue 48): each class in several
# variants; "CACHE" is a --token-cache that must not exist afterwards (no folder, no lock file)
C = G + ["--token-cache", "CACHE", "--out", "OUT"]
T = ["tokenizer", "train", "TEXT", "--vocab-size", "300"]
CASES += [
    # a document without text: one rule for every source, refused naming the file, row or line,
    # and the column or key
    (C + ["--data", "NULL_PARQUET"], "null.parquet row 3: --text-column 'text' is null"),
    (C + ["--data", "NULL_DATASET"], ".arrow row 3: --text-column 'text' is null"),
    (C + ["--data", "NULL_JSONL"], "null.jsonl line 4: --text-key 'text' is null"),
    (C + ["--data", "NUMBER_JSONL"], "number.jsonl line 2: --text-key 'text' is 7, not a string"),
    (C + ["--data", "NOKEY_JSONL"], "nokey.jsonl line 2: no text under --text-key 'text'"),
    # an empty value never means the default
    (["audit", "--sizes", ""], "--sizes '': must not be empty"),
    (["audit", "--optimizers", ""], "--optimizers '': must not be empty"),
    (["audit", "--out", ""], "--out '': must not be empty"),
    (["rl", "ppo", "--out", ""], "--out '': must not be empty"),
    (R + ["--out", ""], "--out '': must not be empty"),
    (G + ["--tokenizer", ""], "--tokenizer '': must not be empty"),
    (G + ["--token-cache", ""], "--token-cache '': must not be empty"),
    (G + ["--text-column", ""], "--text-column '': must not be empty"),
    (T + ["-o", "OUT", "--special", "A", "--special", ""], "--special '': must not be empty"),
    (T + ["-o", "OUT", "--hf", ""], "--hf '': must not be empty"),
    # corpus files that are not what they claim: the file, the column, what was expected
    (C + ["--data", "INT_PARQUET"], "ints.parquet: --text-column 'text' holds int64, not strings"),
    (C + ["--data", "BYTES_PARQUET"], "bytes.parquet: --text-column 'text' holds binary"),
    (C + ["--data", "CORRUPT_PARQUET"], "corrupt.parquet: not a parquet file (Parquet magic"),
    (C + ["--data", "CUT_PARQUET"], "cut.parquet: not a parquet file"),
    (C + ["--data", "SHARDLESS_DATASET"], "data-00001-of-00003.arrow: not found, though"),
    (C + ["--data", "CORRUPT_DATASET"], "data-00000-of-00001.arrow: not an Arrow stream file"),
    (C + ["--data", "BAD_JSONL"], "bad.jsonl line 2: not JSON"),
    (C + ["--data", "BINARY_JSONL"], "binary.jsonl line 2: not UTF-8 text (byte 0 is"),
    # where a command writes: checked once at start-up, by one check, for every such option
    (G + ["--token-cache", "A_FILE"], "a_file': is a file, not a folder"),
    (G + ["--token-cache", "UNDER_FILE"], "a_file is a file, not a folder"),
    (G + ["--token-cache", "/proc/frost/tokens"], "cannot write in /proc"),
    (R + ["--out", "A_FILE"], "a_file': is a file, not a folder"),
    (R + ["--out", "UNDER_FILE"], "a_file is a file, not a folder"),
    (["rl", "muzero", "--out", "A_FILE"], "a_file': is a file, not a folder"),
    (["rl", "ppo", "--out", "UNDER_FILE"], "a_file is a file, not a folder"),
    (T + ["-o", "UNDER_FILE"], "a_file is a file, not a folder"),
    (T + ["-o", "OUT", "--hf", "/proc/frost/tok.json"], "there is no folder /proc/frost"),
    (T + ["-o", "NO_FOLDER"], "nowhere/tok.json': there is no folder"),
    (["plot", "NOWHERE", "-o", "UNDER_FILE"], "a_file is a file, not a folder"),
    (["audit", "--out", "A_FILE"], "a_file': is a file, not a folder"),
    (["audit", "--out", "UNDER_FILE"], "a_file is a file, not a folder"),
    # frost audit: one claim per optimizer; a size that cannot fit, refused by arithmetic at once
    (["audit", "--claim", "lion=2", "--claim", "lion=0.5"], "lion is claimed already (--claim l"),
    (["audit", "--claim", "muon=2", "--claim", "muon=2"], "muon is claimed already (--claim m"),
    (["audit", "--workload", "gpt", "--sizes", "8192x96", "--plan"], "a run needs at least 1.15e"),
    (["audit", "--workload", "gpt", "--sizes", "64x2,8192x96", "--out", "OUT"], "by arithmetic"),
    # GPT-2 tokenizer folders: the file at fault, and both layouts
    (C + ["--data", "TEXT_JSONL", "--tokenizer", "GPT2_NO_BPE"], "vocab.bpe: not found (a GPT"),
    (C + ["--data", "TEXT_JSONL", "--tokenizer", "GPT2_NO_MERGES"], "merges.txt: not found"),
    (C + ["--data", "TEXT_JSONL", "--tokenizer", "GPT2_CUT"], "encoder.json: not valid JSON"),
    (C + ["--data", "TEXT_JSONL", "--tokenizer", "GPT2_LIST"], "vocab.json: not a GPT-2 vocab"),
]
BOTH_LAYOUTS = "encoder.json + vocab.bpe, or vocab.json + merges.txt"


def _corpus_files(tmp_path, wanted) -> dict:
    """The corpora and tokenizer folders of the cases that need them (only those `wanted` names):
    a document without text in each format, files that are not what they claim, GPT-2 folders
    missing a file or holding a broken one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = ["In the beginning was the word. " * 20 + str(i) for i in range(30)]
    holed = docs[:3] + [None] + docs[3:]
    built = {}

    def jsonl(name, lines):
        (tmp_path / name).write_text("".join(line + "\n" for line in lines))
        return tmp_path / name

    def parquet(name, texts):
        pq.write_table(pa.table({"text": texts}), tmp_path / name)
        return tmp_path / name

    def dataset(name, texts, shards):
        import datasets

        datasets.disable_progress_bars()
        datasets.Dataset.from_dict({"text": texts}).save_to_disk(tmp_path / name, num_shards=shards)
        return tmp_path / name

    good = [json.dumps({"text": d}) for d in docs]
    makers = {  # name -> a function that writes it and returns its path
        "NULL_PARQUET": lambda: parquet("null.parquet", holed),
        "NULL_DATASET": lambda: dataset("null_ds", holed, 1),
        "NULL_JSONL": lambda: jsonl("null.jsonl", good[:3] + ['{"text": null}']),
        "NUMBER_JSONL": lambda: jsonl("number.jsonl", good[:1] + ['{"text": 7}']),
        "NOKEY_JSONL": lambda: jsonl("nokey.jsonl", good[:1] + ['{"body": "x"}']),
        "TEXT_JSONL": lambda: jsonl("text.jsonl", good),
        "BAD_JSONL": lambda: jsonl("bad.jsonl", good[:1] + ['{"text": "cut']),
        "INT_PARQUET": lambda: parquet("ints.parquet", [1, 2]),
        "BYTES_PARQUET": lambda: parquet("bytes.parquet", [b"a", b"b"]),
        "CUT_PARQUET": lambda: parquet("cut.parquet", docs),  # cut in half below
        "SHARDLESS_DATASET": lambda: dataset("shardless", docs, 3),  # loses a shard below
        "CORRUPT_DATASET": lambda: dataset("corrupt_ds", docs, 1),  # its shard overwritten below
    }
    for name in set(makers) & set(wanted):
        built[name] = makers[name]()
    if "CORRUPT_PARQUET" in wanted:
        (tmp_path / "corrupt.parquet").write_bytes(b"PAR1 not really")
        built["CORRUPT_PARQUET"] = tmp_path / "corrupt.parquet"
    if "BINARY_JSONL" in wanted:
        (tmp_path / "binary.jsonl").write_bytes(good[0].encode() + b"\n\xff\xfe\n")
        built["BINARY_JSONL"] = tmp_path / "binary.jsonl"
    if "CUT_PARQUET" in wanted:  # the first half of a real file
        whole = built["CUT_PARQUET"].read_bytes()
        built["CUT_PARQUET"].write_bytes(whole[: len(whole) // 2])
    if "SHARDLESS_DATASET" in wanted:
        (built["SHARDLESS_DATASET"] / "data-00001-of-00003.arrow").unlink()
    if "CORRUPT_DATASET" in wanted:
        (built["CORRUPT_DATASET"] / "data-00000-of-00001.arrow").write_bytes(b"not arrow" * 9)
    gpt2 = {  # folder -> {file: text}
        "GPT2_NO_BPE": {"encoder.json": '{"a": 0}'},
        "GPT2_NO_MERGES": {"vocab.json": '{"a": 0}'},
        "GPT2_CUT": {"encoder.json": '{"a": 0, "b"', "vocab.bpe": "#version: 0.2\n"},
        "GPT2_LIST": {"vocab.json": '["a", "b"]', "merges.txt": "#version: 0.2\n"},
    }
    for name in set(gpt2) & set(wanted):
        (tmp_path / name).mkdir()
        for file, content in gpt2[name].items():
            (tmp_path / name / file).write_text(content)
        built[name] = tmp_path / name
    return built


def _mistaken_files(tmp_path, wanted) -> dict:
    """The files of the cases that need them (only those `wanted` names), built small: image
    folders with nothing in train/ or a corrupt PNG, malformed Hugging Face folders, a checkpoint
    that `frost train` would write, a run with nothing logged."""
    built = {}
    if "NOIMAGES" in wanted:
        (tmp_path / "noimages" / "train" / "cat").mkdir(parents=True)
        built["NOIMAGES"] = tmp_path / "noimages"
    if "BADIMAGE" in wanted:
        from PIL import Image

        for label in ("a", "b"):
            (tmp_path / "images" / "train" / label).mkdir(parents=True)
            pixels = np.random.default_rng(0).integers(0, 255, (8, 8, 3), np.uint8)
            Image.fromarray(pixels).save(tmp_path / "images" / "train" / label / "1.png")
        (tmp_path / "images" / "train" / "a" / "0bad.png").write_bytes(b"\x89PNG\r\n\x1a\n cut")
        built["BADIMAGE"] = tmp_path / "images"
    good = {"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 300}
    configs = {
        "HF_LIST": [good],
        "HF_STR": {**good, "n_embd": "32"},
        "HF_HEADS": {**good, "n_head": 3},
        "HF_EPS": {**good, "layer_norm_epsilon": -1},
        "HF_INDEX": good,
        "HF_MAP": good,
    }
    for name in set(configs) & set(wanted):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(configs[name]))
        built[name] = tmp_path / name
    index = "model.safetensors.index.json"
    if "HF_INDEX" in wanted:
        (tmp_path / "HF_INDEX" / index).write_text('{"weight_map": {"a": ')
    if "HF_MAP" in wanted:
        (tmp_path / "HF_MAP" / index).write_text(json.dumps({"weight_map": ["a.safetensors"]}))
    if "NOTRL" in wanted:
        from frost import checkpoint

        meta = {"config": {"model": "resnet20"}}
        checkpoint.save(tmp_path / "notrl" / "checkpoint", 1, {"w": np.ones(2)}, meta)
        built["NOTRL"] = tmp_path / "notrl"
    if "EMPTYRUN" in wanted:
        (tmp_path / "emptyrun").mkdir()
        (tmp_path / "emptyrun" / "metrics.jsonl").write_text("")
        built["EMPTYRUN"] = tmp_path / "emptyrun"
    return built


@pytest.mark.parametrize(
    "argv, message", CASES, ids=[" ".join(a[:1] + a[2:])[:60] for a, _ in CASES]
)
def test_a_mistake_is_one_line_with_exit_code_2(argv, message, tmp_path, capsys, monkeypatch):
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / "train.bin").write_bytes(b"\0" * 64)
    (tmp_path / "a_file").write_text("a file where a folder should be")
    (tmp_path / "text.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 20)
    names = {
        "OUT": tmp_path / "out",
        "NOWHERE": tmp_path / "nowhere",
        "NO_FOLDER": tmp_path / "nowhere" / "tok.json",
        "BINARY": tmp_path / "binary.txt",
        "STALE": tmp_path / "stale",
        "EMPTY": tmp_path / "empty",
        "CACHE": tmp_path / "cache",
        "A_FILE": tmp_path / "a_file",
        "UNDER_FILE": tmp_path / "a_file" / "sub",
        "TEXT": tmp_path / "text.txt",
    }
    wanted = [a for a in argv if a.isupper()]
    names.update(_mistaken_files(tmp_path, wanted))
    names.update(_corpus_files(tmp_path, wanted))
    for setting in [a for a in argv if a.startswith("FROST_DATA=")]:
        monkeypatch.setenv("FROST_DATA", str(names[setting.split("=")[1]]))
        argv = argv[1:]
    start = time.perf_counter()
    assert cli([str(names.get(a, a)) for a in argv]) == 2
    assert time.perf_counter() - start < 60
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("frost: error: ") and message in err[-1], err
    assert not any("Traceback" in line for line in err)
    assert "BADIMAGE" not in argv or "train/a/0bad.png" in err[-1]  # names the file
    if "--tokenizer" in argv and "GPT2" in argv[argv.index("--tokenizer") + 1]:
        assert BOTH_LAYOUTS in err[-1]  # the file at fault, and both accepted layouts
    # nothing half-written: a failed set-up leaves no run directory, no token cache, no lock file
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "cache").exists()
    assert sorted(p.name for p in (tmp_path / "stale").iterdir()) == ["train.bin"]
    assert (tmp_path / "a_file").read_text() == "a file where a folder should be"
    assert not list(tmp_path.glob("**/*.lock")) and not list(tmp_path.glob("**/.frost-check-*"))


def test_the_process_prints_one_line_and_debug_shows_the_traceback():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    cmd = [sys.executable, "-m", "frost.cli", "train", "resnet20", "--lr", "-1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert (
        out.returncode == 2
        and out.stderr == "frost: error: --lr -1.0: must be > 0\n"
        and out.stdout == ""
    )
    out = subprocess.run(cmd + ["--debug"], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 1 and "Traceback" in out.stderr and "UsageError" in out.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's tunables: Linux only")
@pytest.mark.parametrize("opt_out", ["", "1"])
def test_the_program_reexecutes_once_with_huge_pages(opt_out):
    code = (
        "import os; from frost.cli import huge_pages; huge_pages(); "
        "print(os.environ.get('GLIBC_TUNABLES'), flush=True)"
    )
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"} | {
        "FROST_NO_HUGE_PAGES": opt_out
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    ).stdout
    assert out == ("None\n" if opt_out else "glibc.malloc.hugetlb=1\n")


def test_commands_that_never_compile_never_import_jax(tmp_path):
    """`frost --help` and `frost tokenizer train` run without importing jax (about a second of
    start-up here)."""
    (tmp_path / "a.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 50)
    script = (
        "import sys, contextlib, io\n"
        "from frost.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(sys.argv[1:])\n"
        "print('jax' in sys.modules)\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}

    def imports_jax(*argv):
        cmd = [sys.executable, "-c", script, *argv]
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().splitlines()[-1] == "True"

    assert not imports_jax()  # frost with no command prints its help
    tokenizer = ["tokenizer", "train", "a.txt", "--vocab-size", "300", "-o", "tok.json"]
    assert not imports_jax(*tokenizer, "--workers", "2")
    assert (tmp_path / "tok.json").exists()


def test_convolutions_on_a_cpu_are_compiled_by_xla_unless_xla_flags_says_otherwise(monkeypatch):
    """`frost` turns YNNPACK's individual convolutions off (XLA's own are 1.5-2.9x faster on a
    CPU here); XLA_FLAGS that already name the option, or other flags, are kept."""
    from frost.cli import CPU_CONVOLUTIONS, cpu_convolutions

    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
    cpu_convolutions()
    assert os.environ["XLA_FLAGS"] == f"--xla_backend_optimization_level=0 {CPU_CONVOLUTIONS}"
    mine = "--xla_cpu_experimental_ynn_fusion_type=individual_convolution"
    monkeypatch.setenv("XLA_FLAGS", mine)
    cpu_convolutions()
    assert os.environ["XLA_FLAGS"] == mine
