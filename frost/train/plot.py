"""`frost plot RUN_DIR`: loss and accuracy curves from `metrics.jsonl` to `RUN_DIR/curves.png`;
for a `frost rl` run, each seed's episode return and their IQM with a 95% band (as its
returns.png)."""

import pathlib

import numpy as np

from frost import atomic, stats
from frost.config import UsageError, needs
from frost.train.metrics import read


def plot(run_dir, out=None) -> pathlib.Path:
    needs("matplotlib", "frost plot", "'frost[plot]'")
    from matplotlib.figure import Figure

    path = pathlib.Path(run_dir) / "metrics.jsonl"
    records = read(path)
    out = pathlib.Path(out) if out else pathlib.Path(run_dir) / "curves.png"
    if any("return" in r for r in records):  # a `frost rl` run: one record per seed per report
        return returns(records, out, str(run_dir))
    if not any(key in r for r in records for key in ("loss", "test_loss", "val_loss")):
        raise UsageError(f"{path}: no loss records to plot yet (a run logs one every 20 steps)")
    fig = Figure(figsize=(10, 4))
    ax_loss, ax_acc = fig.subplots(1, 2)
    # each curve where logged: test_ and val_ keys are what fit(eval_name=...) logged after
    # each epoch
    for ax, key, label in (
        (ax_loss, "loss", "train"),
        (ax_loss, "test_loss", "test"),
        (ax_loss, "val_loss", "validation"),
        (ax_acc, "accuracy", "train"),
        (ax_acc, "test_accuracy", "test"),
        (ax_acc, "val_accuracy", "validation"),
    ):
        rows = [r for r in records if key in r]
        if rows:
            style = "-" if label == "train" else "o-"
            ax.plot([r["step"] for r in rows], [r[key] for r in rows], style, label=label)
    for ax, name in ((ax_loss, "loss"), (ax_acc, "accuracy")):
        ax.set(xlabel="step", ylabel=name)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(str(run_dir))
    fig.tight_layout()
    return atomic.write_png(out, fig)


def returns(records, out, title: str) -> pathlib.Path:
    """Each seed's online episode return against env steps, from a `frost rl` run's records, to
    `out`; with several seeds, also their interquartile mean at each report with its 95%
    stratified-bootstrap interval as a band (frost.stats)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    seeds = sorted({r["seed"] for r in records})
    faint = dict(lw=0.8, alpha=0.4) if len(seeds) > 1 else {}
    for seed in seeds:
        rows = [r for r in records if r["seed"] == seed]
        ax.plot(
            [r["step"] for r in rows], [r["return"] for r in rows], label=f"seed {seed}", **faint
        )
    if len(seeds) > 1:
        steps, middle, low, high = _band(records, len(seeds))
        ax.plot(steps, middle, "k-", label=f"IQM of {len(seeds)} seeds")
        ax.fill_between(steps, low, high, color="k", alpha=0.15, label="95% interval")
    ax.set(xlabel="env steps", ylabel="episode return (online)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return atomic.write_png(pathlib.Path(out), fig)


def _band(records, seeds: int) -> tuple[list, list, list, list]:
    """(steps, IQM, low, high) over the seeds at each step every seed reported."""
    at = {}
    for r in records:
        at.setdefault(r["step"], []).append(r["return"])
    steps = sorted(step for step, values in at.items() if len(values) == seeds)
    middle, low, high = [], [], []
    for step in steps:
        scores = np.asarray(at[step], np.float64)[:, None]  # (seeds, 1 task)
        middle.append(float(stats.iqm(scores)))
        bounds = stats.interval(scores, stats.iqm, reps=2_000)  # a band to see, not to report
        low.append(bounds[0])
        high.append(bounds[1])
    return steps, middle, low, high
