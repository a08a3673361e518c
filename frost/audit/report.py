"""The audit's outputs, made from the runs alone (so a resumed audit writes the same files):
OUT/results.json (every run), OUT/report.md (protocol, grid, a table and findings per workload),
OUT/scale.png (step speedup against parameters), OUT/curves.png (each optimizer's best
configuration, mean and range over the fresh seeds) and OUT/lr.png
(final loss against learning rate: the sensitivity curve).
"""

import hashlib
import importlib.metadata
import json
import math
import os
import pathlib
import re
import subprocess

import jax
import numpy as np

from frost import atomic
from frost.audit import protocol

CLAIMS = {
    "sophia": "2x fewer steps than Adam (Liu et al. 2023)",
    "muon": "about 2x the compute efficiency of AdamW (Liu et al. 2025, Moonlight)",
}
BASE = "paper baseline"
KEY = ("workload", "optimizer", "hyperparams", "seed", "steps")  # a run's identity


def _over(interval, against) -> str:
    """Speedup `interval`'s centre over `against`'s (`1.52x`); a bound (`>1.52x`) when a side of
    either is open the way that bounds the ratio, n/a when both ways are."""
    if interval is None or against is None:
        return "n/a"
    up = interval.open_high or against.open_low  # the ratio may be larger
    down = interval.open_low or against.open_high  # it may be smaller
    if up and down:
        return "n/a"
    bound = ">" if up else "<" if down else ""
    return f"{bound}{interval.mean / against.mean:.2f}x"


def _interval(interval) -> str:
    """`1.52x [1.31, 1.77]`; a side past AdamW's budgets is a bound (`<0.50`), and so is the
    centre then (`<0.48x`): never a point."""
    if interval is None:
        return "n/a"
    lt = "<" if interval.open_low else ""
    gt = ">" if interval.open_high else ""
    centre = "?" if lt and gt else lt + gt
    return f"{centre}{interval.mean:.2f}x [{lt}{interval.low:.2f}, {gt}{interval.high:.2f}]"


def _hp(hyperparams) -> str:
    if not hyperparams:
        return "all diverged"
    return ", ".join(f"{name} {value:g}" for name, value in hyperparams.items())


def _every(res) -> list[dict]:
    """Every run of a workload's results: tuning, reruns, AdamW's budgets, the paper baseline."""
    groups = [*res["tuning"].values(), *res["finals"].values(), *res["curve"].values()]
    return sum(groups, []) + res["baseline"]


def summarise(res) -> dict:
    """Per optimizer (and the paper baseline): loss mean and CI, stability, LR range, speedups.
    Seconds per step: the geometric mean over an optimizer's batches (they share one program)."""
    steps = res["steps"]
    finals = res["finals"]
    ladders = {}  # {seed: {budget: tuned AdamW's final loss}}: each seed's own ladder
    for budget, runs in res["curve"].items():
        for run in runs:
            if not run["diverged"]:
                ladders.setdefault(run["seed"], {})[budget] = run["final_loss"]
    reference = [run["final_loss"] for run in finals.get("adamw", []) if not run["diverged"]]
    # AdamW's runs at the optimizers' budget, for the cost per step (which a run's fixed costs
    # raise at shorter budgets): its grid, reruns and the baseline
    adamw = [run for run in _every(res) if run["optimizer"] == "adamw" and run["steps"] == steps]

    def row(runs, timed, tuning=None, hp=None):
        losses = [run["final_loss"] for run in runs if not run["diverged"]]
        mean, ci = protocol.mean_ci(losses)
        reaches = []  # per fresh seed: AdamW's steps to this seed's loss on its own ladder
        for run in runs:
            if not run["diverged"] and run["seed"] in ladders:
                ladder = ladders[run["seed"]]
                reaches.append(
                    protocol.steps_to_reach(list(ladder), list(ladder.values()), run["final_loss"])
                )
        step = protocol.speedup_interval(reaches, steps) if reaches else None
        # log seconds per step of each batch (its runs share them): AdamW's, the optimizer's
        logs = [
            np.log(list({run["seconds"] / run["steps"] for run in batch_runs}))
            for batch_runs in (adamw, timed)
        ]
        cost = logs[0].mean() - logs[1].mean()  # log of the cost ratio, AdamW's over this one's
        half = 0.0  # its 95% half-width: 0 for AdamW itself, and with one batch on a side
        if timed is not adamw and min(map(len, logs)) > 1:
            cost, half, _ = protocol.welch(*logs)
        wall = None
        if step is not None:  # the step interval and the cost ratio's, in quadrature (log scale)
            spread = math.hypot(math.log(step.high / step.mean), half)
            centre = step.mean * math.exp(cost)
            wall = step._replace(
                mean=centre, low=centre / math.exp(spread), high=centre * math.exp(spread)
            )
        welch = None
        if min(len(losses), len(reference)) > 1:
            welch = protocol.welch(losses, reference)
        return {
            "interval": step,
            "wall_interval": wall,
            "welch": welch,
            "hp": hp,
            "mean": mean,
            "ci": ci,
            "n": len(losses),
            "of": len(runs),
            "stable": protocol.stable_fraction(tuning) if tuning else None,
            "range": protocol.lr_range(tuning) if tuning else None,
        }

    rows = {}
    for name, runs in res["tuning"].items():
        timed = adamw if name == "adamw" else runs + finals.get(name, [])
        hp = (res["best"][name] or {}).get("hyperparams")
        rows[name] = row(finals.get(name, []), timed, runs, hp)
    rows[BASE] = row(res["baseline"], adamw, hp=protocol.BASELINE[res["kind"]])
    return rows


