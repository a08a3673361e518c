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


def _over(a, b) -> str:
    """Speedup interval a's centre over b's (`1.52x`); a bound (`>1.52x`) when a side of either
    is open the way that bounds the ratio, n/a when both ways are."""
    if a is None or b is None:
        return "n/a"
    up, down = a.open_high or b.open_low, a.open_low or b.open_high
    return "n/a" if up and down else f"{'>' if up else '<' if down else ''}{a.mean / b.mean:.2f}x"


def _interval(s) -> str:
    """`1.52x [1.31, 1.77]`; a side past AdamW's budgets is a bound (`<0.50`), and so is the
    centre then (`<0.48x`): never a point."""
    if s is None:
        return "n/a"
    lt = "<" if s.open_low else ""
    gt = ">" if s.open_high else ""
    centre = "?" if lt and gt else lt + gt
    return f"{centre}{s.mean:.2f}x [{lt}{s.low:.2f}, {gt}{s.high:.2f}]"


def _hp(h) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in h.items()) if h else "all diverged"


def _every(res) -> list[dict]:
    """Every run of a workload's results: tuning, reruns, AdamW's budgets, the paper baseline."""
    groups = [*res["tuning"].values(), *res["finals"].values(), *res["curve"].values()]
    return sum(groups, []) + res["baseline"]


def summarise(res) -> dict:
    """Per optimizer (and the paper baseline): loss mean and CI, stability, LR range, speedups.
    Seconds per step: the geometric mean over an optimizer's batches (they share one program)."""
    steps, finals = res["steps"], res["finals"]
    ladders = {}  # {seed: {budget: tuned AdamW's final loss}}: each seed's own ladder
    for budget, runs in res["curve"].items():
        for r in runs:
            if not r["diverged"]:
                ladders.setdefault(r["seed"], {})[budget] = r["final_loss"]
    reference = [r["final_loss"] for r in finals.get("adamw", []) if not r["diverged"]]
    # AdamW's runs at the optimizers' budget, for the cost per step (which a run's fixed costs
    # raise at shorter budgets): its grid, reruns and the baseline
    adamw = [r for r in _every(res) if r["optimizer"] == "adamw" and r["steps"] == steps]

    def row(runs, timed, tuning=None, hp=None):
        losses = [r["final_loss"] for r in runs if not r["diverged"]]
        mean, ci = protocol.mean_ci(losses)
        reaches = []  # per fresh seed: AdamW's steps to this seed's loss on its own ladder
        for r in runs:
            if not r["diverged"] and r["seed"] in ladders:
                ladder = ladders[r["seed"]]
                reaches.append(
                    protocol.steps_to_reach(list(ladder), list(ladder.values()), r["final_loss"])
                )
        s = protocol.speedup_interval(reaches, steps) if reaches else None
        # log seconds per step of each batch (its runs share them): AdamW's, the optimizer's
        logs = [np.log(list({r["seconds"] / r["steps"] for r in rs})) for rs in (adamw, timed)]
        cost, half, wall = logs[0].mean() - logs[1].mean(), 0.0, None  # log cost ratio, ±
        if timed is not adamw and min(map(len, logs)) > 1:
            cost, half, _ = protocol.welch(*logs)
        if s:  # the step interval and the cost ratio's, combined in quadrature (log scale)
            h = math.hypot(math.log(s.high / s.mean), half)
            at = s.mean * math.exp(cost)
            wall = s._replace(mean=at, low=at / math.exp(h), high=at * math.exp(h))
        welch = protocol.welch(losses, reference) if min(len(losses), len(reference)) > 1 else None
        return {
            "interval": s,
            "wall_interval": wall,
            "welch": welch,
            "hp": hp,
            "mean": mean,
            "ci": ci,
            "n": len(losses),
            "of": len(runs),
            "stable": tuning and protocol.stable_fraction(tuning),
            "range": tuning and protocol.lr_range(tuning),
        }

    rows = {}
    for n, runs in res["tuning"].items():
        timed = adamw if n == "adamw" else runs + finals.get(n, [])
        hp = (res["best"][n] or {}).get("hyperparams")
        rows[n] = row(finals.get(n, []), timed, runs, hp)
    rows[BASE] = row(res["baseline"], adamw, hp=protocol.BASELINE[res["kind"]])
    return rows


