"""`frost plot RUN_DIR`: loss and accuracy curves from `metrics.jsonl` to `RUN_DIR/curves.png`;
for a `frost rl` run, each seed's episode return (as its returns.png)."""

import pathlib

from frost import atomic
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
    """Each seed's episode return against env steps, from a `frost rl` run's records, to `out`."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for seed in sorted({r["seed"] for r in records}):
        rows = [r for r in records if r["seed"] == seed]
        ax.plot([r["step"] for r in rows], [r["return"] for r in rows], label=f"seed {seed}")
    ax.set(xlabel="env steps", ylabel="episode return", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    return atomic.write_png(pathlib.Path(out), fig)
