"""The audit's outputs, made from the runs alone (so a resumed audit writes the same files):
OUT/results.json (every run), OUT/report.md (protocol, grid, a table and findings per workload),
OUT/curves.png (each optimizer's best configuration, mean over the fresh seeds) and OUT/lr.png
(final loss against learning rate: the sensitivity curve).
"""
from __future__ import annotations

import io
import json
import math

import numpy as np

from frost import atomic
from frost.audit import protocol

KEYS = ("workload", "optimizer", "hyperparams", "seed", "final_loss", "diverged", "diverged_step", "steps", "seconds")
CLAIMS = {"sophia": "2x fewer steps than Adam (Liu et al. 2023)",
          "muon": "about 2x the compute efficiency of AdamW (Liu et al. 2025, Moonlight)"}


def _speed(x) -> str:
    value, bound = x
    return "n/a" if bound == "?" or not math.isfinite(value) else f"{'' if bound == '=' else bound}{value:.2f}x"


def _ratio(a, b):
    """(value, bound) / (value, bound), with the bound that follows."""
    kinds = {a[1], {"<": ">", ">": "<", "=": "="}[b[1]]} - {"="}
    return a[0] / b[0], "=" if not kinds else kinds.pop() if len(kinds) == 1 else "?"


def _hp(h) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in h.items())


def summarise(res) -> dict:
    """Per optimizer (and the paper baseline): loss mean and CI, stability, LR range, speedups."""
    steps = res["steps"]
    curve = {b: np.mean(ok) for b, runs in res["curve"].items() if (ok := [r["final_loss"] for r in runs
                                                                           if not r["diverged"]])}
    per_step = (np.mean([r["seconds"] / r["steps"] for r in res["finals"]["adamw"]])
                if "adamw" in res["finals"] else math.nan)

    def row(runs, tuning=None, hp=None):
        losses = [r["final_loss"] for r in runs if not r["diverged"]]
        mean, ci = protocol.mean_ci(losses)
        reach = protocol.steps_to_reach(list(curve), list(curve.values()), mean) if curve and losses else \
            (math.nan, "?")
        wall = reach[0] * per_step / np.mean([r["seconds"] for r in runs]) if runs else math.nan
        return {"hp": hp, "mean": mean, "ci": ci, "n": len(losses), "of": len(runs), "speed": (reach[0] / steps,
                reach[1]), "wall": (wall, reach[1]), "stable": tuning and protocol.stable_fraction(tuning),
                "range": tuning and protocol.lr_range(tuning)}
    rows = {n: row(res["finals"].get(n, []), runs, (res["best"][n] or {}).get("hyperparams"))
            for n, runs in res["tuning"].items()}
    rows["paper baseline"] = row(res["baseline"], hp=protocol.BASELINE[res["kind"]])
    for r in rows.values():
        r["vs"] = _ratio(r["speed"], rows["paper baseline"]["speed"])
    return rows


