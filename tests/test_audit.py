"""`frost audit`: the protocol's pieces against hand-computed cases, the vmapped engine against the
same runs one at a time, divergence on runs made to diverge, resume after a kill, a user optimizer
from an import path (optax's), and a small `--quick` end to end through the CLI."""

import json
import math
import os
import pathlib
import random
import re
import shutil
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
import scipy.stats

from frost.audit import engine, protocol, report, run, workloads
from frost.audit.cli import AuditConfig
from frost.cli import main as cli
from frost.optim import registry

SMALL = ["--workload", "image", "--quick", "--budget", "20"]  # the smallest end-to-end audit
WL = workloads.WORKLOADS["image-s"]


@pytest.fixture(scope="module")
def data():
    return workloads.load("image", None, pathlib.Path("."), progress=False)


# --- protocol, by hand ---------------------------------------------------------------------


def test_confidence_interval_is_student_t():
    mean, half = protocol.mean_ci([1.0, 2.0, 3.0])  # s = 1, t(0.975, 2 dof) = 4.302653
    assert mean == 2.0 and half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    mean, half = protocol.mean_ci([4.0, 6.0])  # s = sqrt(2), t(0.975, 1) = 12.706205
    assert mean == 5.0 and half == pytest.approx(12.706205 * math.sqrt(2) / math.sqrt(2), rel=1e-6)
    assert math.isnan(protocol.mean_ci([3.0])[1])


def test_speedup_interpolates_in_log_steps():
    steps, losses = [100, 200, 400], [3.0, 2.5, 2.0]
    assert protocol.steps_to_reach(steps, losses, 2.25) == (
        pytest.approx(math.sqrt(200 * 400)),
        "=",
    )
    assert protocol.steps_to_reach(steps, losses, 2.5) == (pytest.approx(200), "=")
    assert protocol.steps_to_reach(steps, losses, 3.5) == (
        100,
        "<",
    )  # worse than AdamW's shortest budget
    assert protocol.steps_to_reach(steps, losses, 1.5) == (400, ">")  # better than its longest
    # a longer budget that came out worse counts as the shorter one's loss (running minimum): [3, 2,
    # 2]
    assert protocol.steps_to_reach(steps, [3.0, 2.0, 2.5], 2.2) == (
        pytest.approx(100 * 2**0.8),
        "=",
    )
    assert protocol.steps_to_reach([400, 100, 200], [2.0, 3.0, 2.5], 2.25)[0] == pytest.approx(
        282.8427, rel=1e-6
    )


def _run(lr, loss, diverged=False):
    return {
        "hyperparams": {"learning_rate": lr},
        "final_loss": None if diverged else loss,
        "diverged": diverged,
    }


def test_stable_fraction_lr_range_and_best():
    runs = [
        _run(1e-3, 1.00),
        _run(2e-3, 0.99),
        _run(2e-3, 1.20),
        _run(4e-3, 1.005),
        _run(8e-3, 1.2),
        _run(1.6e-2, None, True),
    ]
    assert protocol.stable_fraction(runs) == 5 / 6
    assert protocol.lr_range(runs) == pytest.approx(4.0)  # 1e-3 .. 4e-3 are within 0.02 of 0.99
    assert protocol.lr_range(runs[1:2]) == 1.0
    assert math.isnan(protocol.lr_range(runs[-1:]))
    assert protocol.best_trial(runs) is runs[1] and protocol.best_trial(runs[-1:]) is None


def test_equal_tuning_budget():
    import optax

    builtin = {n: protocol.grid(n, None, 1e-3) for n in protocol.GRIDS}
    user = protocol.grid("optax:adamw", optax.adamw, 1e-3)
    no_decay = protocol.grid("optax:adam", optax.adam, 1e-3)
    assert {len(g) for g in builtin.values()} == {len(user), len(no_decay)} == {24}
    lrs = sorted({t["learning_rate"] for t in builtin["adamw"]})
    # log-spaced, x2 apart
    assert len(lrs) == 6 and np.allclose(np.diff(np.log2(lrs)), 1, atol=0.01)
    assert (
        len({t["learning_rate"] for t in user}) == 12
        and len({t["learning_rate"] for t in no_decay}) == 24
    )
    assert len(protocol.grid("lion", None, 1e-3, quick=True)) == 6
    assert {"weight_decay", "gamma"} <= set(builtin["sophia"][0]) and "momentum" in builtin["muon"][
        0
    ]


# --- the engine ----------------------------------------------------------------------------


def _compare(data, name, runs):
    (group,) = engine.groups(WL, data, name, runs)
    together = engine.run_group(WL, data, name, group)
    alone = engine.run_group(WL, data, name, group, max_runs=1)
    for a, b in zip(together, alone):
        assert a["final_loss"] == pytest.approx(b["final_loss"], rel=1e-5)
        assert np.allclose([v for _, v in a["curve"]], [v for _, v in b["curve"]], rtol=1e-5)
    return together


