"""Training loop and the `frost train` / `frost plot` commands (checkpoints:
tests/test_checkpoint.py)."""

import functools
import json
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from frost import checkpoint, data, optim
from frost.cli import main as cli
from frost.models import resnet
from frost.train import loop, losses, metrics


@jax.jit  # one compile instead of one per eager init op
def tiny_model(key):
    return resnet.ResNet(resnet.BasicBlock, (1, 1), (4, 8), 3, 1, False, "A", key=key)


def tiny_data(n=48, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 8, 8, 1)).astype(np.float32), rng.integers(0, 3, n).astype(
        np.int32
    )


# --- the loop ---


def test_correct_is_argmax_with_its_ties():
    rng = np.random.default_rng(0)
    logits = rng.integers(0, 3, (64, 5)).astype(np.float32)  # many tied maxima
    labels = rng.integers(0, 5, 64)
    want = np.argmax(logits, -1) == labels
    assert 0 < want.sum() < 64
    np.testing.assert_array_equal(losses.correct(jnp.asarray(logits), jnp.asarray(labels)), want)


@functools.cache
def sgd_and_step():
    """The optimizer of `run` and its jitted step, shared by every run: one compile, not one a
    run."""
    opt = optim.sgd(optim.one_cycle(12, 0.05), momentum=0.9, nesterov=True, weight_decay=5e-4)
    return opt, loop.make_train_step(opt)


def run(tmp_path, name, epochs, max_steps=None, resume=False, images=None, seed=0):
    x, y = tiny_data() if images is None else images
    model = tiny_model(jax.random.key(seed))
    opt, step = sgd_and_step()
    state = loop.TrainState(model, opt.init(model), jax.random.key(1))
    if resume:
        state = loop.restore(tmp_path / name, state)
    with data.Loader(
        data.Arrays(x, y), 8, seed=seed, drop_last=True, state=state.loader_state
    ) as loader:
        state = loop.fit(
            state,
            step,
            loader,
            loop.FitConfig(
                epochs=epochs,
                run_dir=tmp_path / name,
                log_every=1,
                progress=False,
                max_steps=max_steps,
            ),
        )
    losses = [
        r["loss"]
        for r in map(json.loads, (tmp_path / name / "metrics.jsonl").read_text().splitlines())
        if "loss" in r
    ]
    return state, losses


def test_resume_mid_epoch_gives_identical_losses(tmp_path):
    _, full = run(tmp_path, "full", epochs=2)
    assert len(full) == 12 and full[-1] < full[0]
    run(tmp_path, "split", epochs=2, max_steps=4)  # stop mid-epoch (epoch has 6 batches)
    state, split = run(tmp_path, "split", epochs=2, resume=True)
    assert state.step == 12
    assert split == full  # bit-identical on CPU


def test_non_finite_loss_stops_with_step_and_keeps_last_checkpoint(tmp_path):
    x, y = tiny_data()
    run(tmp_path, "nan", epochs=1, images=(x, y))
    good = checkpoint.latest(tmp_path / "nan" / "checkpoints")
    x_bad = x.copy()
    x_bad[:] = np.nan
    with pytest.raises(
        loop.NonFiniteError, match=r"step 7: .*The last checkpoint, .*step_00000006"
    ):
        run(tmp_path, "nan", epochs=2, resume=True, images=(x_bad, y))
    assert checkpoint.latest(tmp_path / "nan" / "checkpoints") == good


def test_non_finite_last_step_of_an_epoch_is_caught_before_the_checkpoint(tmp_path):
    # fit checks each step's flag after dispatching the next; the epoch's last step is checked
    # before the epoch's checkpoint is written
    def step(model, opt_state, batch, key):
        model = model + 1
        return model, opt_state, {"loss": jnp.float32(0), "finite": model != 6}

    # 6 batches
    loader = data.Loader(data.Arrays(np.zeros(48, np.float32)), 8, shuffle=False)
    with loader, pytest.raises(loop.NonFiniteError, match=r"step 6: .*none yet"):
        state = loop.TrainState(jnp.int32(0), (), jax.random.key(0))
        loop.fit(state, step, loader, loop.FitConfig(epochs=1, run_dir=tmp_path, progress=False))
    assert checkpoint.latest(tmp_path / "checkpoints") is None


