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


@pytest.mark.parametrize("model, variants", [("resnet", ("dp", "fsdp")), ("gpt", ("fsdp", "tp"))])
def test_eight_devices_match_one(strategies, model, variants):
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