def _table(rows) -> list[str]:
    out = [
        "| optimizer | best hyper-parameters | final loss (mean ± 95% CI) | stable | LR range | "
        "step speedup [95%] | wall-clock speedup [95%] | vs paper baseline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        loss = f"diverged ({row['of']})"
        if row["n"]:
            loss = f"{row['mean']:.4f} ± {row['ci']:.4f} (n={row['n']}/{row['of']})"
        stable = "" if row["stable"] is None else f"{row['stable']:.0%}"
        width = ""  # the LR range: none for the baseline, n/a when every trial diverged
        if row["range"] is not None:
            width = "n/a" if math.isnan(row["range"]) else f"{row['range']:.0f}x"
        out.append(
            f"| {name} | {_hp(row['hp'])} | {loss} | {stable} | {width} | "
            f"{_interval(row['interval'])} | {_interval(row['wall_interval'])} | "
            f"{_over(row['interval'], rows[BASE]['interval'])} |"
        )
    return out


def _findings(res, rows) -> list[str]:
    """Plain-words findings for one workload."""
    adamw = rows["adamw"]
    base = rows[BASE]
    lines = []
    for name, row in rows.items():
        if name in ("adamw", BASE):
            continue
        if not row["n"]:
            which = "trial of its grid" if res["best"][name] is None else "rerun of its best trial"
            lines.append(f"- **{name}** did not train stably: every {which} diverged.")
            continue
        if row["welch"] is None:
            loss = f"its final loss is {row['mean']:.4f} (tuned AdamW's {adamw['mean']:.4f})"
        else:
            difference, half, p_value = row["welch"]
            loss = (
                f"its final loss differs from tuned AdamW's by {difference:+.4f} ± {half:.4f} "
                f"(Welch p = {p_value:.2g})"
            )
        claim = f" Claimed: {CLAIMS[name]}." if name in CLAIMS else ""
        words = protocol.words(row["interval"]) if row["interval"] else "not measured"
        against_base = _over(row["interval"], base["interval"])
        if against_base != "n/a":
            baseline = f"Against the untuned paper baseline it would look {against_base} as fast."
        else:
            baseline = (
                "Its ratio to the untuned paper baseline is not measured: an interval is "
                "missing, or their open sides leave the ratio unbounded both ways."
            )
        lines.append(
            f"- **{name}**: step speedup {_interval(row['interval'])}, {words} (wall-clock "
            f"{_interval(row['wall_interval'])}, its own cost included); {loss}.{claim} " + baseline
        )
        lrs = [trial["learning_rate"] for trial in res["trials"][name]]
        if row["hp"]["learning_rate"] in (min(lrs), max(lrs)):
            lines[-1] += (
                " Its best learning rate is at the edge of its grid: a wider grid may find a "
                "better one."
            )
    lines.append(
        f"- The **paper baseline** (AdamW, {_hp(base['hp'])}, untuned) ends at {base['mean']:.4f}: "
        f"tuned AdamW is {_over(protocol.Interval(1.0, 1.0, 1.0), base['interval'])} as fast, so "
        "that much of a gain claimed against such a baseline comes from the baseline."
    )
    return lines


def _scale(results, summaries) -> list[str]:
    """How each optimizer's step speedup moves along a kind's sizes (gpt-s and gpt-m, or the
    --sizes ladder), smallest to largest: a trend only when the slope's interval excludes 0 (3
    sizes or more, no open side), else when the two ends' intervals do not overlap."""
    lines = []
    for kind in ("gpt", "image"):
        sizes = [name for name, (wl, _) in results.items() if wl.kind == kind]
        if len(sizes) < 2:
            continue
        for name in [name for name in summaries[sizes[0]] if name not in ("adamw", BASE)]:
            spans = [summaries[size][name]["interval"] for size in sizes]
            if None in spans:
                continue
            smallest = spans[0]
            largest = spans[-1]
            if len(spans) > 2 and not any(span.open_low or span.open_high for span in spans):
                params = [results[size][1]["params"] for size in sizes]
                slope, half = protocol.trend(params, spans)
                way = "rises" if slope > half else "falls" if slope < -half else None
                trend = f"{way} with scale" if way else "is inconclusive at this scale"
                trend += f" (slope of log speedup on log parameters {slope:+.3f} ± {half:.3f})"
            elif smallest.high < largest.low and not (smallest.open_high or largest.open_low):
                trend = "rises with scale"
            elif largest.high < smallest.low and not (largest.open_high or smallest.open_low):
                trend = "falls with scale"
            else:
                trend = "is inconclusive at this scale (the intervals overlap)"
            at = ", ".join(f"{_interval(span)} at {size}" for span, size in zip(spans, sizes))
            lines.append(f"- **{name}** on {kind}: step speedup {at}: it {trend}.")
    return lines or ["- Only one width per workload was audited."]


def _plots(out, results, summaries):
    from matplotlib.figure import Figure

    for file, draw in (("curves.png", _curves), ("lr.png", _sensitivity)):
        fig = Figure(figsize=(5 * len(results), 4))
        for ax, (name, (wl, res)) in zip(
            fig.subplots(1, len(results), squeeze=False)[0], results.items()
        ):
            draw(ax, res)
            ax.set_title(f"{name}: {wl.describe(res['steps'])}", fontsize=7)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        atomic.write_png(out / file, fig)
    # step speedup [95%] against parameters, per optimizer and kind (Wen et al.'s Figure 1)
    points = {}  # {"lion (gpt)": [(parameters, Interval)]}
    for name, (wl, res) in results.items():
        for optimizer, row in summaries[name].items():
            if optimizer not in ("adamw", BASE) and row["interval"] is not None:
                point = (res["params"], row["interval"])
                points.setdefault(f"{optimizer} ({wl.kind})", []).append(point)
    fig = Figure(figsize=(5, 4))
    ax = fig.subplots()
    for label, line in points.items():
        params, spans = zip(*line)
        mean = np.array([span.mean for span in spans])
        spread = [mean - [span.low for span in spans], [span.high for span in spans] - mean]
        ax.errorbar(params, mean, yerr=spread, fmt="o-", capsize=3, label=label)
    ax.axhline(1, color="grey", linewidth=0.8, label="tuned AdamW")
    ax.set(xscale="log", yscale="log", xlabel="parameters", ylabel="step speedup over tuned AdamW")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    atomic.write_png(out / "scale.png", fig)


def _curves(ax, res):
    for name, runs in [*res["finals"].items(), (BASE, res["baseline"])]:
        # the loss curves of the runs that did not diverge
        curves = [[loss for _, loss in run["curve"]] for run in runs if not run["diverged"]]
        if curves:
            steps = [step for step, _ in runs[0]["curve"]]
            style = "--" if name == BASE else "-"
            color = ax.plot(steps, np.mean(curves, 0), style, label=name)[0].get_color()
            ax.fill_between(steps, np.min(curves, 0), np.max(curves, 0), color=color, alpha=0.2)
    ax.set(xlabel="step", ylabel="training loss (mean over fresh seeds; band: their range)")


def _sensitivity(ax, res):
    for name, runs in res["tuning"].items():
        lrs, best = zip(*protocol.best_by_lr(runs).items())
        color = ax.plot(lrs, best, "o-", label=name)[0].get_color()
        gone = [lr for lr, loss in zip(lrs, best) if np.isnan(loss)]
        ax.plot(gone, [np.nanmax(best)] * len(gone), "x", color=color, markersize=9)
    ax.set(
        xscale="log",
        xlabel="peak learning rate (x: every trial diverged)",
        ylabel="final loss (best over the other hyper-parameters)",
    )


def _host() -> str | None:
    """The CPU's model and a digest of its feature flags: XLA compiles CPU programs for the host's
    instruction set, so another CPU may change the last bits."""
    try:
        info = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux
        return None
    model, flags = (
        re.search(rf"^{name}\s*: (.*)$", info, re.M) for name in ("model name", "flags")
    )
    digest = hashlib.sha1((flags[1] if flags else "").encode()).hexdigest()[:8]
    return f"{model[1] if model else '?'}, flags {digest}"


def provenance(data: str) -> dict:
    """What determines the numbers besides the options: code, versions, devices, data."""
    import frost

    root = pathlib.Path(frost.__file__).parent.parent
    git = ["git", "-C", str(root)]
    try:
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "frost"], capture_output=True)
    except OSError:  # no git
        commit = dirty = None
    known = commit is not None and commit.returncode == 0
    return {
        "frost": importlib.metadata.version("frost"),
        "commit": commit.stdout.strip() if known else None,
        "dirty": bool(dirty.stdout) if known else None,
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "devices": f"{jax.device_count()} x {jax.devices()[0].device_kind}",
        "host": _host(),
        "data": data,
        "protocol": protocol.VERSION,
    }


