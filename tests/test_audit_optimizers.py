"""`frost audit` takes any optax optimizer or refuses it before any run in one line, and never
reads a run file of other data, other code or another protocol (issues 24 and 27)."""

import json
import math
import pathlib
import sys
import textwrap

import jax
import numpy as np
import pytest

from frost.audit import engine, run, workloads
from frost.audit.cli import AuditConfig
from frost.cli import main as cli
from frost.config import UsageError
from frost.optim.registry import resolve

WL = workloads.WORKLOADS["image-s"]
USER = textwrap.dedent(
    """
    import jax, optax, optax.contrib

    def constant(learning_rate):  # a float rate: optax.scale's state holds no array
        return optax.sgd(0.05)

    def polyak(learning_rate):  # an extra-args optimizer: its update takes value= (the loss)
        return optax.polyak_sgd(max_learning_rate=0.5)

    def injected(learning_rate):
        return optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate)

    def schedule_free(learning_rate):  # evaluated at its averaged point, through the hook
        opt = optax.contrib.schedule_free_adamw(learning_rate, warmup_steps=0)
        return opt, lambda params, state: optax.contrib.schedule_free_eval_params(state, params)

    def zeroed(learning_rate):  # evaluated at all-zero parameters: uniform logits
        zeros = lambda params, state: jax.tree.map(jax.numpy.zeros_like, params)
        return optax.sgd(learning_rate), zeros

    def not_an_optimizer(learning_rate):
        return 3

    def raises(learning_rate):
        def update(updates, state, params=None):
            raise RuntimeError("my update is broken")
        return optax.GradientTransformation(lambda params: optax.EmptyState(), update)
    """
)
OPTAX = [  # (name, hyper-parameters): each trains, from an import path
    *[
        (f"optax:{n}", {"learning_rate": 1e-3})
        for n in [
            "sgd",
            "adam",
            "adamw",
            "adagrad",
            "rmsprop",
            "lion",
            "lamb",
            "lars",
            "novograd",
            "yogi",
            "adabelief",
            "radam",
            "nadam",
            "adamax",
            "amsgrad",
            "adafactor",
        ]
    ],
    ("optax.contrib:cocob", {"learning_rate": 1.0}),
    ("user_opts:constant", {"learning_rate": 1e-3}),
    ("user_opts:polyak", {"learning_rate": 1e-3}),
    ("user_opts:injected", {"learning_rate": 1e-3}),
    ("user_opts:schedule_free", {"learning_rate": 3e-3}),
]
REFUSED = [  # (name, what the one line says)
    ("optax:lbfgs", "cannot train: TypeError"),
    ("user_opts:not_an_optimizer", "returned int, not a GradientTransformation"),
    ("user_opts:raises", "RuntimeError: my update is broken (at "),
]


@pytest.fixture(scope="module")
def data():
    return workloads.load("image", None, pathlib.Path("."), progress=False)


@pytest.fixture(autouse=True)
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_opts.py").write_text(USER)
    monkeypatch.chdir(tmp_path)  # MODULE:FUNC is imported from the current directory
    yield
    sys.modules.pop("user_opts", None)


def _train(data, name, hyperparams, steps=engine.CHUNK):
    runs = [engine.Run(hyperparams, 0, steps)]
    with jax.numpy_dtype_promotion("standard"):  # optax mixes Python floats and int32 counts
        engine.probe(WL, data, name, hyperparams)
        (result,) = engine.run_group(WL, data, name, engine.groups(WL, data, name, runs)[0])
    return result


@pytest.mark.parametrize("name, hyperparams", OPTAX, ids=[n for n, _ in OPTAX])
def test_an_optax_optimizer_trains_in_the_engine(data, name, hyperparams):
    result = _train(data, name, hyperparams)
    assert not result["diverged"] and np.isfinite(result["final_loss"])


