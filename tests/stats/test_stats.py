"""Statistics against values computed by hand."""

import math

import numpy as np
import pytest

from dlperf import stats

# measures nothing and asserts nothing about time: `make test` runs it beside another
pytestmark = pytest.mark.parallel


def test_throughput_is_window_samples_over_window_time():
    assert stats.throughput(300, 1.5) == 200.0
    with pytest.raises(ValueError):
        stats.throughput(10, 0)


def test_summary_against_hand_computed_values():
    values = [10.0, 12.0, 11.0, 13.0, 9.0]
    s = stats.summarize(values, seed=1)
    assert s["median"] == 11.0
    assert s["min"] == 9.0 and s["max"] == 13.0
    assert s["mean"] == 11.0
    # numpy's linear percentiles of 9,10,11,12,13: q1 = 10, q3 = 12
    assert s["iqr"] == pytest.approx(2.0)
    # sample standard deviation sqrt(10/4) over the mean 11
    assert s["cv"] == pytest.approx(math.sqrt(2.5) / 11.0)
    assert s["n"] == 5 and s["repeats"] == values
    low, high = s["ci95"]
    assert 9.0 <= low <= 11.0 <= high <= 13.0


def test_bootstrap_is_seeded_and_degenerate_inputs_are_honest():
    values = [100.0, 103.0, 99.0, 101.0, 98.0, 104.0, 100.5]
    assert stats.bootstrap_ci(values, seed=7) == stats.bootstrap_ci(values, seed=7)
    assert stats.bootstrap_ci([5.0], seed=0) is None
    one = stats.summarize([5.0])
    assert one["median"] == 5.0 and one["cv"] is None and one["ci95"] is None
    empty = stats.summarize([])
    assert empty["median"] is None and empty["n"] == 0


def test_row_medians_are_numpys_to_the_last_bit():
    rng = np.random.default_rng(11)
    for width in range(1, 9):
        rows = rng.lognormal(3.0, 0.5, size=(500, width))
        assert np.array_equal(stats.row_medians(rows), np.median(rows, axis=1)), width
    # by hand: odd rows their middle, even rows the mean of their two middles
    assert stats.row_medians(np.array([[3.0, 1.0, 2.0], [9.0, 7.0, 8.0]])).tolist() == [2.0, 8.0]
    assert stats.row_medians(np.array([[4.0, 1.0, 2.0, 3.0]])).tolist() == [2.5]
    # a NaN goes to numpy (its median is NaN), and so does a row of nothing
    with_nan = np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]])
    assert np.array_equal(stats.row_medians(with_nan), np.median(with_nan, axis=1),
                          equal_nan=True)
    # the intervals made with it are the ones numpy's medians made (seeded alike)
    values = [100.0, 103.0, 99.0, 101.0, 98.0, 104.0]
    generator = np.random.default_rng(0)
    by_numpy = np.median(generator.choice(np.asarray(values), size=(stats.BOOTSTRAP_SAMPLES, 6)),
                         axis=1)
    assert stats.bootstrap_ci(values, seed=0) == tuple(
        float(v) for v in np.percentile(by_numpy, [2.5, 97.5]))


def test_half_drift_and_warnings():
    assert stats.half_drift([[2, 2.0], [2, 2.4]]) == pytest.approx(0.2)
    assert stats.half_drift([[4, 4.0], [6, 5.4]]) == pytest.approx(-0.1)  # per-step means
    assert stats.half_drift([[1, 1.0], [2, 2.0]]) is None  # a half of one step says nothing
    assert stats.half_drift(None) is None
    steady = stats.summarize([100.0, 101.0, 99.0])
    assert stats.spread_warnings(steady, [0.01, -0.02]) == []
    noisy = stats.summarize([100.0, 150.0, 60.0])
    warnings = stats.spread_warnings(noisy, [0.2, None])
    assert any(w.startswith("noisy: CV") for w in warnings)
    assert any(w.startswith("unsteady window in 1 repeat") for w in warnings)


# Step times of real windows on the 2-core VM (make run, ResNet-50 112 px bs16): two slow steps
# in the first half, no trend; and a step time that climbs through the whole window.
HICCUP = [1.12, 1.18, 1.47, 1.45, 1.00, 1.19, 1.16, 1.04, 1.07, 0.95]
CLIMB = [1.78, 1.97, 1.89, 1.85, 1.85, 2.04, 2.02, 2.11, 2.23, 2.19]


def halves_of(times, middle=5):
    return [[middle, sum(times[:middle])], [len(times) - middle, sum(times[middle:])]]