def _verdicts(summaries, claims) -> tuple[list, list, list]:
    """results.json's "claims" and "summary" rows, and report.md's verdict table."""
    rows = []
    summary = []
    table = [
        "## Verdicts\n",
        "| claim | workload | claimed | measured speedup [95% interval] | verdict |",
        "|---|---|---|---|---|",
    ]
    for workload, optimizers in summaries.items():
        for name, row in optimizers.items():
            step = row["interval"]  # the step speedup (None: not measured)
            summary.append(
                {
                    "optimizer": name,
                    "workload": workload,
                    "final_loss": row["mean"] if row["n"] else None,
                    "final_loss_low": row["mean"] - row["ci"] if row["n"] > 1 else None,
                    "final_loss_high": row["mean"] + row["ci"] if row["n"] > 1 else None,
                    "speedup": step.mean if step else None,
                    "speedup_low": step.low if step else None,
                    "speedup_high": step.high if step else None,
                    "stable": row["stable"],
                }
            )
            if name in claims:
                claimed = claims[name]
                rows.append(
                    {
                        "optimizer": name,
                        "workload": workload,
                        "claimed": claimed,
                        "speedup": step.mean if step else None,
                        "low": step.low if step else None,
                        "high": step.high if step else None,
                        "verdict": protocol.verdict(step, claimed) if step else "inconclusive",
                    }
                )
                table.append(
                    f"| {name} {claimed:g}x | {workload} | {claimed:g}x | {_interval(step)} | "
                    f"{rows[-1]['verdict']} |"
                )
    return rows, summary, [*table, ""] if rows else []