def test_a_run_stopped_between_checkpoint_and_evaluation_evaluates_on_resume(tmp_path):
    def step(model, opt_state, batch, key):
        return model + 1, opt_state, {"loss": jnp.float32(0), "finite": jnp.bool_(True)}

    def stopped(model):
        raise KeyboardInterrupt  # as a kill right after the epoch's checkpoint

    def fit(eval_fn, epochs):
        state = loop.restore(tmp_path, loop.TrainState(jnp.int32(0), (), jax.random.key(0)))
        # 6 batches an epoch
        arrays = data.Arrays(np.zeros(48, np.float32))
        with data.Loader(arrays, 8, shuffle=False, state=state.loader_state) as loader:
            config = loop.FitConfig(epochs=epochs, run_dir=tmp_path, progress=False)
            return loop.fit(state, step, loader, config, eval_fn)

    with pytest.raises(KeyboardInterrupt):
        fit(stopped, 2)
    state = fit(lambda model: {"model": float(model)}, 2)
    evaluated = [r for r in metrics.read(tmp_path / "metrics.jsonl") if "test_model" in r]
    assert [(r["step"], r["test_model"]) for r in evaluated] == [(6, 6.0), (12, 12.0)]
    assert state.last_eval == {"model": 12.0}


def test_train_step_compiles_once_and_updates_batchnorm_statistics(key):
    model = tiny_model(key)
    opt = optim.sgd(0.01)
    step = loop.make_train_step(opt)
    x, y = tiny_data(16)
    # the step donates (frees) its inputs
    mean_before = np.asarray(model.blocks[0].bn1.running_mean)
    m1, s1, metrics = step(model, opt.init(model), (jnp.asarray(x[:8]), jnp.asarray(y[:8])), key)
    before = step._cache_size()
    m2, _, _ = step(m1, s1, (jnp.asarray(x[8:]), jnp.asarray(y[8:])), key)
    assert step._cache_size() == before == 1
    assert bool(metrics["finite"])
    assert not np.allclose(m2.blocks[0].bn1.running_mean, mean_before)


def test_an_update_that_turns_the_parameters_non_finite_is_never_kept(tmp_path):
    # the loss and gradients of step 7 are finite, its update is not (learning rate NaN):
    # the step is refused, and every checkpoint on disk stays finite
    x, y = tiny_data()
    model = tiny_model(jax.random.key(0))
    opt = optim.sgd(0.05, momentum=0.9)
    state = loop.TrainState(model, opt.init(model), jax.random.key(1))
    step = loop.make_train_step(opt)
    with data.Loader(data.Arrays(x, y), 8, drop_last=True) as loader:
        state = loop.fit(
            state, step, loader, loop.FitConfig(epochs=1, run_dir=tmp_path, progress=False)
        )
        state.opt_state = optim.set_hyperparams(state.opt_state, learning_rate=float("nan"))
        with pytest.raises(loop.NonFiniteError, match="step 7: "):
            loop.fit(
                state, step, loader, loop.FitConfig(epochs=2, run_dir=tmp_path, progress=False)
            )
    tree, _ = checkpoint.load(checkpoint.latest(tmp_path / "checkpoints"), state.tree())
    assert checkpoint.latest(tmp_path / "checkpoints").name == "step_00000006"
    assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in jax.tree.leaves(tree["model"]))


