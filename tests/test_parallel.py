"""Sharding strategies on 8 forced CPU devices, and two real processes on localhost.

Each case runs tests/parallel_job.py in subprocesses: the device count and the multi-process
runtime are fixed when JAX starts, and this pytest process has started JAX already. The three
subprocesses (8 devices; two processes of one device) start together, so their compiles share
the cores, and the single-device losses of the 8-device job are the two processes' reference."""

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

JOB = str(pathlib.Path(__file__).with_name("parallel_job.py"))
TIMEOUT = 300


def env(devices: int):
    # conftest's flags too
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": flags.strip()}


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jobs():
    """{name: (return code, stdout, stderr)} of the 8-device job and of the two processes."""
    port = free_port()
    argvs = {
        "strategies": (["strategies"], 8),
        **{f"process {i}": (["process", str(i), "2", str(port)], 1) for i in range(2)},
    }
    procs = {
        name: subprocess.Popen(
            [sys.executable, JOB, *argv],
            env=env(devices),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, (argv, devices) in argvs.items()
    }
    deadline = time.monotonic() + TIMEOUT  # for all three
    try:
        outputs = {
            name: p.communicate(timeout=max(deadline - time.monotonic(), 1))
            for name, p in procs.items()
        }
    finally:
        for p in procs.values():  # end them all, on success or failure
            if p.poll() is None:
                p.kill()
                p.wait(10)
    return {name: (procs[name].returncode, *outputs[name]) for name in procs}


@pytest.fixture(scope="module")
def strategies(jobs):
    code, out, err = jobs["strategies"]
    assert code == 0, err[-3000:]
    return last_json(out)


@pytest.mark.parametrize(
    "model, variants", [("resnet", ("dp", "fsdp")), ("gpt", ("fsdp", "tp", "accum"))]
)
def test_eight_devices_match_one(strategies, model, variants):
    """Each strategy, and gradient accumulation over 2 micro-batches on a data-parallel mesh, gives
    the losses of one device taking the whole batch at once."""
    single = strategies[f"{model}_1"]["losses"]
    for v in variants:
        np.testing.assert_allclose(
            strategies[f"{model}_{v}"]["losses"], single, rtol=2e-5, err_msg=v
        )


def test_fsdp_stores_an_eighth_per_device(strategies):
    for model in ("resnet", "gpt"):
        r = strategies[f"{model}_fsdp"]
        assert r["per_device_bytes"] <= 1.05 * r["total_bytes"] / 8
    tp = strategies["gpt_tp"]
    assert tp["per_device_bytes"] < 0.7 * tp["total_bytes"]  # the block matrices are split in two


def test_wrong_mesh_names_axis_and_sizes(strategies):
    assert strategies["batch_error"] == (
        "--batch-size 12 is not divisible by mesh axis 'data' of size 8; "
        "choose a batch size that is a multiple of 8"
    )
    assert "data=3 x model=1 = 3 devices, but 8 are visible" in strategies["mesh_error"]


def test_two_processes_on_localhost_match_one(jobs, strategies):
    for name in ("process 0", "process 1"):
        code, out, err = jobs[name]
        assert code == 0, err[-3000:]
        result = last_json(out)
        assert result["process_count"] == 2
        np.testing.assert_allclose(result["losses"], strategies["resnet_1"]["losses"], rtol=2e-5)


def _train(out, *extra):
    """`frost train` of a tiny GPT on the first 60k characters of the KJV: 26 steps an epoch."""
    args = "gpt --data kjv --limit 60000 --dim 32 --depth 1 --heads 2 --seq-len 32"
    args += f" --batch-size 16 --epochs 6 --workers 0 --out {out}"
    return [sys.executable, "-m", "frost.cli", "train", *args.split(), *extra]


def _records(run_dir) -> dict:
    """{(step, is a training record): its loss or validation loss} from a run's metrics.jsonl."""
    lines = (json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    return {(r["step"], "loss" in r): r.get("loss", r.get("val_loss")) for r in lines}


def test_a_killed_process_stops_the_other_and_both_resume(tmp_path):
    """kill -9 one of two processes mid-epoch: the other exits within 30 s with one line, and
    --resume on both ends at the losses of an uninterrupted single-process run."""
    ref = subprocess.run(_train(tmp_path / "one"), env=env(1), capture_output=True, timeout=TIMEOUT)
    assert ref.returncode == 0, ref.stderr[-2000:]
    out = tmp_path / "two"

    def start(i, port, *extra):
        """Process i of two; its stderr goes to a file (a pipe nobody reads could fill up)."""
        argv = _train(out, "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", *extra)
        stderr = tmp_path / f"stderr {i}{extra}"
        with open(stderr, "w") as f:  # the child holds its own copy of the descriptor
            return subprocess.Popen([*argv, "--process-id", str(i)], env=env(1), stderr=f), stderr

    port = free_port()
    (first, stderr), (second, _) = start(0, port), start(1, port)
    try:
        while not (out / "checkpoints" / "step_00000052").exists():  # two epochs saved
            assert first.poll() is None and second.poll() is None, "a process ended early"
            time.sleep(0.02)
        second.kill()
        killed = time.monotonic()
        first.wait(60)
        waited = time.monotonic() - killed
    finally:
        for p in (first, second):
            p.kill()
            p.wait(10)
    err = stderr.read_text()
    lines = [line for line in err.replace("\r", "\n").splitlines() if "it/s" not in line]
    assert first.returncode == 1 and waited < 30, (first.returncode, waited, err[-2000:])
    assert lines[-1].startswith("frost: error: process 0 of 2: ") and "Traceback" not in err
    assert "Check failure" not in err and sum("frost: error" in line for line in lines) == 1

    port = free_port()
    for p, stderr in [start(i, port, "--resume") for i in range(2)]:
        assert p.wait(TIMEOUT) == 0, stderr.read_text()[-2000:]
    got, want = _records(out), _records(tmp_path / "one")
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-4)