@pytest.mark.parametrize(
    "name, hyperparams",
    [
        (
            "adamw",
            [
                {"learning_rate": 3e-3, "weight_decay": 0.1, "b2": 0.95},
                {"learning_rate": 1e-2, "weight_decay": 0.0, "b2": 0.999},
            ],
        ),
        (
            "sophia",
            [
                {"learning_rate": 1e-3, "weight_decay": 0.1, "gamma": 0.01},
                {"learning_rate": 3e-3, "weight_decay": 0.0, "gamma": 0.01},
            ],
        ),
    ],
)
def test_vmapped_runs_equal_the_same_runs_one_at_a_time(data, name, hyperparams, monkeypatch):
    runs = [
        engine.Run(hyperparams[0], 0, 30),
        engine.Run(hyperparams[1], 0, 30),
        engine.Run(hyperparams[0], 1, 30),
    ]
    results = _compare(data, name, runs)
    # with memory for one run, not three, the group falls back to one at a time: the same numbers
    sizes, one, three = (
        [],
        *(engine.footprint(WL, data, name, hyperparams[0], k) * k for k in (1, 3)),
    )
    monkeypatch.setattr(engine, "memory", lambda: one + three)  # half: between the two
    monkeypatch.setattr(
        engine, "_init", lambda *a, _init=engine._init: sizes.append(len(a[4])) or _init(*a)
    )
    fallback = engine.run_group(WL, data, name, engine.groups(WL, data, name, runs)[0])
    assert sizes == [3, 1, 1, 1] and [r["final_loss"] for r in fallback] == pytest.approx(
        [r["final_loss"] for r in results], rel=1e-5
    )
    assert not any(r["diverged"] for r in results)
    assert results[0]["final_loss"] != results[2]["final_loss"]  # another seed is another run
    assert results[0]["final_loss"] < math.log(10)  # it learned


