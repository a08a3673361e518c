"""frost.stats against rliable (Agarwal et al. 2021): the IQM and the mean equal rliable's
aggregates, and the stratified-bootstrap intervals agree with `get_interval_estimates` within the
bootstrap's own Monte Carlo error."""

import numpy as np
import pytest

from frost import stats

library = pytest.importorskip("rliable.library")
metrics = pytest.importorskip("rliable.metrics")


def _scores(runs, tasks, seed=0):
    rng = np.random.default_rng(seed)
    # tasks on different scales, so a bootstrap that mixed tasks would be wide
    return rng.gamma(2.0, 3.0, (runs, tasks)) * (1 + 10 * np.arange(tasks))


@pytest.mark.parametrize("runs, tasks", [(5, 1), (4, 1), (10, 3), (7, 2)])
def test_point_estimates_are_rliables(runs, tasks):
    scores = _scores(runs, tasks)
    assert stats.iqm(scores) == pytest.approx(metrics.aggregate_iqm(scores), rel=1e-12)
    assert stats.mean(scores) == pytest.approx(metrics.aggregate_mean(scores), rel=1e-12)


@pytest.mark.parametrize("runs, tasks", [(5, 1), (6, 3)])
def test_intervals_agree_with_rliables(runs, tasks):
    scores = _scores(runs, tasks, seed=1)

    def both(x):  # rliable's aggregates, as its docs pass them
        return np.array([metrics.aggregate_iqm(x), metrics.aggregate_mean(x)])

    np.random.seed(0)  # rliable's StratifiedBootstrap draws from NumPy's global generator
    points, intervals = library.get_interval_estimates({"frost": scores}, both, reps=20_000)
    for i, aggregate in enumerate((stats.iqm, stats.mean)):
        low, high = stats.interval(scores, aggregate, reps=20_000)
        want_low, want_high = intervals["frost"][:, i]
        assert aggregate(scores) == pytest.approx(points["frost"][i], rel=1e-12)
        # two independent bootstraps of 20,000 resamples: their percentiles differ by a few
        # thousandths of the interval's width; a bootstrap across tasks, or the wrong
        # percentiles, differs by tenths
        tolerance = 0.03 * (want_high - want_low)
        assert abs(low - want_low) < tolerance and abs(high - want_high) < tolerance, (
            (low, high),
            (want_low, want_high),
        )


def test_summary_holds_results_json_keys_and_is_deterministic():
    scores = [3.1, 4.0, 2.2, 5.5, 3.9]
    got = stats.summary(scores, episodes=100, reps=2_000)
    assert list(got) == [
        *("iqm", "iqm_low", "iqm_high", "mean", "mean_low", "mean_high"),
        *("seeds", "episodes"),
    ]
    assert got["iqm"] == pytest.approx((3.1 + 4.0 + 3.9) / 3) and got["seeds"] == 5
    assert got["iqm_low"] < got["iqm"] < got["iqm_high"] and got["mean_low"] < got["mean_high"]
    assert got == stats.summary(scores, episodes=100, reps=2_000)
    one = stats.summary([7.0], episodes=100, reps=100)  # one seed: no spread to resample
    assert one["iqm_low"] == one["iqm"] == one["iqm_high"] == 7.0