@pytest.mark.parametrize("name, message", REFUSED, ids=[n for n, _ in REFUSED])
def test_an_optimizer_that_cannot_run_is_refused_by_the_probe(data, name, message):
    with pytest.raises(UsageError, match=None) as e, jax.numpy_dtype_promotion("standard"):
        engine.probe(WL, data, name, {"learning_rate": 1e-3})
    assert message in str(e.value) and "\n" not in str(e.value)
    if name == "user_opts:raises":  # the user's file and line
        assert "user_opts.py:" in str(e.value)


def test_the_final_loss_is_taken_at_the_eval_params(data):
    result = _train(data, "user_opts:zeroed", {"learning_rate": 0.1}, 20)
    assert result["curve"][-1][1] < 2.2  # it trained, and is evaluated at zeros: ln(10)
    assert result["final_loss"] == pytest.approx(math.log(10), rel=1e-6)


def test_resolve_leaves_sys_path_as_it_was():
    before = list(sys.path)
    resolve("user_opts:constant")
    assert sys.path == before and "" not in sys.path[:1]


def test_errors_in_the_users_code_are_one_line_naming_file_and_line(tmp_path, capsys):
    (tmp_path / "broken.py").write_text("def make(learning_rate):\n    return (\n")
    out = tmp_path / "out"
    argv = ["audit", "--workload", "image", "--quick", "--optimizer", "broken:make"]
    assert cli([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "SyntaxError" in err[0] and "broken.py:" in err[0], err
    argv[-1] = "user_opts:raises"  # found by the probe, before any run trains
    assert cli([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "my update is broken" in err[0] and not out.exists(), err
    # both workloads (the default): the run folder is claimed with both data sets' fingerprints
    assert cli(["audit", "--optimizer", "user_opts:raises", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("frost: error")]  # past the progress bars
    assert errors == err[-1:] and "my update is broken" in err[-1] and not out.exists(), err


def _text(path, seed):
    words = np.random.default_rng(seed).choice(["alpha", "beta", "gamma", "delta", "ep"], 9000)
    path.write_text(" ".join(words) + "\n")
    return str(path)


def test_an_out_of_other_data_is_refused_and_run_files_are_keyed(tmp_path, monkeypatch):
    monkeypatch.setenv("FROST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(workloads, "CACHE", tmp_path / "cache" / "audit")
    monkeypatch.setattr(run.Audit, "workload", lambda self, wl, d, names: {})  # no training
    monkeypatch.setattr(run.report, "write", lambda out, *a: out / "report.md")
    a, b = _text(tmp_path / "a.txt", 0), _text(tmp_path / "b.txt", 1)
    cfg = AuditConfig(
        workload="gpt", optimizers="adamw", quick=True, data=a, out=str(tmp_path / "o")
    )
    run.audit(cfg, progress=False)
    run.audit(cfg, progress=False)  # the same audit again: continues
    pathlib.Path(b).write_text(pathlib.Path(a).read_text())
    run.audit(AuditConfig(**{**cfg.__dict__, "data": b}), progress=False)  # same content
    _text(tmp_path / "b.txt", 1)
    with pytest.raises(UsageError, match="was made with other settings"):
        run.audit(AuditConfig(**{**cfg.__dict__, "data": b}), progress=False)
    saved = json.loads((tmp_path / "o" / "config.json").read_text())
    assert saved["data"].startswith("gpt:") and a not in saved["data"]


def test_a_run_id_names_the_data_and_the_optimizers_source(data, tmp_path):
    r = engine.Run({"learning_rate": 1e-3}, 0, 20)
    first = run.run_id("image-s", data, "user_opts:constant", r)
    other = data._replace(fingerprint="0" * 16)
    assert run.run_id("image-s", other, "user_opts:constant", r) != first
    (tmp_path / "user_opts.py").write_text(USER + "\n# edited\n")
    assert run.run_id("image-s", data, "user_opts:constant", r) != first
