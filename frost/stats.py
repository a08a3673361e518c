"""Scores aggregated over runs, with the intervals Agarwal et al. recommend ("Deep Reinforcement
Learning at the Edge of the Statistical Precipice", NeurIPS 2021) and their `rliable` library
computes: the interquartile mean (IQM) and the mean, each with a 95% percentile interval from a
stratified bootstrap (runs resampled with replacement within each task). NumPy only;
tests/test_stats.py checks every number against rliable's own functions.

    scores = np.array([[3.1], [4.0], [2.2], [5.5], [3.9]])  # (runs, tasks): 5 seeds of one game
    iqm(scores)                      # 3.667: the mean of the middle three
    interval(scores, iqm)            # (low, high): the 95% stratified-bootstrap interval
    summary([3.1, 4.0, 2.2, 5.5, 3.9], episodes=100)  # what `frost rl` writes to results.json
"""

from collections.abc import Callable

import numpy as np

REPS = 50_000  # bootstrap resamples, rliable's default


def iqm(scores: np.ndarray) -> np.ndarray:
    """The interquartile mean of runs and tasks together, as rliable's `aggregate_iqm`
    (scipy.stats.trim_mean(scores, 0.25, axis=None)).

    Arguments:
        scores: (..., runs, tasks); leading axes are kept (one IQM per bootstrap resample).

    Returns:
        (...): the mean of the sorted scores after int(n / 4) are cut from each end (n = runs x
        tasks); with 5 runs of one task, the mean of the middle three.
    """
    flat = np.sort(scores.reshape(*scores.shape[:-2], -1), axis=-1)  # (..., runs * tasks)
    n = flat.shape[-1]
    cut = int(0.25 * n)
    return flat[..., cut : n - cut].mean(-1)


def mean(scores: np.ndarray) -> np.ndarray:
    """The mean over runs of each task, then over tasks, as rliable's `aggregate_mean`.

    Arguments:
        scores: (..., runs, tasks).

    Returns:
        (...).
    """
    return scores.mean(-2).mean(-1)


def interval(
    scores: np.ndarray,
    aggregate: Callable[[np.ndarray], np.ndarray],
    size: float = 0.95,
    reps: int = REPS,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile interval of `aggregate` from a stratified bootstrap, as rliable's
    `get_interval_estimates(..., method="percentile")`: each resample draws, for each task,
    `runs` runs with replacement from that task's runs.

    Arguments:
        scores: (runs, tasks).
        aggregate: (..., runs, tasks) -> (...), e.g. `iqm` or `mean`.
        size: the interval's coverage (0.95: the 2.5th and 97.5th percentiles).
        reps: bootstrap resamples.
        seed: the resampling's NumPy seed (the same seed, the same interval).

    Returns:
        (low, high).
    """
    runs, tasks = scores.shape
    index = np.random.default_rng(seed).integers(0, runs, (reps, runs, tasks))
    resampled = scores[index, np.arange(tasks)]  # (reps, runs, tasks)
    low, high = np.percentile(aggregate(resampled), [50 * (1 - size), 50 * (1 + size)])
    return float(low), float(high)


def summary(scores: np.ndarray | list[float], episodes: int, reps: int = REPS) -> dict:
    """The IQM and the mean over seeds with their 95% intervals: `frost rl`'s results.json
    "summary".

    Arguments:
        scores: (seeds,) each seed's mean evaluation return (one task).
        episodes: evaluation episodes behind each seed's score.
        reps: bootstrap resamples.

    Returns:
        {"iqm", "iqm_low", "iqm_high", "mean", "mean_low", "mean_high", "seeds", "episodes"}.
    """
    table = np.asarray(scores, np.float64).reshape(-1, 1)  # (seeds, 1 task)
    out = {}
    for name, aggregate in (("iqm", iqm), ("mean", mean)):
        out[name] = float(aggregate(table))
        out[f"{name}_low"], out[f"{name}_high"] = interval(table, aggregate, reps=reps)
    return dict(out, seeds=len(table), episodes=episodes)