def run_key(record: dict) -> str:
    """A run's identity across an audit's runs (results.json holds one record of each)."""
    return json.dumps([record[k] for k in KEY], sort_keys=True)


def write(out, results, cfg, command, data: str = "", batch: int = 3):
    """Write results.json, report.md and the plots; `results` is {workload: (Workload,
    run.Audit.workload())}; `data` the data's fingerprints, for the provenance; `batch` the runs
    trained together."""
    runs = {}
    for _, res in results.values():
        for run in _every(res):
            # a run file's record less its curve, once per (workload, optimizer, hp, seed, steps)
            runs.setdefault(run_key(run), {k: v for k, v in run.items() if k != "curve"})
    summaries = {name: summarise({**res, "kind": wl.kind}) for name, (wl, res) in results.items()}
    claims, summary, verdicts = _verdicts(summaries, cfg.claims)
    made = provenance(data)
    saved = {"runs": list(runs.values()), "claims": claims, "summary": summary, "provenance": made}
    atomic.write(out / "results.json", json.dumps(saved, indent=1))
    first_wl, first = next(iter(results.values()))
    seconds = sum(run["seconds"] for run in runs.values())
    rules = protocol.__doc__.split("\n\n", 2)[2].format(
        trials=len(first["trials"]["adamw"]),
        seeds=max(run["seed"] for run in first["baseline"]),
        batch=batch,
        tolerance=protocol.TOLERANCE,
        budgets=", ".join(f"{budget / first['steps']:.3g}" for budget in sorted(first["curve"])),
    )
    text = [
        f"# Optimizer audit\n\n`{command}`: {len(runs)} runs, {seconds / 60:.1f} minutes of "
        "training (compilation not counted).\n",
        *verdicts,
        "## Provenance\n",
        ", ".join(f"{k}: `{v}`" for k, v in made.items()) + "\n",
        "## Protocol\n",
        rules,
        f"## Grid ({first_wl.name}; every workload scales the learning "
        "rates by its AdamW centre: "
        + ", ".join(f"{wl.name} {wl.lr:g}" for wl, _ in results.values())
        + ")\n",
        "| optimizer | learning rates | other |",
        "|---|---|---|",
    ]
    for name, trials in first["trials"].items():
        lrs = sorted({trial["learning_rate"] for trial in trials})
        other = "; ".join(
            f"{axis} {sorted({trial[axis] for trial in trials})}"
            for axis in trials[0]
            if axis != "learning_rate"
        )
        text.append(f"| {name} | {len(lrs)}: {lrs[0]:g} ... {lrs[-1]:g} | {other} |")
    for name, (wl, res) in results.items():
        text += [
            f"\n## {name}: {wl.describe(res['steps'])}\n",
            *_table(summaries[name]),
            "",
            *_findings(res, summaries[name]),
        ]
    text += [
        "\n## Scale\n",
        *_scale(results, summaries),
        "\n![step speedup against model size](scale.png)\n\n![loss curves of the best "
        "configurations](curves.png)\n\n![final loss against learning rate](lr.png)",
    ]
    _plots(out, results, summaries)
    return atomic.write(out / "report.md", "\n".join(text) + "\n")
