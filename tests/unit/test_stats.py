"""figures/stats.py: the t quantile against printed tables, the interval and the classes by hand."""
import math

import pytest

from figures import stats as S


@pytest.mark.parametrize("df,q975", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423)])
def test_t_quantile_matches_the_printed_table(df, q975):
    assert S.t_quantile(0.975, df) == pytest.approx(q975, abs=1e-4)
    assert S.t_quantile(0.025, df) == pytest.approx(-q975, abs=1e-4)
    assert S.t_cdf(0.0, df) == pytest.approx(0.5)


def test_t_cdf_of_one_degree_is_the_cauchy_cdf():
    for t in (-3.0, -0.5, 0.7, 2.0):        # df = 1: 1/2 + atan(t)/π
        assert S.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)


def test_t_interval_by_hand():
    # the ARMOR - dapo_cont end gaps: mean 0.155/3; deviations -0.018667, 0.059333, -0.040667
    xs = [0.033, 0.111, 0.011]
    m = 0.155 / 3
    sd = math.sqrt((0.018667 ** 2 + 0.059333 ** 2 + 0.040667 ** 2) / 2)
    iv = S.t_interval(xs)
    assert iv.mean == pytest.approx(m) and iv.sd == pytest.approx(sd, rel=1e-4) and iv.n == 3
    half = 4.302653 * sd / math.sqrt(3)
    assert iv.lo == pytest.approx(m - half, rel=1e-4) and iv.hi == pytest.approx(m + half, rel=1e-4)
    # t = mean / (sd/√3) = 1.703; two-sided p with 2 df = 1 - t/√(t²+2) = 0.2307
    t = m / (sd / math.sqrt(3))
    assert iv.p == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-3)
    assert iv.p == pytest.approx(0.2307, abs=1e-3)


def test_one_seed_has_no_interval():
    iv = S.t_interval([0.2])
    assert iv.mean == 0.2 and iv.lo is None and iv.sd is None
    assert S.classify(iv, 0.01)[0] == S.INCONCLUSIVE


def test_paired_differences_keep_common_seeds():
    assert S.paired_differences({0: 0.5, 1: 0.4, 2: None}, {1: 0.1, 0: 0.2, 2: 0.3, 3: 0.0}) == \
        pytest.approx({0: 0.3, 1: 0.3})


def test_classify_greater():
    clear = S.Interval(0.10, 0.05, 0.15, 3, 0.02, 0.01)
    assert S.classify(clear, 0.01)[0] == S.YES                 # lo > 0 and 0.10 >= 2 x 0.01
    assert S.classify(clear, 0.06)[0] == S.INCONCLUSIVE        # 0.10 < 2 x 0.06: below the noise multiple
    assert S.classify(clear, None) == (S.INCONCLUSIVE, "noise floor not measured")
    wide = S.Interval(0.05, -0.08, 0.18, 3, 0.05, 0.23)
    assert S.classify(wide, 0.011)[0] == S.INCONCLUSIVE        # the interval holds 0
    neg = S.Interval(-0.10, -0.15, -0.05, 3, 0.02, 0.01)
    assert S.classify(neg, 0.01)[0] == S.NO


def test_classify_no_change_and_no_drop():
    small = S.Interval(0.002, -0.01, 0.014, 3, 0.005, 0.5)
    assert S.classify(small, 0.011, S.NO_CHANGE)[0] == S.YES   # inside ±0.022
    assert S.classify(small, 0.005, S.NO_CHANGE)[0] == S.INCONCLUSIVE   # 0.014 > 0.010, but holds 0
    moved = S.Interval(-0.3, -0.35, -0.25, 3, 0.02, 0.001)
    assert S.classify(moved, 0.011, S.NO_CHANGE)[0] == S.NO
    assert S.classify(moved, 0.011, S.NO_DROP)[0] == S.NO
    rise = S.Interval(0.3, 0.25, 0.35, 3, 0.02, 0.001)
    assert S.classify(rise, 0.011, S.NO_DROP)[0] == S.YES
    assert S.classify(rise, 0.011, S.NO_CHANGE)[0] == S.NO


def test_combine():
    assert S.combine([S.YES, S.NOT_TESTABLE]) == S.YES
    assert S.combine([S.YES, S.INCONCLUSIVE]) == S.INCONCLUSIVE
    assert S.combine([S.YES, S.NO]) == S.NO
    assert S.combine([S.NOT_TESTABLE]) == S.NOT_TESTABLE


def test_a_floor_measured_as_zero_is_the_scores_resolution():
    from types import SimpleNamespace
    from figures.checklist import floor_of
    zero = {"sd": 0.0, "resolution": 1 / 1024, "values": [0.5, 0.5]}
    assert floor_of(SimpleNamespace(noise_floor=zero)) == 1 / 1024
    assert floor_of(SimpleNamespace(noise_floor={**zero, "sd": 0.011})) == 0.011
    assert floor_of(SimpleNamespace(noise_floor={"sd": 0.02, "values": [0.1]})) == 0.02   # older files
    assert floor_of(SimpleNamespace(noise_floor=None)) is None


