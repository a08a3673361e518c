"""The audit's protocol: the tuning grid, the paper baseline, and the statistics of the report.

After Wen et al. 2025, "Fantastic Pretraining Optimizers and Where to Find Them", arXiv
2509.02046, and Semenov et al. 2025, "Benchmarking Optimizers for Large Language Model
Pretraining", arXiv 2509.01440. The rules below are the protocol section of every report.md
(report.write fills in the braced numbers of the audit at hand), so the rules documented here
are the rules the report states:

- **Equal tuning budget**: every optimizer gets {trials} trials on tuning seed 0, a full grid of
  learning rates 2x apart (centred on each optimizer's usual rate relative to AdamW's; 6 of them)
  x weight decay x its own key hyper-parameter (GRIDS; the grid follows). A user optimizer
  (`MODULE:FUNCTION`) has no known key, so it gets more learning rates instead, at the same
  spacing over a wider range. `--quick`: learning rates only.
- **End of training only**: every budget is its own run, its schedule (10% linear warmup, cosine
  decay to zero) completed; the final loss is the held-out loss after the last step.
- **Fresh seeds** (no winner's curse): the best trial is rerun on seeds 1-{seeds}: mean ± 95%
  Student-t interval. `--seeds auto`: 3 seeds, then more, in batches of 3, while a claim (without
  claims, a speedup against 1) is inconclusive, as many as its power estimate (below) asks for, up
  to `--max-seeds`. The intervals are not corrected for these repeated looks: a verdict reached
  after several rounds is less sure than its 95% says.
- **Instability counted, never dropped**: a run whose loss, gradients or update turn NaN/Inf, or
  whose training loss exceeds 1.5 ln(classes) (a uniform guess scores ln(classes)), is diverged
  at that step. *Stable*: the share of the grid that was not; *LR range*: largest/smallest
  learning rate within {tolerance} of the best loss.
- **Speedup** (Wen et al. 2025), per fresh seed s: the steps tuned AdamW needs to reach the
  optimizer's final loss on seed s, interpolated in log(steps) between tuned AdamW's reruns of
  seed s at {budgets} times the budget, over the optimizer's steps. *Wall-clock*: the same in
  seconds, the optimizer's own cost included (runs vmapped {batch} at a time, seconds shared
  equally).
- **Intervals**: the step speedup is the geometric mean over the seeds with a 95% Student-t
  interval on the log speedups (a seed beyond AdamW's budgets counts at the bound and leaves
  that side open: `<`, `>`). Wall-clock: the step speedup times the cost ratio (AdamW's seconds
  per step over the optimizer's, geometric means over their batches); its interval combines the
  step interval and the ratio's Welch interval on log seconds in quadrature, so timing noise
  widens it. Final losses differ from tuned AdamW's by a Welch interval and p-value.
- **Words and verdicts**: "faster" or "slower" only when the speedup interval excludes 1,
  "rises" or "falls with scale" only when the 95% interval of the slope of log speedup against
  log parameters (least squares over every seed of 3 or more sizes) excludes 0, or, for 2 sizes
  or an interval with an open side, when the smallest and largest sizes' intervals do not
  overlap; otherwise "inconclusive at this scale", with the seeds a 5% test with 80% power would
  need. A claim (`--claim NAME=SPEEDUP`) is *supported* when the interval's low end reaches it,
  *refuted* when its high end stays below it, else *inconclusive*.
- **Paper baseline**: AdamW untuned, with the defaults a paper would use; *vs paper baseline* is
  the speedup one would report against it: the optimizer's step speedup over the baseline's
  (their geometric means; a bound when an open side bounds it).
"""

import inspect
import math
from typing import NamedTuple

import numpy as np
import scipy.stats

from frost.optim.registry import ALIASES

# in every run's key: a change to the rules that changes the numbers raises it
VERSION = 2


class Grid(NamedTuple):
    lr: float  # the learning-rate centre as a multiple of the workload's AdamW centre
    weight_decay: tuple  # the two weight decays (the first is --quick's)
    key: str | None  # the optimizer's key hyper-parameter
    values: tuple = ()  # its two values (the first is --quick's)


# Centres relative to AdamW's: Lion's 3-10x lower as Chen et al. (2023) advise, and each checked
# on these workloads with a 12-point sweep (the best of every optimizer lies inside its grid);
# gamma is Sophia's clipping scale (rho in its code), which its state does not hold.
GRIDS = {
    "adamw": Grid(1.0, (0.1, 0.0), "b2", (0.95, 0.999)),
    "adam": Grid(1.0, (1e-4, 0.0), "b2", (0.95, 0.999)),
    "sgd": Grid(20.0, (5e-4, 0.0), "momentum", (0.9, 0.95)),
    "lion": Grid(0.2, (1.0, 0.0), "b2", (0.99, 0.95)),
    "sophia": Grid(0.15, (0.1, 0.0), "gamma", (0.01, 0.05)),
    "sophia-h": Grid(0.15, (0.1, 0.0), "gamma", (0.01, 0.05)),
    "muon": Grid(8.0, (0.1, 0.0), "momentum", (0.95, 0.9)),
}
MUON_ADAM_LR = 0.1  # Muon's AdamW part (embeddings, head, biases) runs at this times Muon's rate
LR_POINTS = 6  # learning rates per grid
TOLERANCE = 0.02  # the LR range counts losses within this of the best