def test_a_run_made_to_diverge_is_counted_with_its_step(data, tmp_path, monkeypatch):
    (tmp_path / "nan_at_five.py").write_text(
        "import jax, jax.numpy as jnp, optax\n"
        "def make(learning_rate, weight_decay=0.0):\n"
        "    def update(g, count, params=None):  # NaN updates from step 5 on\n"
        "        return jax.tree.map(lambda x: jnp.where(count >= 5, jnp.nan, -1e-3 * x), g), "
        "count + 1\n    return optax.GradientTransformation(lambda p: jnp.zeros([], jnp.int32), "
        "update)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    runs = [engine.Run({"learning_rate": 1.0, "weight_decay": 0.0}, 0, 20)]
    (result,) = engine.run_group(
        WL, data, "nan_at_five:make", engine.groups(WL, data, "nan_at_five:make", runs)[0]
    )
    assert result["diverged"] and result["diverged_step"] == 5 and result["final_loss"] is None
    # AdamW at a learning rate far too large: its loss leaves 1.5 ln(10) behind, or turns non-finite
    hp = {"learning_rate": 30.0, "weight_decay": 0.0, "b2": 0.95}
    (high,) = engine.run_group(WL, data, "adamw", engine.Group([engine.Run(hp, 0, 30)], {}))
    assert high["diverged"] and 0 < high["diverged_step"] < 30 and high["final_loss"] is None


# --- end to end ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    out = tmp_path_factory.mktemp("audit")
    # optax mixes Python floats and int32 counts (refused under strict)
    with jax.numpy_dtype_promotion("standard"):
        argv = [
            "audit",
            *SMALL,
            "--optimizers",
            "adamw,lion",
            "--optimizer",
            "optax:adamw",
            "--out",
            str(out),
        ]
        assert cli(argv) == 0
    return out


def test_quick_end_to_end_writes_the_report(audited):
    runs = json.loads((audited / "results.json").read_text())["runs"]
    assert all(
        list(r)
        == [
            "workload",
            "optimizer",
            "hyperparams",
            "seed",
            "steps",
            "final_loss",
            "diverged",
            "diverged_step",
            "seconds",
        ]
        for r in runs
    )
    assert {r["optimizer"] for r in runs} == {"adamw", "lion", "optax:adamw"}
    tuning = [r for r in runs if r["seed"] == 0]
    assert len(tuning) == 18 and {r["steps"] for r in runs} == {
        10,
        20,
        40,
    }  # 6 trials each; AdamW's budgets
    assert len(list((audited / "runs").glob("*.json"))) == len(runs)
    report = (audited / "report.md").read_text()
    for text in (
        "## Protocol",
        "## image-s",
        "| optimizer | best hyper-parameters |",
        "paper baseline",
        "optax:adamw",
        "step speedup",
        "wall-clock speedup",
        "scale.png",
        "curves.png",
        "lr.png",
    ):
        assert text in report
    for png in ("scale.png", "curves.png", "lr.png"):
        assert (audited / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    made = json.loads((audited / "results.json").read_text())["provenance"]
    assert (made["jax"], made["devices"], made["protocol"]) == (
        jax.__version__,
        "1 x cpu",
        protocol.VERSION,
    )
    cpu = pathlib.Path("/proc/cpuinfo").read_text()
    assert made["host"].split(", flags ")[0] in cpu and len(made["data"].split(":")[1]) == 16
    assert "## Provenance" in report and f"commit: `{made['commit']}`" in report


def test_a_restarted_audit_skips_finished_runs_and_reproduces_the_report(
    audited, tmp_path, monkeypatch
):
    out = tmp_path / "killed"
    argv = [
        sys.executable,
        "-m",
        "frost.cli",
        "audit",
        *SMALL,
        "--optimizers",
        "adamw",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    deadline = time.monotonic() + 120
    while (
        not list((out / "runs").glob("*.json"))
        and proc.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    before = {p.name: p.read_bytes() for p in (out / "runs").glob("*.json")}
    assert 0 < len(before) < 18, "the audit was not stopped part-way"
    trained = []
    monkeypatch.setattr(
        engine,
        "run_group",
        lambda *a, _run=engine.run_group, **k: trained.append(a[3]) or _run(*a, **k),
    )
    report = run.audit(
        AuditConfig(workload="image", quick=True, budget=20, optimizers="adamw", out=str(out)),
        progress=False,
    )
    # at most one batch of 3 was cut short
    assert sum(len(g.runs) for g in trained) <= 18 - len(before) + 2
    assert all((out / "runs" / name).read_bytes() == data for name, data in before.items())
    first = report.read_text()
    trained.clear()
    assert (
        run.audit(
            AuditConfig(workload="image", quick=True, budget=20, optimizers="adamw", out=str(out)),
            progress=False,
        ).read_text()
        == first
        and not trained
    )  # all on disk: nothing trained

    assert adamw_losses(out) == adamw_losses(audited)  # the uninterrupted audit's numbers


BROKEN = {  # a run file's bytes -> what is wrong with them
    "garbage": lambda text: "{garbage",
    "cut": lambda text: text[: len(text) // 2],
    "not UTF-8": lambda text: "\udcff",  # (written with surrogateescape: the byte 0xff)
    "a list": lambda text: "[1, 2]",
    "a key missing": lambda text: json.dumps(
        {k: v for k, v in json.loads(text).items() if k != "final_loss"}
    ),
    "a wrong type": lambda text: json.dumps({**json.loads(text), "final_loss": "low"}),
    "another run's": lambda text: json.dumps({**json.loads(text), "seed": 7}),
}


def test_a_broken_run_file_is_named_and_its_run_trained_again(
    audited, tmp_path, capsys, monkeypatch
):
    """A restarted audit whose run files include broken ones (not JSON, cut short, not UTF-8, a
    JSON list, a field missing or of the wrong type, another run's record): each is named in a
    line on stderr and its batch trained again; every other run file is kept byte for byte, and
    the results are the finished audit's (but the seconds). A run file that cannot be read (a
    folder in its place) is refused in one line."""
    out = tmp_path / "broken"
    shutil.copytree(audited, out)
    files = sorted((out / "runs").glob("*.json"))
    before = {p: p.read_bytes() for p in files}
    broken = dict(zip(files[::4], BROKEN.values()))  # 7 files, of several batches
    for path, breaks in broken.items():
        path.write_text(breaks(path.read_text()), errors="surrogateescape")
    trained = []
    monkeypatch.setattr(
        engine,
        "run_group",
        lambda *a, _run=engine.run_group, **k: trained.append(a[3]) or _run(*a, **k),
    )
    argv = [*SMALL, "--optimizers", "adamw,lion", "--optimizer", "optax:adamw", "--out", str(out)]
    with jax.numpy_dtype_promotion("standard"):  # optax:adamw, as in `audited`
        assert cli(["audit", *argv]) == 0
    err = capsys.readouterr().err.replace("\r", "\n").splitlines()
    for path in broken:
        (line,) = [line for line in err if line.startswith(f"{path}: ")]
        assert "not a run record: " in line and line.endswith("; training its run again")
    assert len(trained) <= len(broken) and sum(len(g.runs) for g in trained) <= 3 * len(broken)
    assert all(p.read_bytes() == data for p, data in before.items() if p not in broken)

    def without_seconds(folder):
        saved = json.loads((folder / "results.json").read_text())
        return [{k: v for k, v in r.items() if k != "seconds"} for r in saved["runs"]]

    assert without_seconds(out) == without_seconds(audited)
    for path in broken:  # a record again: the original one, but its seconds
        assert {**json.loads(path.read_text()), "seconds": 0} == {
            **json.loads(before[path]),
            "seconds": 0,
        }
    folder = files[1]  # a folder where a run file is: refused, and nothing trained
    folder.unlink()
    folder.mkdir()
    trained.clear()
    with jax.numpy_dtype_promotion("standard"):
        assert cli(["audit", *argv]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == f"frost: error: {folder}: cannot read it (Is a directory); remove it and rerun"
    assert not trained


def test_reproduce_checks_the_run_files_it_samples(audited, tmp_path, capsys):
    """`--reproduce` checks each sampled run's file as well as retraining the run: a file
    missing, broken, or disagreeing with results.json is named on the run's line, and the exit is
    1; the runs themselves still reproduce bit for bit."""
    out = tmp_path / "checked"
    shutil.copytree(audited, out)
    records = json.loads((out / "results.json").read_text())["runs"]
    keys = sorted(report.run_key(r) for r in records)
    sample = sorted(random.Random(0).sample(keys, 5))  # as --reproduce draws it, in its order
    files = {report.run_key(json.loads(p.read_text())): p for p in (out / "runs").glob("*.json")}
    paths = [files[key] for key in sample]
    paths[0].unlink()
    paths[1].write_text("{garbage")
    paths[2].write_text(BROKEN["a key missing"](paths[2].read_text()))
    paths[3].write_text(json.dumps({**json.loads(paths[3].read_text()), "diverged_step": 3}))
    with jax.numpy_dtype_promotion("standard"):  # optax:adamw, as in `audited`
        assert cli(["audit", "--reproduce", str(out)]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert sum(": matches bit for bit" in line for line in lines) == 5
    assert [line.split("; its run file ")[1] for line in lines if "; its run file " in line] == [
        f"{paths[0]}: missing",
        f"{paths[1]}: not a run record: not JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1))",
        f"{paths[2]}: not a run record: no 'final_loss'",
        f"{paths[3]}: disagrees with results.json (diverged_step 3 here, None there)",
    ]
    assert captured.err.splitlines()[-1] == (  # (after the progress bar)
        f"frost: error: --reproduce {out}: 4 of 5 run files are missing, not a run's record, or "
        "disagree with results.json"
    )


def adamw_losses(folder):
    return {
        (r["hyperparams"]["learning_rate"], r["seed"], r["steps"]): r["final_loss"]
        for r in json.loads((folder / "results.json").read_text())["runs"]
        if r["optimizer"] == "adamw"
    }


def test_two_processes_share_the_runs_and_process_0_writes_the_report(audited, tmp_path):
    """`--coordinator/--num-processes/--process-id` on loopback: each process trains every other
    batch into the shared --out, waits for the other's at the end of each step of the plan, and
    process 0 writes the report: the numbers of the one-process audit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "shared"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "frost.cli", "audit", *SMALL, "--optimizers", "adamw"]
            + ["--out", str(out), "--coordinator", f"127.0.0.1:{port}"]
            + ["--num-processes", "2", "--process-id", str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outputs]
    for i, (stdout, _) in enumerate(outputs):
        share = re.search(rf"process {i}: trained (\d+)% of the work", stdout)
        assert share and 20 <= int(share[1]) <= 80, stdout  # a share each, not all and not none
        assert f"report: {out / 'report.md'}" in stdout
    assert adamw_losses(out) == adamw_losses(audited)


MESH_JOB = """
import contextlib, io, json, pathlib, sys
import jax
from frost.audit import engine
from frost.cli import main
out = pathlib.Path(sys.argv[1])
argv = ["audit", "--workload", "image", "--quick", "--optimizers", "adamw"]
assert main([*argv, "--out", str(out / "one")]) == 0
assert main([*argv, "--mesh", "runs=8", "--out", str(out / "eight")]) == 0
with contextlib.redirect_stdout(io.StringIO()) as printed:  # the one-device audit on 8 devices
    assert main(["audit", "--reproduce", str(out / "one"), "--mesh", "runs=8"]) == 0
real = engine._need

def need(program):  # pretend only FSDP programs fit: a leaf split on an axis past the runs'
    specs = [s.spec for s in jax.tree.leaves(program.input_shardings[0]) if hasattr(s, "spec")]
    return real(program) if any("runs" in spec[1:] for spec in specs) else 2**50

engine._need = need
fsdp = [*argv, "--budget", "20", "--mesh", "runs=8", "--out", str(out / "fsdp")]
assert main(fsdp) == 0
shardings = [s for p in engine._programs.values() for s in jax.tree.leaves(p.input_shardings[0])]
sizes = sorted({len(s.device_set) for s in shardings})
devices = len({d for s in shardings if len(s.device_set) == 1 for d in s.device_set})
print(json.dumps({"sizes": sizes, "devices": devices, "reproduce": printed.getvalue()}))
"""


def test_runs_on_eight_devices_equal_the_one_device_runs_bit_for_bit(audited, tmp_path, capsys):
    """`--mesh runs=8` on 8 forced CPU devices: up to 8 batches of 3 runs train at once, each on
    its own device with the program one device compiles for it, so every final loss of a quick audit
    equals the one-device audit's bit for bit, the runs at the grid's largest learning rates
    (0.017, 0.034; 140 and 280 steps) included, where one program sharding the runs over the
    devices moved the final loss by up to 5.6e-3. `--reproduce` on the other device count finds
    every sampled run bit for bit. A run that does not fit on a device trains alone with FSDP
    (its leaves split over the 8): its final losses equal the one-device audit's within 1e-5."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"
    proc = subprocess.run(
        [sys.executable, "-c", MESH_JOB, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags.strip()},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = json.loads(proc.stdout.splitlines()[-1])
    # programs on one device each, a round's 3 batches (2 of the grid and the paper baseline; the
    # reruns and AdamW's 2 other budgets) side by side; FSDP's on 8 at once
    assert job["sizes"] == [1, 8] and job["devices"] == 3
    assert job["reproduce"].count(": matches bit for bit") == 5

    def losses(folder):
        runs = json.loads((tmp_path / folder / "results.json").read_text())["runs"]
        return {report.run_key(r): r["final_loss"] for r in runs}

    one = losses("one")
    eight = losses("eight")
    assert len(one) == 18 and one == eight
    edge = [k for k in one if json.loads(k)[2]["learning_rate"] > 0.015 and json.loads(k)[4] >= 140]
    assert len(edge) == 8  # lr 0.017 (140 steps: seeds 0-3; 280: seeds 1-3), 0.034 (seed 0)
    fsdp = adamw_losses(tmp_path / "fsdp")
    assert fsdp.keys() == adamw_losses(audited).keys()
    assert all(fsdp[k] == pytest.approx(adamw_losses(audited)[k], abs=1e-5) for k in fsdp)
    # the 8-device audit reproduced on this process's one device
    assert cli(["audit", "--reproduce", str(tmp_path / "eight")]) == 0
    out = capsys.readouterr().out
    assert out.count(": matches bit for bit") == 5 and "provenance devices: '8 x cpu'" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--optimizers", "adamw,nope"], "--optimizers 'adamw,nope': must be distinct names"),
        (["--optimizer", "lion"], "--optimizer 'lion': give MODULE:FUNCTION"),
        (["--optimizer", "no_such_module_here:make"], "cannot import it"),
        (["--budget", "25"], "--budget 25: must be a multiple of 10"),
        (["--budget", "10"], "--budget 10: must be a whole number >= 20"),
        (["--seeds", "2"], "--seeds 2: must be auto or a whole number >= 3"),
        (["--seeds", "some"], "--seeds 'some': must be auto or a whole number >= 3"),
        (["--max-seeds", "6"], "--max-seeds 6: caps --seeds auto; give --seeds auto"),
        (["--data", "x.txt"], "--data x.txt: say which workload"),
        (["--workload", "image", "--data", "NOWHERE"], "not a known data set"),
        (["--workload", "gpt", "--data", "SHORT"], "too little text"),
        (["--mesh", "runs=0"], "--mesh runs=0: give runs=N, N <= 1 (the devices seen)"),
        (["--mesh", "data=9"], "--mesh data=9: give runs=N"),
        (["--workload", "gpt", "--sizes", "48x2"], "--sizes 48x2: give WIDTHxDEPTH with a width"),
        (["--workload", "gpt", "--sizes", "64x2,big"], "--sizes big: give WIDTHxDEPTH"),
        (["--workload", "image", "--sizes", "64x2"], "--sizes 64x2: sets the GPTs; give"),
        (["--tokens-per-param", "20", "--budget", "20"], "--tokens-per-param: sets the steps"),
        (["--tokens-per-param", "0"], "--tokens-per-param"),
    ],
)
def test_a_mistake_is_one_line_and_leaves_no_files(argv, message, tmp_path, capsys):
    (tmp_path / "short.txt").write_text("too short\n")
    argv = [str(tmp_path / "short.txt") if a == "SHORT" else a for a in argv]
    assert cli(["audit", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_sizes_set_the_gpts_and_tokens_per_param_their_steps():
    """--sizes WxD (or a preset): heads of 64, smallest first; the steps give each run
    --tokens-per-param tokens per parameter (Chinchilla's 20 by default), counted here from the
    model the engine trains."""
    ladder = workloads.ladder("gpt", "128x4,gpt2-small,64x2")
    assert [(w.name, w.width, w.depth, w.heads) for w in ladder] == [
        ("gpt-64x2", 64, 2, 1),
        ("gpt-128x4", 128, 4, 2),
        ("gpt-768x12", 768, 12, 12),
    ]
    data = workloads.Data({}, workloads.VOCAB, "")
    model = ladder[0].model(data, jax.random.key(0))
    params = sum(x.size for x in jax.tree.leaves(model))
    tokens = ladder[0].batch * workloads.SEQ_LEN  # per step
    for ratio, cfg in ((20, {}), (5, {"tokens_per_param": 5})):
        a = run.Audit(AuditConfig(workload="gpt", sizes="64x2", **cfg))
        assert a.steps(ladder[0], data) == round(ratio * params / tokens / 10) * 10
    assert run.Audit(AuditConfig(workload="gpt")).steps(workloads.WORKLOADS["gpt-m"], data) == 300


def test_scale_words_read_the_slope_of_three_sizes_or_the_ends_of_two():
    """ "rises"/"falls with scale" only when the slope of log speedup on log parameters (least
    squares over every seed; scipy's linregress on the seeds is the reference) has an interval
    clear of 0 (3 sizes or more), or the two ends' intervals do not overlap (2 sizes, or an open
    side, which never counts as clear of the other); one size of a kind says nothing."""
    ladder, params = workloads.ladder("gpt", "64x2,128x4,256x6"), [1e5, 4e5, 1.6e6]
    results = {w.name: (w, {"params": n}) for w, n in zip(ladder, params)}
    results["image-s"] = (WL, {"params": 1})
    rng = np.random.default_rng(0)

    def lines(*spans):  # the first len(spans) sizes
        sizes = ladder[: len(spans)]
        summaries = {w.name: {"adamw": {"interval": None}} for w in sizes} | {"image-s": {}}
        for w, span in zip(sizes, spans):
            summaries[w.name]["lion"] = {"interval": protocol.Interval(*span)}
        return report._scale({k: results[k] for k in summaries}, summaries)

    for true, way in ((0.2, "rises"), (-0.2, "falls"), (0.0, "is inconclusive")):
        logs = [true * math.log(n / 1e5) + rng.normal(0, 0.1, 5) for n in params]  # 5 seeds
        spans = [
            protocol.speedup_interval([(100 * math.exp(v), "=") for v in x], 100) for x in logs
        ]
        slope, half = protocol.trend(params, spans)
        fit = scipy.stats.linregress(np.repeat(np.log(params), 5), np.concatenate(logs))
        assert slope == pytest.approx(fit.slope)
        assert half == pytest.approx(scipy.stats.t.ppf(0.975, 13) * fit.stderr)
        (line,) = lines(*spans)
        assert f"it {way} at this scale" in line if true == 0 else f"it {way} with scale" in line
        assert line.endswith(f"(slope of log speedup on log parameters {slope:+.3f} ± {half:.3f}).")
    # two sizes: the ends' intervals
    (rise,) = lines((1.0, 0.9, 1.1), (1.5, 1.2, 1.8))
    assert rise == (
        "- **lion** on gpt: step speedup 1.00x [0.90, 1.10] at gpt-64x2, 1.50x [1.20, 1.80] at "
        "gpt-128x4: it rises with scale."
    )
    assert lines((2, 1.8, 2.2), (1, 0.7, 1.3))[0].endswith("falls with scale.")
    assert "inconclusive" in lines((1, 0.9, 1.1), (1.1, 1.05, 1.2))[0]
    # the smallest's interval is open above: it may reach past the largest's low end
    assert "inconclusive" in lines((1, 0.9, 1.1, False, True), (1, 1, 1), (1.5, 1.2, 1.8))[0]
    assert report._scale({"image-s": results["image-s"]}, {"image-s": {}}) == [
        "- Only one width per workload was audited."
    ]


def test_plan_prints_the_cost_and_refuses_what_does_not_fit(tmp_path, capsys, monkeypatch):
    """--plan trains nothing and writes nothing: per workload its parameters, the least memory a
    run needs by arithmetic (parameters x 16 bytes: float32 weights, gradients, AdamW's two
    moments), steps, runs, FLOPs (6 x parameters x tokens), memory per run (compiled) and runs
    that fit, and a time; a run that needs more than half a device's memory is refused in one
    line."""
    argv = ["audit", "--workload", "gpt", "--sizes", "128x2,64x2", "--quick", "--plan"]
    argv += ["--optimizers", "adamw", "--out", str(tmp_path / "out")]
    assert cli(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    (row,) = [line.split(" | ") for line in lines if line.startswith("| gpt-")]
    assert row[0] == "| gpt-64x2" and not (tmp_path / "out").exists()
    steps, runs, flops = int(row[3]), int(row[4]), float(row[5])
    assert runs == 6 + 3 * (1 + 3)  # the quick grid, finals, AdamW's other budgets, baseline
    params = float(row[1][:-1]) * 1e6
    assert re.fullmatch(rf"{row[1]} x 16 B = {params * 16 / 2**20:.0f} MiB", row[2])
    # in units of 1x runs: 6 trials, 3 finals, AdamW's 0.5x and 2x on 3 seeds, 3 baselines
    assert flops == pytest.approx(6 * params * 8 * workloads.SEQ_LEN * steps * 19.5, rel=0.01)
    assert int(row[7]) >= 1 and lines[-2].startswith("total: ")
    assert lines[-1].startswith("weights+gradients+state: the least memory of a run, by arith")
    # a run bigger than half a device's memory (the compiled program's: the data set is an
    # argument): refused in one line (--plan refuses it so too)
    monkeypatch.setattr(engine, "memory", lambda: 2**24)
    assert cli(["audit", *SMALL, "--optimizers", "adamw", "--out", str(tmp_path / "big")]) == 2
    err = capsys.readouterr().err  # after the progress bar
    assert err.splitlines()[-1].startswith("frost: error: image-s: a run needs 0.0")
    assert "Traceback" not in err
    assert cli(["audit", *SMALL, "--optimizers", "adamw", "--plan"]) == 2  # no bar: one line
    err = capsys.readouterr().err
    assert err.startswith("frost: error: image-s: a run needs 0.0") and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, memory, message",
    [
        (["--sizes", "8192x96", "--plan"], None, "gpt-8192x96: a run needs at least 1.15e+03 GiB"),
        (["--sizes", "64x2,8192x96"], None, "(77.3B parameters x 16 bytes: weights, gradients and"),
        # half of 16 MiB, between the two sizes' 2.03 and 13.1 MiB: the larger is refused
        (["--sizes", "64x2,128x4", "--plan"], 2**24, "gpt-128x4: a run needs at least 0.0128 GiB"),
    ],
)
def test_a_size_that_cannot_fit_is_refused_by_arithmetic_before_anything_compiles(
    argv, memory, message, tmp_path, capsys, monkeypatch
):
    """Parameters x bytes per parameter (weights, gradients, AdamW's state) over half a device's
    memory: one line, at once, nothing compiled, nothing written (was: --plan compiled a 77B
    model for 100 s)."""
    if memory:
        monkeypatch.setattr(engine, "memory", lambda: memory)
    compiled = []
    monkeypatch.setattr(engine, "_need", lambda program: compiled.append(program) or 0)
    start = time.perf_counter()
    assert cli(["audit", "--workload", "gpt", *argv, "--out", str(tmp_path / "out")]) == 2
    assert time.perf_counter() - start < 30
    err = capsys.readouterr().err  # (without --plan, after the data's progress bar)
    line = err.splitlines()[-1]
    assert line.startswith("frost: error: ") and message in line and "Traceback" not in err
    assert "more than half of a device's" in line and "audit smaller models (--sizes)" in line
    assert not compiled and not (tmp_path / "out").exists()


def test_text_data_from_any_utf8_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(
        "".join(f"Line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(400))
    )
    d = workloads.load("gpt", str(path), tmp_path, progress=False)
    assert d.classes == workloads.VOCAB and d.arrays["eval_x"].shape[1] == workloads.SEQ_LEN
    # one folder per content: the same path with other text is other data
    assert (tmp_path / "gpt" / d.fingerprint / "tokenizer.json").exists()
    path.write_text("too little text\n" * 40)
    with pytest.raises(Exception, match="too little text|fewer than one window"):
        workloads.load("gpt", str(path), tmp_path / "again", progress=False)


# --- intervals, words and verdicts ----------------------------------------------------------


def test_speedup_interval_welch_and_verdicts_by_hand():
    # per-seed reaches of AdamW for an optimizer run of 100 steps: speedups 1.5, 2.0, 2.5
    s = protocol.speedup_interval([(150, "="), (200, "="), (250, "=")], 100)
    logs = np.log([1.5, 2.0, 2.5])
    half = 4.302653 * logs.std(ddof=1) / math.sqrt(3)
    assert s.mean == pytest.approx(math.exp(logs.mean()))
    assert (s.low, s.high) == pytest.approx(
        (math.exp(logs.mean() - half), math.exp(logs.mean() + half))
    )
    assert protocol.verdict(s, 1.0) == "supported" and protocol.verdict(s, 5.0) == "refuted"
    assert protocol.verdict(s, 2.0) == "inconclusive"
    assert protocol.words(s) == "faster than tuned AdamW"
    wide = protocol.speedup_interval([(50, "="), (200, "="), (120, "=")], 100)
    assert "inconclusive at this scale" in protocol.words(wide) and "seeds" in protocol.words(wide)
    # below AdamW's shortest budget on one seed: that side is open, and never shown as a point
    low = protocol.speedup_interval([(50, "<"), (60, "="), (55, "=")], 100)
    assert low.open_low and protocol.words(low) == "slower than tuned AdamW"
    assert protocol.verdict(low, 0.2) == "inconclusive"  # its low end is unknown
    assert report._interval(low).startswith("<") and "[<" in report._interval(low)
    xs, ys = [1.0, 1.2, 1.1, 0.9], [1.5, 1.4, 1.7]
    d, half, p = protocol.welch(xs, ys)
    assert d == pytest.approx(np.mean(xs) - np.mean(ys))
    assert p == pytest.approx(scipy.stats.ttest_ind(xs, ys, equal_var=False).pvalue)


def test_a_a_control_finds_no_difference(tmp_path, monkeypatch):
    """AdamW against itself under another name (an alias shares its grid): the speedup
    interval contains 1, and a claim of 1.5 is not supported."""
    monkeypatch.setitem(registry.ALIASES, "adamw-again", "adamw")
    monkeypatch.setattr(registry, "NAMES", (*registry.NAMES, "adamw-again"))
    out = tmp_path / "aa"
    argv = [*SMALL, "--optimizers", "adamw,adamw-again", "--claim", "adamw-again=1.5"]
    assert cli(["audit", *argv, "--out", str(out)]) == 0
    saved = json.loads((out / "results.json").read_text())
    (claim,) = saved["claims"]
    assert claim["low"] <= 1 <= claim["high"] and claim["verdict"] != "supported"
    text = (out / "report.md").read_text()
    assert "| adamw-again 1.5x | image-s | 1.5x |" in text
    # its wall-clock interval: timing noise gives it a width (it read 1.24x [1.24, 1.24] when
    # AdamW's first batch paid the evaluation's compile), and no gross asymmetry moves its centre.
    # Whether it covers 1 is a timing property, left to benchmarks/audit.py: within a full test
    # suite on 2 busy cores one run read an interval whose top was 0.95x (speed is a benchmark,
    # not a timed test)
    (row,) = [
        line.split(" | ")
        for line in text.splitlines()
        if line.startswith("| adamw-again | learning_rate")
    ]
    centre, low, high = map(
        float, re.fullmatch(r"([0-9.]+)x \[([0-9.]+), ([0-9.]+)\]", row[6]).groups()
    )
    assert low <= centre <= high and low < high and 0.5 < centre < 2


def test_seeds_auto_reruns_more_seeds_until_the_claim_is_decided_or_the_cap(tmp_path, capsys):
    """--seeds auto: 3 seeds, then as many more as the power estimate asks for, in batches of 3,
    up to --max-seeds, while a claim is inconclusive; --reproduce replays the rounds."""
    out = tmp_path / "auto"
    argv = [*SMALL, "--optimizers", "adamw,lion", "--seeds", "auto", "--max-seeds", "9"]
    assert cli(["audit", *argv, "--claim", "lion=1.5", "--out", str(out)]) == 0
    saved = json.loads((out / "results.json").read_text())
    finals = [r for r in saved["runs"] if r["optimizer"] == "lion" and r["seed"] > 0]
    assert sorted(r["seed"] for r in finals) == list(range(1, 10))
    (claim,) = saved["claims"]  # inconclusive on 3 seeds, and still on 9
    assert claim["verdict"] == "inconclusive" and claim["low"] < 1.5 < claim["high"]
    assert "rerun on seeds 1-9" in (out / "report.md").read_text()
    assert cli(["audit", "--reproduce", str(out), "--sample", "8"]) == 0
    assert capsys.readouterr().out.count(": matches bit for bit") == 8
    # decided on the first 3: no more seeds
    assert cli(["audit", *argv, "--claim", "lion=1.01", "--out", str(tmp_path / "decided")]) == 0
    saved = json.loads((tmp_path / "decided" / "results.json").read_text())
    assert {r["seed"] for r in saved["runs"]} == {0, 1, 2, 3}


def test_the_report_names_the_command_that_makes_it():
    """Repeatable options come back as repeated flags, defaults are left out."""
    cfg = AuditConfig(workload="image", quick=True, claim=("lion=1.5", "muon=2"))
    assert (
        run.command(cfg) == "frost audit --workload image --claim lion=1.5 --claim muon=2 --quick"
    )


def test_reproduce_matches_a_finished_audit_and_names_a_changed_run(audited, tmp_path, capsys):
    """`--reproduce` retrains a seed-fixed sample of the runs, each in its batch: bit for bit on
    the same code and machine; a run whose record was changed is named, and the exit is 1."""
    files = {p: p.stat().st_mtime_ns for p in audited.rglob("*")}
    with jax.numpy_dtype_promotion("standard"):  # optax:adamw, as in `audited`
        assert cli(["audit", "--reproduce", str(audited)]) == 0
        assert {p: p.stat().st_mtime_ns for p in audited.rglob("*")} == files  # nothing written
        lines = capsys.readouterr().out.splitlines()
        assert sum(line.endswith(": matches bit for bit") for line in lines) == 5
        assert lines[-1] == (f"--reproduce {audited}: all 5 runs reproduce; their run files agree")
        copy = tmp_path / "copy"
        subprocess.run(["cp", "-r", str(audited), str(copy)], check=True)
        saved = json.loads((copy / "results.json").read_text())
        for r in saved["runs"]:
            r["final_loss"] = r["final_loss"] and r["final_loss"] + 1e-6
        (copy / "results.json").write_text(json.dumps(saved))
        assert cli(["audit", "--reproduce", str(copy)]) == 1
        captured = capsys.readouterr()
        assert captured.out.count(": DIFFERS: final loss") == 5
        # the run files hold the numbers trained: they disagree with the changed results.json
        assert captured.out.count("disagrees with results.json (final_loss") == 5
        assert captured.err.splitlines()[-1].endswith(
            "5 of 5 runs do not reproduce; 5 of 5 run files are missing, not a run's record, or "
            "disagree with results.json"
        )
        # an audit published without its run files (as docs/audit-2026-12-07): results.json
        shutil.rmtree(copy / "runs")
        assert cli(["audit", "--reproduce", str(copy)]) == 1
        assert not (copy / "runs").exists()
        captured = capsys.readouterr()
        assert captured.out.count(": DIFFERS: final loss") == 5 and "run file" not in captured.out
        assert captured.err.splitlines()[-1].endswith(": 5 of 5 runs do not reproduce")
        shutil.copy(audited / "results.json", copy / "results.json")
        assert cli(["audit", "--reproduce", str(copy)]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == (
            f"--reproduce {copy}: all 5 runs reproduce; {copy / 'runs'} is not there to check"
        )
        assert cli(["audit", "--reproduce", str(copy), "--quick"]) == 2
        assert "--reproduce: takes OUT's options from it; drop --quick" in capsys.readouterr().err
        assert cli(["audit", "--reproduce", str(tmp_path / "none")]) == 2
        assert "not a finished audit" in capsys.readouterr().err
