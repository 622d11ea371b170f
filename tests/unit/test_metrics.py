"""Tests for common.metrics, against hand computations and an exact (fractions + comb) reference."""
from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest

from common.metrics import avg_at_k, maj_at_k, pass_at_k, pass_at_k_matrix, per_problem_accuracy


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(comb(n - c, k), comb(n, k))


def test_avg_at_k_hand():
    correct = [[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]]
    assert avg_at_k(correct) == pytest.approx(6 / 12)
    assert per_problem_accuracy(correct).tolist() == [0.5, 1.0, 0.0]
    assert avg_at_k(np.array([[True, False]])) == 0.5


def test_pass_at_k_hand():
    # n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 6, 5) == 1.0  # n - c < k
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 = c / n


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16, 32])
def test_pass_at_k_n32_against_exact(k):
    for c in range(0, 33):
        ref = exact_pass_at_k(32, c, k)
        assert abs(pass_at_k(32, c, k) - float(ref)) < 1e-12, (c, k)


def test_pass_at_k_large_n_is_stable():
    # a direct comb ratio in floats would overflow for n = 2000; the product form does not
    assert pass_at_k(2000, 1, 1000) == pytest.approx(0.5)
    assert abs(pass_at_k(1000, 3, 16) - float(exact_pass_at_k(1000, 3, 16))) < 1e-12


def test_pass_at_k_errors():
    with pytest.raises(ValueError, match=r"k=33, n=32"):
        pass_at_k(32, 4, 33)
    with pytest.raises(ValueError, match=r"k=0, n=32"):
        pass_at_k(32, 4, 0)
    with pytest.raises(ValueError, match=r"c=40, n=32"):
        pass_at_k(32, 40, 4)
    with pytest.raises(ValueError, match="k must be an integer"):
        pass_at_k(32, 4, 2.5)
    with pytest.raises(ValueError, match=r"k=5.*n=4"):
        pass_at_k_matrix([[1, 0, 0, 1]], 5)


def test_pass_at_k_matrix_hand():
    correct = [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    # k=2: problem 0: 1 - C(3,2)/C(4,2) = 1/2; problem 1: 1 - C(2,2)/C(4,2) = 5/6; problem 2: 0
    assert pass_at_k_matrix(correct, 2) == pytest.approx((0.5 + 5 / 6 + 0) / 3)
    assert pass_at_k_matrix(correct, 1) == pytest.approx(avg_at_k(correct))  # pass@1 == avg@n


def test_maj_at_k_hand():
    answers = [["5", "5", "3", None],      # majority 5 (correct)
               ["2", "3", "3", "2"],      # tie 2 vs 3 -> first seen: 2 (wrong)
               [None, None, None, "7"],   # only one vote: 7 (correct)
               [None, None, None, None]]  # no answer: wrong
    correct = [[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]]
    assert maj_at_k(answers, correct, 4) == pytest.approx(2 / 4)
    # first 3 samples only: problem 1 -> 3 has 2 votes (correct); problem 2 -> no vote
    assert maj_at_k(answers, correct, 3) == pytest.approx(2 / 4)
    assert maj_at_k(answers, correct, 1) == pytest.approx(1 / 4)
    with pytest.raises(ValueError, match="k=5"):
        maj_at_k(answers, correct, 5)
    with pytest.raises(ValueError, match="shape"):
        maj_at_k(answers[:2], correct, 2)


def test_bad_matrices():
    with pytest.raises(ValueError, match="rectangular"):
        avg_at_k([[1, 0], [1]])
    with pytest.raises(ValueError, match="2-D"):
        avg_at_k([1, 0, 1])
    with pytest.raises(ValueError, match="empty"):
        avg_at_k(np.zeros((0, 4)))
    with pytest.raises(ValueError, match="0 / 1"):
        avg_at_k([[0.5, 1]])


def test_best_at_k_is_verls_bootstrap_labelled_apart_from_pass_at_k():
    """verl's bootstrap best@k estimates 1 - (1 - c/n)^k: by hand, c = 1 of n = 32 at k = 16 is
    1 - (31/32)^16 = 0.39829..., below the unbiased pass@16 = 16/32 = 0.5 (c = 2: 0.6377 vs 0.7581)."""
    from common.metrics import best_at_k, best_at_k_expected, pass_at_k
    assert best_at_k_expected(32, 1, 16) == pytest.approx(0.398290, abs=1e-6)
    assert best_at_k_expected(32, 2, 16) == pytest.approx(1 - (30 / 32) ** 16)
    assert pass_at_k(32, 1, 16) == pytest.approx(0.5)
    assert pass_at_k(32, 2, 16) == pytest.approx(1 - (16 * 15) / (32 * 31))
    one = [[True] + [False] * 31]
    assert best_at_k(one, 16) == pytest.approx(0.398290, abs=0.03)      # 1000 bootstrap draws
    assert best_at_k(one, 16) == best_at_k(one, 16)                     # seeded: the same value
    assert best_at_k([[True] * 4], 2) == 1.0 and best_at_k([[False] * 4], 2) == 0.0
    with pytest.raises(ValueError):
        best_at_k(one, 0)