def test_two_checklists_side_by_side(tmp_path, capsys):
    """figures.compare: a row a claim (a's order, then b's own), each side's class, mean, interval and
    seeds, `differs` where the classes differ (a claim one side lacks differs too)."""
    from figures.checklist import Verdict, write_verdicts
    from figures.compare import main

    def v(key, cls, mean=None, lo=None, hi=None, n=5):
        stat = {} if mean is None else {"mean": mean, "lo": lo, "hi": hi, "n": n, "sd": None, "p": None}
        return Verdict(key, f"Q {key}?", cls, "", stat=stat)
    a = [v("holds", "inconclusive", 0.05, -0.007, 0.108), v("collapse", "yes", 0.42, 0.391, 0.449),
         v("opd", "not testable here")]
    b = [v("holds", "yes", 0.09, 0.03, 0.15, 3), v("collapse", "yes", 0.2, None, None, 1),
         v("new", "no", -0.1, -0.2, -0.05)]
    for name, vs in (("tiny", a), ("tiny-slow", b)):
        write_verdicts(vs, tmp_path / name / "figures", "checklist", "")
    assert main([str(tmp_path / n / "figures" / "checklist.json") for n in ("tiny", "tiny-slow")]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "| claim | tiny | tiny-slow | class |"
    assert rows[2:] == [
        "| Q holds? | **inconclusive** +0.050 [-0.007, +0.108] (5) | **yes** +0.090 [+0.030, +0.150] (3) "
        "| differs |",
        "| Q collapse? | **yes** +0.420 [+0.391, +0.449] (5) | **yes** +0.200 (1) | same |",
        "| Q opd? | **not testable here** | — | differs |",
        "| Q new? | — | **no** -0.100 [-0.200, -0.050] (5) | differs |"]


def test_holm_by_hand():
    """p = 0.01, 0.04, 0.03 (m = 3): sorted 0.01, 0.03, 0.04 -> 3·0.01 = 0.03, max(0.03, 2·0.03) = 0.06,
    max(0.06, 1·0.04) = 0.06; returned in the order given."""
    assert S.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # the step-down maximum: a later (larger) p never gets a smaller adjusted p; capped at 1
    assert S.holm([0.04, 0.001]) == pytest.approx([0.04, 0.002])
    assert S.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    # an entry without a p (not run, one seed) stays in the family as p = 1
    assert S.holm([0.01, None]) == pytest.approx([0.02, 1.0])
    assert S.holm([]) == []


def test_classify_less_and_the_adjusted_p():
    down = S.Interval(-0.10, -0.15, -0.05, 3, 0.02, 0.01)
    assert S.classify(down, 0.01, S.LESS)[0] == S.YES          # the mirror of greater
    assert S.classify(S.Interval(0.10, 0.05, 0.15, 3, 0.02, 0.01), 0.01, S.LESS)[0] == S.NO
    assert S.classify(down, 0.06, S.LESS)[0] == S.INCONCLUSIVE  # below the minimum effect
    # the interval excludes 0 (raw p 0.01) but the Holm-adjusted p does not pass: not "yes"
    cls, why = S.classify(down, 0.01, S.LESS, p=0.09)
    assert cls == S.INCONCLUSIVE and "p 0.09 >= 0.05" in why and "raw p 0.01" in why
    cls, why = S.classify(down, 0.01, S.LESS, p=0.03)
    assert cls == S.YES and "(Holm-adjusted)" in why
    up = S.Interval(0.10, 0.05, 0.15, 3, 0.02, 0.01)
    assert S.classify(up, 0.01, S.GREATER, p=0.2)[0] == S.INCONCLUSIVE
    assert S.classify(S.Interval(-0.10, -0.15, -0.05, 3, 0.02, 0.01), 0.01, S.GREATER, p=0.2)[0] == \
        S.INCONCLUSIVE                                          # nor "no" on a failed adjusted test


def test_spearman_by_hand():
    # ranks 1..6 against 2,1,4,3,6,5: Σd² = 6, ρ = 1 − 6·6/(6·35) = 29/35; t = ρ·√(4/(1 − ρ²)) = 2.9600,
    # two-sided p with 4 df 0.04156 (scipy.stats.spearmanr prints 0.041562682)
    iv = S.spearman([1, 2, 3, 4, 5, 6], [2, 1, 4, 3, 6, 5])
    assert iv.mean == pytest.approx(29 / 35) and iv.n == 6 and iv.sd is None
    assert iv.p == pytest.approx(0.0415627, abs=1e-6)
    # Fisher z: atanh(29/35) ± 1.959964·√(1.06/3)
    half = 1.959964 * math.sqrt(1.06 / 3)
    assert iv.lo == pytest.approx(math.tanh(math.atanh(29 / 35) - half), rel=1e-6)
    assert iv.hi == pytest.approx(math.tanh(math.atanh(29 / 35) + half), rel=1e-6)
    # ranks are invariant to monotone maps; ties take their average rank
    assert S.spearman([0.1, 0.4, 9.0, 16.0, 25.0, 36.0], [2, 1, 4, 3, 6, 5]).mean == pytest.approx(29 / 35)
    assert S.ranks([3, 1, 3, 2]) == [3.5, 1.0, 3.5, 2.0]
    # a perfect ordering: ρ = 1, p = 0; reversed: −1; a constant side: ρ = 0; three pairs: no interval
    assert S.spearman([1, 2, 3, 4], [10, 20, 30, 40]).mean == 1.0
    assert S.spearman([1, 2, 3, 4], [4, 3, 2, 1]).mean == -1.0
    assert S.spearman([1, 2, 3, 4], [5, 5, 5, 5]).mean == 0.0
    assert S.spearman([1, 2, 3], [1, 3, 2]).lo is None
    with pytest.raises(ValueError, match="equal-length"):
        S.spearman([1, 2], [1])
