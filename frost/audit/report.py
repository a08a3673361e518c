"""The audit's outputs, made from the runs alone (so a resumed audit writes the same files):
OUT/results.json (every run), OUT/report.md (protocol, grid, a table and findings per workload),
OUT/curves.png (each optimizer's best configuration, mean over the fresh seeds) and OUT/lr.png
(final loss against learning rate: the sensitivity curve).
"""

import json
import math

import numpy as np

from frost import atomic
from frost.audit import protocol

KEYS = (
    "workload",
    "optimizer",
    "hyperparams",
    "seed",
    "final_loss",
    "diverged",
    "diverged_step",
    "steps",
    "seconds",
)
CLAIMS = {
    "sophia": "2x fewer steps than Adam (Liu et al. 2023)",
    "muon": "about 2x the compute efficiency of AdamW (Liu et al. 2025, Moonlight)",
}
BASE = "paper baseline"


def _speed(x) -> str:
    value, bound = x
    return (
        "n/a"
        if bound == "?" or not math.isfinite(value)
        else f"{'' if bound == '=' else bound}{value:.2f}x"
    )


def _ratio(a, b):
    """(value, bound) / (value, bound), with the bound that follows."""
    kinds = {a[1], {"<": ">", ">": "<", "=": "=", "?": "?"}[b[1]]} - {"="}
    return a[0] / b[0], "=" if not kinds else kinds.pop() if len(kinds) == 1 else "?"


def _hp(h) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in h.items()) if h else "all diverged"


def summarise(res) -> dict:
    """Per optimizer (and the paper baseline): loss mean and CI, stability, LR range, speedups.
    Seconds per step are the median over all of an optimizer's runs (they share one program)."""
    steps, finals = res["steps"], res["finals"]
    curve = {
        b: np.mean(ok)
        for b, runs in res["curve"].items()
        if (ok := [r["final_loss"] for r in runs if not r["diverged"]])
    }
    adamw = [
        *res["tuning"]["adamw"],
        *finals.get("adamw", []),
        *sum(res["curve"].values(), []),
        *res["baseline"],
    ]

    def row(runs, timed, tuning=None, hp=None):
        losses = [r["final_loss"] for r in runs if not r["diverged"]]
        mean, ci = protocol.mean_ci(losses)
        reach = (
            protocol.steps_to_reach(list(curve), list(curve.values()), mean)
            if curve and losses
            else (math.nan, "?")
        )
        per_step = [np.median([r["seconds"] / r["steps"] for r in rs]) for rs in (adamw, timed)]
        return {
            "hp": hp,
            "mean": mean,
            "ci": ci,
            "n": len(losses),
            "of": len(runs),
            "speed": (reach[0] / steps, reach[1]),
            "wall": (reach[0] / steps * per_step[0] / per_step[1], reach[1]),
            "stable": tuning and protocol.stable_fraction(tuning),
            "range": tuning and protocol.lr_range(tuning),
        }

    rows = {
        n: row(
            finals.get(n, []),
            adamw if n == "adamw" else runs + finals.get(n, []),
            runs,
            (res["best"][n] or {}).get("hyperparams"),
        )
        for n, runs in res["tuning"].items()
    }
    rows[BASE] = row(res["baseline"], adamw, hp=protocol.BASELINE[res["kind"]])
    for r in rows.values():
        r["vs"] = _ratio(r["speed"], rows[BASE]["speed"])
    return rows