# The "paper baseline": AdamW as a paper would run it, untuned (nanoGPT's GPT-2 settings; PyTorch's
# defaults).
BASELINE = {
    "gpt": {"learning_rate": 6e-4, "weight_decay": 0.1, "b2": 0.95},
    "image": {"learning_rate": 1e-3, "weight_decay": 0.01, "b2": 0.999},
}


def grid(name: str, make, centre: float, quick: bool = False) -> list[dict]:
    """Every trial of optimizer `name` (built by `make`) as {hyper-parameter: value}; same count for
    all."""
    spec = GRIDS.get(ALIASES.get(name, name))  # the registry's other names share their grid
    # a user's optimizer: weight decay if `make` takes it, and learning rates for the key's share
    if spec is None:
        takes = inspect.signature(make).parameters
        decays = "weight_decay" in takes or any(p.kind == p.VAR_KEYWORD for p in takes.values())
        spec = Grid(1.0, (0.1, 0.0) if decays else (None,), None)
    weight_decays = spec.weight_decay[:1] if quick else spec.weight_decay
    values = spec.values[:1] if quick else spec.values
    # LR_POINTS rates, doubled for a grid with no key, and again for no weight decay
    points = LR_POINTS
    points *= 1 if quick or spec.key else 2
    points *= 1 if quick or weight_decays[0] is not None else 2
    exponents = np.arange(points) - (LR_POINTS - 1) / 2 - (points - LR_POINTS) // 2
    lrs = centre * spec.lr * 2.0**exponents
    return [
        {
            "learning_rate": float(f"{lr:.3g}"),
            **({} if wd is None else {"weight_decay": wd}),
            **({spec.key: value} if spec.key else {}),
        }
        for lr in lrs
        for wd in weight_decays
        for value in (values or [None])
    ]


def mean_ci(xs, level: float = 0.95) -> tuple[float, float]:
    """(mean, half-width of the Student-t confidence interval); the half-width is nan for n < 2."""
    xs = np.asarray(xs, float)
    if len(xs) < 2:
        return float(xs.mean()) if len(xs) else math.nan, math.nan
    t = scipy.stats.t.ppf(0.5 + level / 2, len(xs) - 1)
    return float(xs.mean()), float(t * xs.std(ddof=1) / math.sqrt(len(xs)))


def steps_to_reach(steps, losses, target: float) -> tuple[float, str]:
    """Steps AdamW needs to reach `target`, from its final losses at several budgets: linear in
    log(steps) between the two budgets that bracket it. A longer budget counts as at least as good
    as a shorter one (a running minimum). Returns (steps, "=") or, outside the budgets, the
    nearest budget with ">" (needs more) or "<" (needs fewer).

    ```python
    steps_to_reach([100, 200, 400], [3.0, 2.5, 2.0], 2.25)  # (282.8..., "="): sqrt(200 * 400)
    ```
    """
    order = np.argsort(steps)
    budgets = np.asarray(steps, float)[order]
    loss = np.minimum.accumulate(np.asarray(losses, float)[order])
    if target >= loss[0]:
        return float(budgets[0]), "<" if target > loss[0] else "="
    if target < loss[-1]:
        return float(budgets[-1]), ">"
    i = int(np.argmax(loss <= target)) - 1  # loss[i] > target >= loss[i + 1]
    frac = (loss[i] - target) / (loss[i] - loss[i + 1])
    low = math.log(budgets[i])
    high = math.log(budgets[i + 1])
    return float(math.exp(low + frac * (high - low))), "="


def stable_fraction(runs) -> float:
    """The share of `runs` that did not diverge."""
    return sum(not run["diverged"] for run in runs) / len(runs)


def best_by_lr(runs) -> dict:
    """{learning rate: the lowest final loss of its runs that did not diverge (nan if all did)},
    rates ascending: the best over the other hyper-parameters (the report's lr.png)."""
    lrs = sorted({run["hyperparams"]["learning_rate"] for run in runs})
    losses = {lr: [] for lr in lrs}
    for run in runs:
        if not run["diverged"]:
            losses[run["hyperparams"]["learning_rate"]].append(run["final_loss"])
    return {lr: min(finals, default=math.nan) for lr, finals in losses.items()}