def _table(rows) -> list[str]:
    out = ["| optimizer | best hyper-parameters | final loss (mean ± 95% CI) | stable | LR range | step speedup | "
           "wall-clock speedup | vs paper baseline |", "|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        loss = f"{r['mean']:.4f} ± {r['ci']:.4f} (n={r['n']}/{r['of']})" if r["n"] else f"diverged ({r['of']}/{r['of']})"
        stable = "" if r["stable"] is None else f"{r['stable']:.0%}"
        width = "" if r["range"] is None else "n/a" if math.isnan(r["range"]) else f"{r['range']:.0f}x"
        out.append(f"| {name} | {_hp(r['hp']) if r['hp'] else 'all diverged'} | {loss} | {stable} | {width} | "
                   f"{_speed(r['speed'])} | {_speed(r['wall'])} | {_speed(r['vs'])} |")
    return out


def _findings(name, res, rows) -> list[str]:
    """Plain-words findings for one workload."""
    a, base, lines = rows["adamw"], rows["paper baseline"], []
    for n, r in rows.items():
        if n in ("adamw", "paper baseline"):
            continue
        if not r["n"]:
            lines.append(f"- **{n}** did not train stably: every rerun of its best trial diverged.")
            continue
        overlap = abs(r["mean"] - a["mean"]) <= (r["ci"] if r["n"] > 1 else 0) + (a["ci"] if a["n"] > 1 else 0)
        verdict = ("within seed noise of tuned AdamW" if overlap else
                   "better than tuned AdamW" if r["mean"] < a["mean"] else "worse than tuned AdamW")
        claim = f" Claimed: {CLAIMS[n]}." if n in CLAIMS else ""
        lines.append(f"- **{n}**: step speedup {_speed(r['speed'])} over tuned AdamW (wall-clock {_speed(r['wall'])}, "
                     f"its own cost included); its final loss {r['mean']:.4f} is {verdict} ({a['mean']:.4f})."
                     f"{claim} Against the untuned paper baseline it would look {_speed(r['vs'])} as fast.")
        lrs = [h["learning_rate"] for h in res["trials"][n]]
        if res["best"][n]["hyperparams"]["learning_rate"] in (min(lrs), max(lrs)):
            lines.append(f"  Its best learning rate is at the edge of the grid: a wider grid may find a better one.")
    lines.append(f"- The **paper baseline** (AdamW, {_hp(base['hp'])}, untuned) ends at {base['mean']:.4f}: tuned "
                 f"AdamW is {_speed(_ratio((1.0, '='), base['speed']))} as fast, so that much of a gain claimed "
                 "against such a baseline comes from the baseline.")
    return lines


def _scale(summaries) -> list[str]:
    """How each optimizer's step speedup moves from the smaller to the larger width."""
    lines = []
    for kind in ("gpt", "image"):
        small, large = summaries.get(f"{kind}-s"), summaries.get(f"{kind}-m")
        for n in small or {}:
            if large and n in large and n not in ("adamw", "paper baseline") and "?" not in (
                    small[n]["speed"][1], large[n]["speed"][1]):
                a, b = small[n]["speed"][0], large[n]["speed"][0]
                trend = "grows" if b > a * 1.05 else "shrinks" if b < a / 1.05 else "holds"
                lines.append(f"- {kind}: **{n}**'s step speedup {_speed(small[n]['speed'])} at {kind}-s, "
                             f"{_speed(large[n]['speed'])} at {kind}-m: its gap over AdamW {trend} with scale.")
    return lines


def _plots(out, results, summaries):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for file, draw in (("curves.png", _curves), ("lr.png", _sensitivity)):
        fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
        for ax, (name, (wl, res)) in zip(axes[0], results.items()):
            draw(ax, res)
            ax.set_title(f"{name}: {wl.describe(res['steps'])}", fontsize=8)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        atomic.write(out / file, buf.getvalue())


def _curves(ax, res):
    for n, runs in [*res["finals"].items(), ("paper baseline", res["baseline"])]:
        ok = [r["curve"] for r in runs if not r["diverged"]]
        if ok:
            steps = [s for s, _ in ok[0]]
            ax.plot(steps, np.mean([[v for _, v in c] for c in ok], 0), "--" if n == "paper baseline" else "-",
                    label=n)
    ax.set(xlabel="step", ylabel="training loss (mean over fresh seeds)")


def _sensitivity(ax, res):
    for n, runs in res["tuning"].items():
        lrs = sorted({r["hyperparams"]["learning_rate"] for r in runs})
        best = [min([r["final_loss"] for r in runs if r["hyperparams"]["learning_rate"] == lr and not r["diverged"]],
                    default=np.nan) for lr in lrs]
        line = ax.plot(lrs, best, "o-", label=n)[0]
        gone = [lr for lr, b in zip(lrs, best) if np.isnan(b)]
        ax.plot(gone, [np.nanmax(best)] * len(gone), "x", color=line.get_color(), markersize=9)
    ax.set(xscale="log", xlabel="peak learning rate (x: every trial diverged)", ylabel="final loss (best over the "
           "other hyper-parameters)")


def write(out, results, cfg, command) -> "pathlib.Path":  # noqa: F821
    """Write results.json, report.md and the plots; `results` is {workload: (Workload, run.Audit.workload())}."""
    seen, runs = set(), []
    for _, res in results.values():
        for r in [*sum(res["tuning"].values(), []), *sum(res["finals"].values(), []),
                  *sum(res["curve"].values(), []), *res["baseline"]]:
            key = json.dumps([r[k] for k in KEYS[:4]] + [r["steps"]], sort_keys=True)
            if key not in seen:
                seen.add(key)
                runs.append({k: r[k] for k in KEYS})
    atomic.write(out / "results.json", json.dumps({"runs": runs}, indent=1))
    summaries = {name: summarise({**res, "kind": wl.kind}) for name, (wl, res) in results.items()}
    first = next(iter(results.values()))[1]
    text = [f"# Optimizer audit\n\n`{command}`: {len(runs)} runs, {sum(r['seconds'] for r in runs) / 60:.1f} "
            "minutes of training (compilation not counted).\n\n## Protocol\n",
            f"- **Equal tuning budget**: every optimizer gets {len(first['trials']['adamw'])} trials on tuning "
            f"seed 0: {protocol.LR_POINTS} learning rates 2x apart (centred on each optimizer's usual rate relative "
            "to AdamW) x weight decay x the optimizer's own key hyper-parameter (grid below; a user optimizer gets "
            "more learning rates instead of a key).",
            "- **End of training only**: each budget is its own run, with 10% linear warmup and cosine decay to zero "
            "completed; the final loss is the held-out loss after the last step.",
            f"- **Fresh seeds**: the best trial is rerun on seeds 1-{cfg.seeds}; mean ± 95% Student-t interval.",
            "- **Instability counted**: a run whose loss, gradient or update turns NaN/Inf, or whose training loss "
            "exceeds 1.5 ln(classes) (a uniform guess scores ln(classes)), is diverged at that step; *stable* is the "
            f"share of the grid that was not, *LR range* the width (largest/smallest) of the learning rates within "
            f"{protocol.TOLERANCE} of the best loss.",
            "- **Speedup** (Wen et al. 2025, arXiv 2509.02046): the steps tuned AdamW needs to reach the optimizer's "
            "mean final loss, interpolated in log(steps) between tuned AdamW's reruns at "
            f"{', '.join(f'{b:g}' for b in sorted(first['curve']))} steps, over the optimizer's steps (`>`/`<`: "
            "beyond AdamW's budgets); wall-clock: the same in seconds, the optimizer's own cost included (runs "
            f"vmapped {cfg.seeds} at a time, seconds shared equally).",
            "- **Paper baseline**: AdamW with the defaults a paper would use, untuned; *vs paper baseline* is the "
            "speedup one would report against it.\n", "## Grid\n", "| optimizer | learning rates | other |", "|---|---|---|"]
    for n, trials in first["trials"].items():
        other = {k: sorted({t[k] for t in trials}) for k in trials[0] if k != "learning_rate"}
        lrs = sorted({t["learning_rate"] for t in trials})
        text.append(f"| {n} | {len(lrs)}: {lrs[0]:g} ... {lrs[-1]:g} | "
                    f"{'; '.join(f'{k} {v}' for k, v in other.items())} |")
    for name, (wl, res) in results.items():
        text += [f"\n## {name}: {wl.describe(res['steps'])}\n", *_table(summaries[name]), "", *_findings(name, res, summaries[name])]
    text += ["\n## Scale\n", *(_scale(summaries) or ["- Only one width per workload was audited."]),
             "\n![loss curves of the best configurations](curves.png)\n\n![final loss against learning rate](lr.png)\n"]
    _plots(out, results, summaries)
    return atomic.write(out / "report.md", "\n".join(text) + "\n")