def _table(rows) -> list[str]:
    out = [
        "| optimizer | best hyper-parameters | final loss (mean ± 95% CI) | stable | LR range | "
        "step speedup | wall-clock speedup | vs paper baseline |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        loss = (
            f"{r['mean']:.4f} ± {r['ci']:.4f} (n={r['n']}/{r['of']})"
            if r["n"]
            else f"diverged ({r['of']})"
        )
        stable = "" if r["stable"] is None else f"{r['stable']:.0%}"
        width = (
            "" if r["range"] is None else "n/a" if math.isnan(r["range"]) else f"{r['range']:.0f}x"
        )
        out.append(
            f"| {name} | {_hp(r['hp'])} | {loss} | {stable} | {width} | {_speed(r['speed'])} | "
            f"{_speed(r['wall'])} | {_speed(r['vs'])} |"
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
        # the CIs overlap
        noise = abs(r["mean"] - a["mean"]) <= np.nan_to_num(r["ci"]) + np.nan_to_num(a["ci"])
        verdict = (
            "within seed noise of"
            if noise
            else "better than"
            if r["mean"] < a["mean"]
            else "worse than"
        )
        here = (
            "not seen here"
            if r["speed"][0] <= 1 or verdict == "worse than"
            else f"here {_speed(r['speed'])}" + (", within seed noise" if noise else "")
        )
        claim = f" Claimed: {CLAIMS[n]}; {here}." if n in CLAIMS else ""
        lrs = [h["learning_rate"] for h in res["trials"][n]]
        edge = (
            " Its best learning rate is at the edge of its grid: a wider grid may find a better "
            "one."
            if res["best"][n]["hyperparams"]["learning_rate"] in (min(lrs), max(lrs))
            else ""
        )
        lines.append(
            f"- **{n}**: step speedup {_speed(r['speed'])} over tuned AdamW (wall-clock "
            f"{_speed(r['wall'])}, its own cost included); its final loss {r['mean']:.4f} is "
            f"{verdict} tuned AdamW's ({a['mean']:.4f}).{claim} "
            + (
                f"Against the untuned paper baseline it would look {_speed(r['vs'])} as fast."
                if _speed(r["vs"]) != "n/a"
                else "Its ratio to the untuned paper baseline is not measured: "
                "both end above tuned AdamW's loss at its shortest budget."
            )
            + edge
        )
    lines.append(
        f"- The **paper baseline** (AdamW, {_hp(base['hp'])}, untuned) ends at {base['mean']:.4f}: "
        f"tuned AdamW is {_speed(_ratio((1.0, '='), base['speed']))} as fast, so that much of a "
        "gain claimed against such a baseline comes from the baseline."
    )
    return lines


def _scale(summaries) -> list[str]:
    """How each optimizer's step speedup moves from the smaller width to the larger."""
    lines = []
    for kind in ("gpt", "image"):
        small, large = summaries.get(f"{kind}-s", {}), summaries.get(f"{kind}-m", {})
        for n in [n for n in small if n in large and n not in ("adamw", BASE)]:
            (a, x), (b, y) = small[n]["speed"], large[n]["speed"]
            trend = (
                "?"
                if "?" in (x, y)
                else "rises"
                if b > a * 1.05
                else "falls"
                if b < a / 1.05
                else "holds"
            )
            lines.append(
                f"- **{n}** on {kind}: step speedup {_speed((a, x))} at {kind}-s, {_speed((b, y))} "
                f"at {kind}-m: it {trend} with scale."
            )
    return lines or ["- Only one width per workload was audited."]


def _plots(out, results):
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


def _curves(ax, res):
    for n, runs in [*res["finals"].items(), (BASE, res["baseline"])]:
        if ok := [[v for _, v in r["curve"]] for r in runs if not r["diverged"]]:
            ax.plot(
                [s for s, _ in runs[0]["curve"]],
                np.mean(ok, 0),
                "--" if n == BASE else "-",
                label=n,
            )
    ax.set(xlabel="step", ylabel="training loss (mean over fresh seeds)")


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


def write(out, results, cfg, command):
    """Write results.json, report.md and the plots; `results` is {workload: (Workload,
    run.Audit.workload())}."""
    runs = {}
    for _, res in results.values():
        for r in [
            *sum(res["tuning"].values(), []),
            *sum(res["finals"].values(), []),
            *sum(res["curve"].values(), []),
            *res["baseline"],
        ]:
            runs.setdefault(
                json.dumps([r[k] for k in KEYS[:4]] + [r["steps"]], sort_keys=True),
                {k: r[k] for k in KEYS},
            )
    atomic.write(out / "results.json", json.dumps({"runs": list(runs.values())}, indent=1))
    summaries = {name: summarise({**res, "kind": wl.kind}) for name, (wl, res) in results.items()}
    (first_wl, first), seconds = (
        next(iter(results.values())),
        sum(r["seconds"] for r in runs.values()),
    )
    budgets = ", ".join(f"{b / first['steps']:.3g}" for b in sorted(first["curve"]))
    rules = protocol.__doc__.split("\n\n", 2)[2].format(
        trials=len(first["trials"]["adamw"]),
        seeds=cfg.seeds,
        tolerance=protocol.TOLERANCE,
        budgets=budgets,
    )
    text = [
        f"# Optimizer audit\n\n`{command}`: {len(runs)} runs, {seconds / 60:.1f} minutes of "
        "training (compilation not counted).\n\n## Protocol\n",
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
        *_scale(summaries),
        "\n![loss curves of the best configurations](curves.png)\n\n![final loss against learning "
        "rate](lr.png)",
    ]
    _plots(out, results)
    return atomic.write(out / "report.md", "\n".join(text) + "\n")