def test_a_drift_is_flagged_only_when_the_step_times_say_it_is_not_noise():
    hiccup, climb = halves_of(HICCUP), halves_of(CLIMB)
    assert stats.half_drift(hiccup) == pytest.approx(-0.130, abs=1e-3)
    assert stats.half_drift(climb) == pytest.approx(+0.134, abs=1e-3)
    p_hiccup, p_climb = stats.drift_p(HICCUP, hiccup), stats.drift_p(CLIMB, climb)
    assert p_hiccup > 0.05 > 0.01 > p_climb
    steady = stats.summarize([100.0, 101.0, 99.0])
    assert stats.spread_warnings(steady, [stats.half_drift(hiccup)], [p_hiccup]) == []
    [warning] = stats.spread_warnings(steady, [stats.half_drift(climb)], [p_climb])
    assert warning.startswith("unsteady window in 1 repeat(s): step time changed +13.4%")
    assert "Welch p = 0.002 over its step times" in warning
    # without step times (an older result, or halves that do not match them) the 5% rule alone
    assert stats.drift_p(HICCUP[:9], hiccup) is None and stats.drift_p(None, hiccup) is None
    assert stats.drift_p([1.0, 1.0, 1.0, 1.0], halves_of([1.0] * 4, 2)) is None
    assert len(stats.spread_warnings(steady, [stats.half_drift(hiccup)], [None])) == 1


def test_which_repeats_can_reach_alpha_at_all():
    """Mann-Whitney's smallest two-sided p with n and m is 2/C(n+m, n): 0.1 with 3 and 3, 2/70
    with 4 and 4; one-sided 1/20 with 3 and 3, not below 0.05. Welch needs 2 a side; pairs
    (ab's interval) 2^-n one-sided: 5 pairs."""
    assert not stats.reaches("mannwhitney", 3, 3) and stats.reaches("mannwhitney", 4, 4)
    assert not stats.reaches("mannwhitney", 3, 3, sides=1)
    assert stats.reaches("mannwhitney", 3, 4, sides=1)  # 1/35
    assert stats.reaches("welch", 2, 2) and not stats.reaches("welch", 1, 5)
    assert [stats.repeats_needed(t) for t in ("mannwhitney", "welch")] == [4, 2]
    assert stats.repeats_needed("mannwhitney", alpha=0.01) == 5  # 2/252 < 0.01 <= 2/70
    assert stats.repeats_needed(stats.PAIRED_TEST, sides=1) == 5  # 2^-5 < 0.05 <= 2^-4
    assert stats.unreachable("mannwhitney", 4, 4) is None
    assert stats.unreachable("mannwhitney", 3, 3) == (
        "3 repeats a side cannot reach p < 0.05 with Mann-Whitney (smallest p 0.1; needs 4 a "
        "side)")
    assert stats.unreachable("welch", 1, 3) == (
        "1 and 3 repeats cannot reach p < 0.05 with Welch's t (needs 2 a side)")
    with pytest.raises(ValueError, match="test: 'ttest' is not one of"):
        stats.reaches("ttest", 3, 3)


@pytest.mark.filterwarnings("ignore:Precision loss occurred")  # scipy on the constant side
def test_welch_p_is_scipys_ttest_ind_to_rounding():
    """stats.welch_p against scipy.stats.ttest_ind(equal_var=False) on drawn samples: sizes 2 to
    30, unequal spreads, one side without variance, ties, a side of one value repeated, each
    alternative; both undefined (NaN) where a side has fewer than 2 values or neither varies."""
    from scipy import stats as scipy_stats

    rng = np.random.default_rng(7)
    samples = []
    for _ in range(200):
        n, m = rng.integers(2, 31, size=2)
        a = 100 + rng.normal(0, rng.uniform(0.01, 5), n)
        b = 100 * rng.uniform(0.9, 1.1) + rng.normal(0, rng.uniform(0.01, 5), m)
        samples.append((a, b))
    samples += [([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]), ([5.0, 5.0, 6.0, 6.0], [5.0, 6.0]),
                ([2.0, 2.0], [1.0, 1.5, 1.0, 1.5])]
    for a, b in samples:
        for alternative in ("two-sided", "less", "greater"):
            want = scipy_stats.ttest_ind(a, b, equal_var=False, alternative=alternative).pvalue
            assert stats.welch_p(a, b, alternative) == pytest.approx(want, rel=1e-9, abs=1e-15)
    assert math.isnan(stats.welch_p([1.0], [1.0, 2.0]))
    assert math.isnan(stats.welch_p([3.0, 3.0], [3.0, 3.0, 3.0]))
    with pytest.raises(ValueError, match="alternative: 'up' is not one of"):
        stats.welch_p([1.0, 2.0], [3.0, 4.0], "up")
    # shift_p's Welch is this p; drift_p's the two-sided one over a window's halves
    assert stats.shift_p([1.0, 2.0, 3.0], [2.0, 4.0, 5.0], "welch", "less") == (
        stats.welch_p([1.0, 2.0, 3.0], [2.0, 4.0, 5.0], "less"), None)
