"""Sharding strategies on 8 forced CPU devices, and two real processes on localhost.

Each case runs tests/parallel_job.py in subprocesses: the device count and the multi-process
runtime are fixed when JAX starts, and this pytest process has started JAX already."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

JOB = str(pathlib.Path(__file__).with_name("parallel_job.py"))
TIMEOUT = 240


def env(devices: int):
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def strategies():
    proc = subprocess.run([sys.executable, JOB, "strategies"], env=env(8), capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return last_json(proc.stdout)


@pytest.mark.parametrize("model, variants", [("resnet", ("dp", "fsdp")), ("gpt", ("fsdp", "tp"))])
def test_eight_devices_match_one(strategies, model, variants):
    single = strategies[f"{model}_1"]["losses"]
    for v in variants:
        np.testing.assert_allclose(strategies[f"{model}_{v}"]["losses"], single, rtol=2e-5, err_msg=v)


def test_fsdp_stores_an_eighth_per_device(strategies):
    for model in ("resnet", "gpt"):
        r = strategies[f"{model}_fsdp"]
        assert r["per_device_bytes"] <= 1.05 * r["total_bytes"] / 8
    tp = strategies["gpt_tp"]
    assert tp["per_device_bytes"] < 0.7 * tp["total_bytes"]  # the block matrices are split in two


def test_wrong_mesh_names_axis_and_sizes(strategies):
    assert strategies["batch_error"] == ("--batch-size 12 is not divisible by mesh axis 'data' of size 8; "
                                         "choose a batch size that is a multiple of 8")
    assert "data=3 x model=1 = 3 devices, but 8 are visible" in strategies["mesh_error"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_on_localhost_match_one():
    single = subprocess.run([sys.executable, JOB, "process", "0", "1", "0"], env=env(1), capture_output=True,
                            text=True, timeout=TIMEOUT)
    assert single.returncode == 0, single.stderr[-3000:]
    port = free_port()
    procs = [subprocess.Popen([sys.executable, JOB, "process", str(i), "2", str(port)], env=env(1),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        outputs = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:  # end both, on success or failure
            if p.poll() is None:
                p.kill()
                p.wait(10)
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-3000:]
        result = last_json(out)
        assert result["process_count"] == 2
        np.testing.assert_allclose(result["losses"], last_json(single.stdout)["losses"], rtol=2e-5)