def test_skip_policy_skips_bad_steps_then_stops_after_max_skips(tmp_path):
    # non-finite steps are skipped (the state is kept) and counted; max_skips in a row stop it
    def step(model, opt_state, batch, key):
        i = jnp.ravel(batch[0])[0]  # steps 3, 4 and 9-12 see values 2, 3 and 8-11
        bad = (i == 2) | (i == 3) | (i >= 8)
        return jnp.where(bad, model, model + 1), opt_state, {"loss": jnp.float32(0), "finite": ~bad}

    source = data.Arrays(np.arange(12, dtype=np.int32))
    with data.Loader(source, 1, shuffle=False) as loader:
        state = loop.fit(
            loop.TrainState(jnp.int32(0), (), jax.random.key(0)),
            step,
            loader,
            loop.FitConfig(
                epochs=1,
                run_dir=tmp_path / "a",
                progress=False,
                on_nonfinite="skip",
                max_skips=5,
                log_every=1,
            ),
        )
    assert int(state.model) == 6 and state.skipped == 2 + 4 and state.step == 12
    logged = [
        json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in logged if "loss" in r] == [
        1,
        2,
        5,
        6,
        7,
        8,
    ]  # skipped steps are not logged
    with (
        data.Loader(source, 1, shuffle=False) as loader,
        pytest.raises(loop.NonFiniteError, match=r"step 11: .*3 steps in a row .*--max-skips 3"),
    ):
        loop.fit(
            loop.TrainState(jnp.int32(0), (), jax.random.key(0)),
            step,
            loader,
            loop.FitConfig(
                epochs=1, run_dir=tmp_path / "b", progress=False, on_nonfinite="skip", max_skips=3
            ),
        )


def test_resume_drops_metrics_logged_after_the_checkpoint_and_a_cut_last_line(tmp_path):
    from frost.train import metrics

    log = tmp_path / "metrics.jsonl"
    log.write_text(
        "".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(1, 9))
        + '{"step": 9, "lo'
    )
    # the cut last line is skipped
    assert [r["step"] for r in metrics.read(log)] == list(range(1, 9))
    metrics.rewind(log, 6)
    assert [r["step"] for r in metrics.read(log)] == list(range(1, 7)) and log.read_text().endswith(
        "\n"
    )
    log.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match=":2: not a JSON line"):
        metrics.read(log)


OPTIMIZER_NAMES = ["sgd", "adam", "adamw", "lion", "sophia", "sophia-h", "muon"]


@pytest.mark.parametrize("name", OPTIMIZER_NAMES + ["optax:adamw"])
def test_every_registry_optimizer_trains_in_the_step(name):
    from frost import nn
    from frost.optim import SophiaState, decay_mask, find_states, registry

    assert list(registry.OPTIMIZERS) == OPTIMIZER_NAMES
    k = jax.random.split(jax.random.key(0), 2)
    model = nn.Sequential(nn.Linear(6, 16, key=k[0]), nn.relu, nn.Linear(16, 3, key=k[1]))
    extra = {"mask": decay_mask} if name in registry.OPTIMIZERS else {}
    opt = registry.build(name, 3e-3, weight_decay=1e-4, **extra)
    step = loop.make_train_step(opt, hessian=registry.resolve(name).hessian)
    rng = np.random.default_rng(0)
    x, y = (
        jnp.asarray(rng.standard_normal((32, 6)), jnp.float32),
        jnp.asarray(rng.integers(0, 3, 32), jnp.int32),
    )
    state, losses = opt.init(model), []
    # optax mixes dtypes
    with jax.numpy_dtype_promotion("standard" if name.startswith("optax") else "strict"):
        for i in range(12):
            model, state, metrics = step(model, state, (x, y), jax.random.key(i))
            losses.append(float(metrics["loss"]))
    assert losses[-1] < losses[0]
    # the step refreshed Sophia's Hessian estimate (steps 0 and 10)
    for s in find_states(state, SophiaState):
        assert int(s.h_step) == 10 and all(
            float(jnp.abs(h).sum()) > 0 for h in jax.tree.leaves(s.h)
        )


# --- the commands ---


