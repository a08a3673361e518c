"""`frost train gpt` measured in steps and tokens (issue 46): the run's length and its schedule,
evaluation on a fixed subset, an exact mid-epoch resume, and gradient accumulation."""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from frost import data, optim, text
from frost.cli import main as cli
from frost.models import gpt
from frost.train import configs, cross_entropy, image, lm, loop
from frost.train.job import EVAL_SEED, Data, plan


def fake_data(windows: int, eval_windows: int, per_row: int = 16) -> Data:
    """Data that `plan` can size: only the lengths of its sources matter."""
    return Data(range(windows), range(eval_windows), "", per_row=per_row)


@pytest.mark.parametrize(
    "options, steps",
    [
        ({"max_steps": 50}, 50),
        ({"tokens": 10_000, "batch_size": 8}, 79),  # ceil(10,000 / (8 x 16))
        ({"tokens": 10_000, "batch_size": 4, "grad_accum": 2}, 79),  # the same tokens a step
        ({"epochs": 2, "batch_size": 8, "grad_accum": 2}, 2 * (1000 // 16)),
        ({}, 3 * (1000 // 32)),  # 3 epochs of batch 32 by default
        ({"max_steps": 200, "warmup": 0.25, "min_lr": 0.0}, 200),
        ({"max_steps": 200, "warmup": 30, "lr": 1e-3}, 200),
    ],
)
def test_the_schedule_spans_the_run_in_steps_or_tokens(options, steps):
    cfg = configs.LMConfig(**options)
    job = lm.LMJob()
    assert plan(job, cfg, fake_data(1000, 100)).steps == steps
    schedule = job.schedule(cfg, steps)
    warmup = {0.25: 50, 30: 30}.get(cfg.warmup, min(100, steps // 10))
    assert cfg.warmup_steps(steps) == warmup
    end = 0.1 * cfg.peak_lr if cfg.min_lr is None else cfg.min_lr
    lr = np.asarray([float(schedule(t)) for t in range(steps + 1)])
    assert lr[0] == 0.0 and lr[warmup] == pytest.approx(cfg.peak_lr)
    assert lr[steps] == pytest.approx(end, abs=1e-9) and lr[steps - 1] > end
    assert np.all(np.diff(lr[warmup:]) <= 0)  # the cosine falls all the way to the run's end


def test_the_image_job_keeps_its_length_and_its_one_cycle_spans_max_steps():
    images = fake_data(60_000, 10_000, per_row=1)
    job = image.ImageJob()
    default = plan(job, configs.ImageConfig(), images)
    assert default.steps == 5 * (60_000 // 128) and default.eval_every == 60_000 // 128
    assert default.eval_batches is None  # the full test set every epoch, as before
    short = plan(job, configs.ImageConfig(max_steps=40), images)
    assert short.steps == 40 and short.eval_every == 8  # 5 evaluations a run
    schedule = job.schedule(configs.ImageConfig(max_steps=40), 40)
    assert float(schedule(12)) == pytest.approx(0.1)  # the peak at 30% of the run
    assert float(schedule(40)) == pytest.approx(0.1 / 25 / 1e4)


def test_evaluation_defaults_scale_with_the_data():
    job = lm.LMJob()
    kjv = plan(job, configs.LMConfig(), fake_data(8_300, 430, per_row=128))
    assert kjv.eval_every == kjv.per_epoch and kjv.eval_batches is None  # small: every epoch, all
    big = fake_data(200_000, 10_000, per_row=128)
    run = plan(job, configs.LMConfig(max_steps=5000), big)
    assert run.eval_every == 1000  # a corpus: 5 evaluations a run
    assert run.eval_batches * 32 * 128 == lm.EVAL_TOKENS  # 2^19 tokens: a standard error < 0.01
    one = plan(job, configs.LMConfig(max_steps=1), big)
    assert one.eval_every == 1 and one.eval_batches == 1  # no more than the run trains on
    given = plan(job, configs.LMConfig(max_steps=10, eval_every=3, eval_batches=7), big)
    assert (given.eval_every, given.eval_batches) == (3, 7)
    every = plan(job, configs.LMConfig(max_steps=10, eval_batches="all"), big)
    assert every.eval_batches is None and every.eval_total == -(-10_000 // 32)


def _train(out, *extra):
    """A tiny GPT on the first 60k characters of the KJV: 14,000 training tokens, about 110 steps
    an epoch, so 20 steps stop mid-epoch."""
    args = "train gpt --limit 60000 --dim 32 --depth 1 --heads 2 --seq-len 16 --batch-size 8"
    args += f" --max-steps 20 --eval-every 5 --eval-batches 3 --out {out}"
    assert cli([*args.split(), *extra]) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _numbers(records):
    """(step, name, value) of every loss, validation loss and learning rate logged."""
    names = ("loss", "val_loss", "learning_rate")
    return [(r["step"], k, r[k]) for r in records for k in names if k in r]


def test_a_run_in_steps_evaluates_a_fixed_subset_and_resumes_mid_epoch_exactly(tmp_path):
    full = _train(tmp_path / "full")
    evaluated = [r for r in full if "val_loss" in r]
    assert [r["step"] for r in evaluated] == [5, 10, 15, 20]
    assert all(r["tokens_per_s"] > 0 and r["flops_per_token"] > 0 for r in evaluated)
    result = json.loads((tmp_path / "full" / "result.json").read_text())
    assert result["steps"] == 20 and result["flops_per_token"] == evaluated[-1]["flops_per_token"]
    assert "mfu" not in result  # no peak known for a CPU

    # the learning rate of step 20 (the 20th update) is the schedule's last value, above --min-lr
    cfg = configs.LMConfig(max_steps=20)
    last = float(lm.LMJob().schedule(cfg, 20)(19))
    assert [r["learning_rate"] for r in full if r["step"] == 20 and "loss" in r] == [
        pytest.approx(last)
    ]
    assert 2e-4 < last < 2.2e-4

    # the validation loss is the mean over the first 3 batches of one shuffle (seed EVAL_SEED)
    # of the validation windows, the same subset at every evaluation
    model, tok = lm.load_run(tmp_path / "full")
    windows = data.TokenWindows(tmp_path / "full" / "val.bin", 16, text.token_dtype(tok.vocab_size))
    subset = data.Sampler(len(windows), 8, seed=EVAL_SEED).order(0)[: 3 * 8]
    x = np.stack([windows[int(i)][0] for i in subset])
    y = np.stack([windows[int(i)][1] for i in subset])
    want = float(cross_entropy(model(jnp.asarray(x, jnp.int32)), jnp.asarray(y, jnp.int32)))
    assert evaluated[-1]["val_loss"] == pytest.approx(want, rel=1e-5)

    # killed after the checkpoint of step 10 (mid-epoch): --resume repeats the run exactly
    shutil.copytree(tmp_path / "full", tmp_path / "split")
    for step in (15, 20):
        shutil.rmtree(tmp_path / "split" / "checkpoints" / f"step_{step:08d}")
    resumed = _train(tmp_path / "split", "--resume")
    assert _numbers(resumed) == _numbers(full)  # bit-identical on CPU
    models = [lm.load_run(tmp_path / run)[0] for run in ("full", "split")]
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(np.all(a == b)), *models))

    # the length sets the schedule, so it cannot change on --resume
    assert cli(["train", "gpt", "--max-steps", "30", "--out", str(tmp_path / "split"), "--resume"])
    assert not (tmp_path / "split" / "checkpoints" / "step_00000030").exists()


def test_gradient_accumulation_gives_the_update_of_one_batch_k_times_larger():
    model = gpt.GPT(64, 32, 2, 2, 16, key=jax.random.key(0))
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, 64, (16, 17)), jnp.int32)
    batch = (tokens[:, :-1], tokens[:, 1:])  # (16, 16) inputs and targets

    def loss_fn(model, batch, key):
        return cross_entropy(model(batch[0]), batch[1]), (model, {})

    opt = optim.sgd(1.0)  # the update is the gradient itself
    results = []
    for k in (1, 4):
        step = loop.make_train_step(opt, loss_fn, grad_accum=k)
        copy = jax.tree.map(jnp.copy, model)  # the step donates its model
        new, _, metrics = step(copy, opt.init(copy), batch, jax.random.key(1))
        results.append((new, float(metrics["loss"]), float(metrics["grad_norm"])))
    (big, big_loss, big_norm), (accumulated, loss, norm) = results
    assert loss == pytest.approx(big_loss, rel=1e-6) and norm == pytest.approx(big_norm, rel=1e-5)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), accumulated, big
    )
    with pytest.raises(ValueError, match="grad_accum=3: the batch's 16 rows"):
        loop.make_train_step(opt, loss_fn, grad_accum=3)(model, opt.init(model), batch, None)