def _table(rows) -> list[str]:
    out = [
        "| optimizer | best hyper-parameters | final loss (mean ± 95% CI) | stable | LR range | "
        "step speedup [95%] | wall-clock speedup [95%] | vs paper baseline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        loss = f"diverged ({r['of']})"
        if r["n"]:
            loss = f"{r['mean']:.4f} ± {r['ci']:.4f} (n={r['n']}/{r['of']})"
        stable = "" if r["stable"] is None else f"{r['stable']:.0%}"
        width = (
            "" if r["range"] is None else "n/a" if math.isnan(r["range"]) else f"{r['range']:.0f}x"
        )
        out.append(
            f"| {name} | {_hp(r['hp'])} | {loss} | {stable} | {width} | "
            f"{_interval(r['interval'])} | {_interval(r['wall_interval'])} | "
            f"{_over(r['interval'], rows[BASE]['interval'])} |"
        )
    return out


def _findings(res, rows) -> list[str]:
    """Plain-words findings for one workload."""
    a, base, lines = rows["adamw"], rows[BASE], []
    for n, r in rows.items():
        if n in ("adamw", BASE):
            continue
        if not r["n"]:
            lines.append(
                f"- **{n}** did not train stably: every "
                f"{'trial of its grid' if res['best'][n] is None else 'rerun of its best trial'} "
                "diverged."
            )
            continue
        loss = f"its final loss is {r['mean']:.4f} (tuned AdamW's {a['mean']:.4f})"
        if r["welch"] is not None:
            d, half, p = r["welch"]
            loss = (
                f"its final loss differs from tuned AdamW's by {d:+.4f} ± {half:.4f} "
                f"(Welch p = {p:.2g})"
            )
        claim = f" Claimed: {CLAIMS[n]}." if n in CLAIMS else ""
        lines.append(
            f"- **{n}**: step speedup {_interval(r['interval'])}, "
            f"{protocol.words(r['interval']) if r['interval'] else 'not measured'} (wall-clock "
            f"{_interval(r['wall_interval'])}, its own cost included); {loss}.{claim} "
            + (
                f"Against the untuned paper baseline it would look {vs} as fast."
                if (vs := _over(r["interval"], base["interval"])) != "n/a"
                else "Its ratio to the untuned paper baseline is not measured: an interval is "
                "missing, or their open sides leave the ratio unbounded both ways."
            )
        )
        lrs = [h["learning_rate"] for h in res["trials"][n]]
        if r["hp"]["learning_rate"] in (min(lrs), max(lrs)):
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
        for n in [n for n in summaries[sizes[0]] if n not in ("adamw", BASE)]:
            spans = [summaries[w][n]["interval"] for w in sizes]
            if None in spans:
                continue
            a, b = spans[0], spans[-1]
            if len(spans) > 2 and not any(s.open_low or s.open_high for s in spans):
                slope, half = protocol.trend([results[w][1]["params"] for w in sizes], spans)
                way = "rises" if slope > half else "falls" if slope < -half else None
                trend = f"{way} with scale" if way else "is inconclusive at this scale"
                trend += f" (slope of log speedup on log parameters {slope:+.3f} ± {half:.3f})"
            elif a.high < b.low and not (a.open_high or b.open_low):
                trend = "rises with scale"
            elif b.high < a.low and not (b.open_high or a.open_low):
                trend = "falls with scale"
            else:
                trend = "is inconclusive at this scale (the intervals overlap)"
            at = ", ".join(f"{_interval(s)} at {w}" for s, w in zip(spans, sizes))
            lines.append(f"- **{n}** on {kind}: step speedup {at}: it {trend}.")
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
        for n, row in summaries[name].items():
            if n not in ("adamw", BASE) and row["interval"] is not None:
                points.setdefault(f"{n} ({wl.kind})", []).append((res["params"], row["interval"]))
    fig = Figure(figsize=(5, 4))
    ax = fig.subplots()
    for label, line in points.items():
        x, spans = zip(*line)
        mean = np.array([s.mean for s in spans])
        spread = [mean - [s.low for s in spans], [s.high for s in spans] - mean]
        ax.errorbar(x, mean, yerr=spread, fmt="o-", capsize=3, label=label)
    ax.axhline(1, color="grey", linewidth=0.8, label="tuned AdamW")
    ax.set(xscale="log", yscale="log", xlabel="parameters", ylabel="step speedup over tuned AdamW")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    atomic.write_png(out / "scale.png", fig)


def _curves(ax, res):
    for n, runs in [*res["finals"].items(), (BASE, res["baseline"])]:
        if ok := [[v for _, v in r["curve"]] for r in runs if not r["diverged"]]:
            steps, style = [s for s, _ in runs[0]["curve"]], "--" if n == BASE else "-"
            color = ax.plot(steps, np.mean(ok, 0), style, label=n)[0].get_color()
            ax.fill_between(steps, np.min(ok, 0), np.max(ok, 0), color=color, alpha=0.2)
    ax.set(xlabel="step", ylabel="training loss (mean over fresh seeds; band: their range)")


def _sensitivity(ax, res):
    for n, runs in res["tuning"].items():
        lrs, best = zip(*protocol.best_by_lr(runs).items())
        color = ax.plot(lrs, best, "o-", label=n)[0].get_color()
        gone = [lr for lr, b in zip(lrs, best) if np.isnan(b)]
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
    model, flags = (re.search(rf"^{k}\s*: (.*)$", info, re.M) for k in ("model name", "flags"))
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
    rows, summary = [], []
    table = [
        "## Verdicts\n",
        "| claim | workload | claimed | measured speedup [95% interval] | verdict |",
        "|---|---|---|---|---|",
    ]
    for workload, optimizers in summaries.items():
        for n, r in optimizers.items():
            s = r["interval"]
            summary.append(
                {
                    "optimizer": n,
                    "workload": workload,
                    "final_loss": r["mean"] if r["n"] else None,
                    "final_loss_low": r["mean"] - r["ci"] if r["n"] > 1 else None,
                    "final_loss_high": r["mean"] + r["ci"] if r["n"] > 1 else None,
                    "speedup": s and s.mean,
                    "speedup_low": s and s.low,
                    "speedup_high": s and s.high,
                    "stable": r["stable"],
                }
            )
            if n in claims:
                rows.append(
                    {
                        "optimizer": n,
                        "workload": workload,
                        "claimed": claims[n],
                        "speedup": s and s.mean,
                        "low": s and s.low,
                        "high": s and s.high,
                        "verdict": protocol.verdict(s, claims[n]) if s else "inconclusive",
                    }
                )
                table.append(
                    f"| {n} {claims[n]:g}x | {workload} | {claims[n]:g}x | {_interval(s)} | "
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
        for r in _every(res):
            # a run file's record less its curve, once per (workload, optimizer, hp, seed, steps)
            runs.setdefault(run_key(r), {k: v for k, v in r.items() if k != "curve"})
    summaries = {name: summarise({**res, "kind": wl.kind}) for name, (wl, res) in results.items()}
    claims, summary, verdicts = _verdicts(summaries, cfg.claims)
    made = provenance(data)
    saved = {"runs": list(runs.values()), "claims": claims, "summary": summary, "provenance": made}
    atomic.write(out / "results.json", json.dumps(saved, indent=1))
    first_wl, first = next(iter(results.values()))
    seconds = sum(r["seconds"] for r in runs.values())
    rules = protocol.__doc__.split("\n\n", 2)[2].format(
        trials=len(first["trials"]["adamw"]),
        seeds=max(r["seed"] for r in first["baseline"]),
        batch=batch,
        tolerance=protocol.TOLERANCE,
        budgets=", ".join(f"{b / first['steps']:.3g}" for b in sorted(first["curve"])),
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
    for n, trials in first["trials"].items():
        lrs = sorted({t["learning_rate"] for t in trials})
        other = "; ".join(
            f"{k} {sorted({t[k] for t in trials})}" for k in trials[0] if k != "learning_rate"
        )
        text.append(f"| {n} | {len(lrs)}: {lrs[0]:g} ... {lrs[-1]:g} | {other} |")
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