def lr_range(runs, tolerance: float = TOLERANCE) -> float:
    """The width (largest / smallest) of the learning rates whose best loss, over the other
    hyper-parameters, is within `tolerance` of the best; 1.0 when only the best one is, nan if all
    diverged."""
    best = {lr: loss for lr, loss in best_by_lr(runs).items() if not math.isnan(loss)}
    if not best:
        return math.nan
    low = min(best.values())
    near = [lr for lr, loss in best.items() if loss <= low + tolerance]
    return max(near) / min(near)


def best_trial(runs):
    """The run with the lowest final loss among those that did not diverge (None if all did)."""
    finished = [run for run in runs if not run["diverged"]]
    return min(finished, key=lambda run: run["final_loss"], default=None)


class Interval(NamedTuple):
    """A speedup (geometric mean over seeds) and its 95% interval; `open_low` / `open_high`: a
    seed fell beyond AdamW's budgets on that side, so the interval extends past `low` / `high`."""

    mean: float
    low: float
    high: float
    open_low: bool = False
    open_high: bool = False
    sd: float = math.nan  # of the per-seed log speedups
    n: int = 1  # seeds


def speedup_interval(reaches, steps: int) -> Interval:
    """The step speedup from per-seed `reaches`, [(AdamW's steps to the optimizer's loss on that
    seed, bound)] (steps_to_reach on the seed's own AdamW ladder): a Student-t interval on the log
    speedups, exponentiated; a bound counts at its value and opens its side."""
    # rounded: steps_to_reach's log-space interpolation is exact only to a few ulps
    logs = np.round(np.log([reach / steps for reach, _ in reaches]), 12)
    mean, half = mean_ci(logs)
    half = 0.0 if math.isnan(half) else half
    bounds = {bound for _, bound in reaches}
    return Interval(
        math.exp(mean),
        math.exp(mean - half),
        math.exp(mean + half),
        open_low="<" in bounds,  # AdamW needs fewer steps than its shortest budget: smaller
        open_high=">" in bounds,  # more than its longest: larger
        sd=float(np.std(logs, ddof=1)) if len(logs) > 1 else math.nan,
        n=len(logs),
    )


def trend(params, spans: list[Interval]) -> tuple[float, float]:
    """(slope, its 95% half-width) of the log speedup against log parameters: least squares
    over every seed of every size (from each size's mean, spread and seeds), Student-t on the
    seeds less 2."""
    x = np.log(np.asarray(params, float))  # log parameters, one per size
    n = np.array([span.n for span in spans])  # each size's seeds
    y = np.log([span.mean for span in spans])  # each size's mean log speedup
    sd = np.nan_to_num([span.sd for span in spans])  # and its spread over the seeds
    dx = x - (n * x).sum() / n.sum()
    slope = (n * dx * y).sum() / (n * dx**2).sum()
    fit = (n * y).sum() / n.sum() + slope * dx  # the line at each size
    residual = ((n - 1) * sd**2).sum() + (n * (y - fit) ** 2).sum()
    se = math.sqrt(residual / (n.sum() - 2) / (n * dx**2).sum())
    return float(slope), float(scipy.stats.t.ppf(0.975, n.sum() - 2) * se)


def welch(xs, ys) -> tuple[float, float, float]:
    """(mean(xs) - mean(ys), its 95% half-width, p-value): Welch's t-test, unequal variances."""
    test = scipy.stats.ttest_ind(xs, ys, equal_var=False)
    ci = test.confidence_interval(0.95)  # Welch's, of mean(xs) - mean(ys) (scipy >= 1.11)
    return float(np.mean(xs) - np.mean(ys)), float((ci.high - ci.low) / 2), float(test.pvalue)


def verdict(interval: Interval, claimed: float) -> str:
    """`supported` when the whole interval reaches the claim (low >= claimed), `refuted` when
    it stays below it (high < claimed), else `inconclusive`."""
    if interval.low >= claimed and not interval.open_low:
        return "supported"
    if interval.high < claimed and not interval.open_high:
        return "refuted"
    return "inconclusive"


def seeds_to_decide(interval: Interval, against: float = 1.0) -> int | None:
    """Seeds a two-sided 5% test with 80% power needs to tell the speedup from `against`, from
    the measured spread: n = ((z_0.975 + z_0.8) sd / |log speedup - log against|)^2."""
    effect = abs(math.log(interval.mean) - math.log(against))
    if not effect or math.isnan(interval.sd):
        return None
    return math.ceil(((1.959964 + 0.841621) * interval.sd / effect) ** 2)


def words(interval: Interval) -> str:
    """ "faster" / "slower" only when the interval excludes 1; else inconclusive, with the seeds
    that would decide it."""
    if interval.low > 1 and not interval.open_low:
        return "faster than tuned AdamW"
    if interval.high < 1 and not interval.open_high:
        return "slower than tuned AdamW"
    seeds = seeds_to_decide(interval)
    more = f"; about {seeds} seeds would decide it" if seeds else ""
    return f"inconclusive at this scale (the interval contains 1{more})"
