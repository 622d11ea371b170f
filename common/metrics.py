"""Evaluation metrics over sampled responses: avg@k, pass@k (unbiased), verl's bootstrap best@k, maj@k. Pure
functions.

Two pass@k estimators: ``pass_at_k`` is the unbiased estimator (Chen et al. 2021; the primary one, what
``pass@k`` means in every output). ``best_at_k`` is verl's validation metric ``best@k/mean``
(verl/trainer/ppo/metric_utils.py, ``bootstrap_metric``): per problem, 1000 draws of k of the n samples WITH
replacement (numpy seed 42 for every problem), the mean of their max, averaged over problems; it estimates
``1 - (1 - c/n)^k`` (``best_at_k_expected``), which is below the unbiased value whenever 0 < c < n, e.g.
c = 1 of n = 32 at k = 16: 0.398 against 0.5.

Conventions: ``correct`` is a 2-D array-like ``[n_problems, n_samples]`` of bools (or 0/1); every problem has
the same number of samples. The paper reports avg@32 and pass@16 (from 32 samples) for math and avg@8 for
GPQA / MMLU-Pro (ARMOR.md §6).
"""
from __future__ import annotations

from collections import Counter
from typing import Hashable, Sequence

import numpy as np

__all__ = ["avg_at_k", "pass_at_k", "pass_at_k_matrix", "best_at_k", "best_at_k_expected", "maj_at_k",
           "per_problem_accuracy"]


def _as_matrix(correct, what: str = "correct") -> np.ndarray:
    try:
        arr = np.asarray(correct, dtype=float)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{what} must be a rectangular [n_problems, n_samples] array (same number of "
                         f"samples for every problem): {e}") from None
    if arr.ndim != 2:
        raise ValueError(f"{what} must be 2-D [n_problems, n_samples], got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{what} is empty (shape {arr.shape})")
    if not np.all((arr == 0) | (arr == 1)):
        raise ValueError(f"{what} must contain only booleans / 0 / 1")
    return arr


def per_problem_accuracy(correct) -> np.ndarray:
    """Mean correctness of each problem's samples, shape [n_problems]."""
    return _as_matrix(correct).mean(axis=1)


def avg_at_k(correct) -> float:
    """avg@k: accuracy averaged over all k samples of all problems (k = n_samples).

    Equal to the mean over problems of each problem's sample accuracy (every problem has k samples).
    """
    return float(_as_matrix(correct).mean())


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator for one problem with ``n`` samples of which ``c`` are correct (Chen et al.
    2021).

    pass@k = 1 - C(n-c, k) / C(n, k), computed stably as 1 - prod_{i=n-c+1}^{n} (1 - k/i).
    Raises ValueError if k < 1 or k > n (naming k and n), or c is outside [0, n].
    """
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"pass@k: {name} must be an integer, got {v!r}")
    n, c, k = int(n), int(c), int(k)
    if n < 1:
        raise ValueError(f"pass@k: n (samples) must be >= 1, got n={n}")
    if k < 1 or k > n:
        raise ValueError(f"pass@k: k must satisfy 1 <= k <= n, got k={k}, n={n}")
    if c < 0 or c > n:
        raise ValueError(f"pass@k: c (correct samples) must satisfy 0 <= c <= n, got c={c}, n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=float)))


def pass_at_k_matrix(correct, k: int) -> float:
    """Mean over problems of the unbiased pass@k, with n = n_samples per problem (ValueError if k > n)."""
    arr = _as_matrix(correct)
    n = arr.shape[1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 or k > n:
        raise ValueError(f"pass@k: k must satisfy 1 <= k <= n, got k={k!r}, n={n} samples per problem")
    counts = arr.sum(axis=1).astype(int)
    return float(np.mean([pass_at_k(n, int(c), int(k)) for c in counts]))


def best_at_k_expected(n: int, c: int, k: int) -> float:
    """What verl's bootstrap best@k estimates for one problem: P(some of k draws with replacement from n
    samples, c correct, is correct) = 1 - (1 - c/n)^k. ValueError unless 1 <= k and 0 <= c <= n."""
    if k < 1 or n < 1 or not 0 <= c <= n:
        raise ValueError(f"best@k: need k >= 1, n >= 1 and 0 <= c <= n, got k={k}, n={n}, c={c}")
    return float(1.0 - (1.0 - c / n) ** k)


def best_at_k(correct, k: int, n_bootstrap: int = 1000, seed: int = 42) -> float:
    """verl's ``best@k/mean`` (labelled best@k, never pass@k), correct [n_problems, n_samples] -> float.

    Per problem: ``n_bootstrap`` subsets of k sample indices drawn with replacement by a numpy generator
    seeded ``seed`` afresh for each problem (verl's ``np.random.seed(seed)`` per call), the max correctness
    of each subset, their mean; then the mean over problems. k may exceed n (draws repeat)."""
    arr = _as_matrix(correct)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"best@k: k must be an integer >= 1, got {k!r}")
    n = arr.shape[1]
    vals = []
    for row in arr:
        rng = np.random.RandomState(seed)
        draws = np.stack([rng.choice(n, size=k, replace=True) for _ in range(n_bootstrap)])
        vals.append(row[draws].max(axis=1).mean())
    return float(np.mean(vals))


def maj_at_k(answers: Sequence[Sequence[Hashable | None]], correct, k: int) -> float:
    """maj@k: fraction of problems whose majority answer among the FIRST k samples is correct.

    answers: [n_problems, n_samples] canonical answers (e.g. extracted strings; None = no answer, not voted).
        Equivalent answers written differently count as different votes unless the caller canonicalizes them.
    correct: [n_problems, n_samples] correctness of each sample.
    Ties go to the answer seen first; a problem with no answer among its first k samples counts as wrong.
    """
    arr = _as_matrix(correct)
    n_prob, n = arr.shape
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 or k > n:
        raise ValueError(f"maj@k: k must satisfy 1 <= k <= n, got k={k!r}, n={n} samples per problem")
    if len(answers) != n_prob or any(len(a) != n for a in answers):
        raise ValueError(f"maj@k: answers must have the shape of correct [{n_prob}, {n}]")
    hits = 0
    for i in range(n_prob):
        votes = Counter()
        first: dict = {}
        for j in range(k):
            a = answers[i][j]
            if a is None:
                continue
            votes[a] += 1
            first.setdefault(a, j)
        if not votes:
            continue
        best = max(votes, key=lambda a: (votes[a], -first[a]))
        hits += int(arr[i, first[best]] == 1)
    return hits / n_prob