def test_frost_train_and_plot_on_fashion_mnist(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        cli(
            [
                "train",
                "resnet20",
                "--max-steps",
                "3",
                "--eval-every",
                "2",
                "--limit",
                "128",
                "--batch-size",
                "64",
                "--workers",
                "0",
                "--out",
                str(out),
                "--log",
                "tensorboard",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert (
        "test accuracy" in text
        and (out / "metrics.jsonl").exists()
        and checkpoint.latest(out / "checkpoints")
    )
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert json.loads((out / "result.json").read_text())["steps"] == 3
    evaluated = [r["step"] for r in metrics.read(out / "metrics.jsonl") if "test_loss" in r]
    assert evaluated == [2, 3]  # every --eval-every steps and at the end, each after a checkpoint
    shutil.rmtree(out / "checkpoints" / "step_00000003")  # as if killed after step 2's
    assert cli(["train", "resnet20", "--limit", "128", "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert (
        cli(
            [
                "train",
                "resnet20",
                "--limit",
                "256",
                "--max-steps",
                "3",
                "--eval-every",
                "2",
                "--batch-size",
                "64",
                "--workers",
                "0",
                "--out",
                str(out),
                "--resume",
            ]
        )
        == 2
    )
    assert "--limit 128, now 256" in capsys.readouterr().err
    assert (
        cli(
            [
                "train",
                "resnet20",
                "--limit",
                "128",
                "--max-steps",
                "3",
                "--eval-every",
                "1",
                "--batch-size",
                "64",
                "--workers",
                "0",
                "--out",
                str(out),
                "--resume",
            ]
        )
        == 0
    )  # --eval-every may change on --resume
    assert json.loads((out / "result.json").read_text())["steps"] == 3
    assert checkpoint.latest(out / "checkpoints").name == "step_00000003"
    assert cli(["plot", str(out)]) == 0
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_frost_train_gpt_with_sophia_and_sample_on_kjv(tmp_path, capsys):
    out = tmp_path / "gpt"
    assert (
        cli(
            [
                "train",
                "gpt",
                "--limit",
                "60000",
                "--max-steps",
                "3",
                "--batch-size",
                "8",
                "--optimizer",
                "sophia",
                "--lr",
                "1e-3",
                "--dim",
                "32",
                "--depth",
                "1",
                "--heads",
                "2",
                "--seq-len",
                "16",
                "--out",
                str(out),
            ]
        )
        == 0
    )  # a short --seq-len: the run's own sample fits it (issue 27, class 4)
    text = capsys.readouterr().out
    assert "validation loss" in text and "In the beginning" in text
    assert json.loads((out / "result.json").read_text())["sample"].startswith("In the beginning")
    assert (out / "tokenizer.json").exists() and (out / "train.bin").stat().st_size > 0
    assert cli(["sample", str(out), "--prompt", "And God said", "--tokens", "5"]) == 0
    assert capsys.readouterr().out.startswith("And God said")
    assert cli(["sample", str(out), "--tokens", "60"]) == 2  # names --tokens, sample's own flag
    assert "--tokens 60: the model sees 16 tokens" in capsys.readouterr().err


def test_cli_model_names_match_the_models_and_keep_jax_out_of_start_up():
    from frost.train.configs import RESNETS

    assert set(RESNETS) == set(resnet.MODELS)
    code = (
        "import sys; from frost.cli import _build_parser; _build_parser(); "
        "print('jax' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_evaluation_on_any_mesh_gives_the_single_device_numbers():
    """101 validation rows in batches of 24 leave a last batch of 5, which 2, 3 and 8 devices do
    not divide: it is padded and masked, never dropped (issue 27, class 1)."""
    import os
    import pathlib
    import subprocess
    import sys

    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    job = pathlib.Path(__file__).with_name("eval_devices_job.py")
    done = subprocess.run(
        [sys.executable, str(job)],
        env={**os.environ, "XLA_FLAGS": flags},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    for n in ("1", "2", "3", "8"):
        np.testing.assert_allclose(out[n], out["reference"], rtol=1e-5)
