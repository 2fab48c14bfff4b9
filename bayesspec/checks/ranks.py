"""Rank statistics of simulation-based calibration (pure numpy and scipy).

The rank of a true value among posterior draws is uniform when the posterior is the one
the model defines (Talts et al. 2018). Here: thinning, ranks, a chi-square test of binned
ranks with exact bin probabilities, and the simultaneous ECDF band and test of Säilynoja
et al. (2022). Used by :mod:`bayesspec.checks.sbc` and :mod:`bayesspec.reporting.plots`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BAND_PROB = 0.99

def thin_indices(draws: int, chains: int, thin_to: int) -> tuple[int, np.ndarray]:
    """Every ``step``-th draw of each chain, ``step`` chosen to keep about ``thin_to``."""
    step = max(1, (draws * chains) // max(thin_to, 1))
    return step, np.arange(step - 1, draws, step)


def ranks_of(draws: np.ndarray, truth: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rank of each ``truth[j]`` among ``draws[:, j]`` (0..S), ties broken at random."""
    below = (draws < truth).sum(axis=0)
    equal = (draws == truth).sum(axis=0)
    return below + rng.integers(0, equal + 1)


def chi_square_pvalues(ranks: np.ndarray, max_rank: int, bins: int) -> np.ndarray:
    """Per column: chi-square test that ranks are uniform on 0..max_rank, in ``bins``.

    Bins split the max_rank + 1 values as evenly as possible; their exact probabilities
    are used, so max_rank + 1 need not be a multiple of ``bins``.
    """
    from scipy import stats

    ranks = np.atleast_2d(np.asarray(ranks)).reshape(len(ranks), -1)
    n = ranks.shape[0]
    bin_of_value = (np.arange(max_rank + 1) * bins) // (max_rank + 1)
    expected = n * np.bincount(bin_of_value, minlength=bins) / (max_rank + 1)
    observed = np.stack([np.bincount(bin_of_value[ranks[:, j]], minlength=bins)
                         for j in range(ranks.shape[1])])
    statistic = ((observed - expected) ** 2 / expected).sum(axis=1)
    return stats.chi2.sf(statistic, bins - 1)


def default_bins(n: int, max_rank: int) -> int:
    """About ten expected ranks per bin, between 5 and 20 bins."""
    return int(min(max_rank + 1, max(5, min(20, n // 10))))


def _ecdf_thresholds(max_rank: int, points: int = 100) -> np.ndarray:
    """Rank thresholds j: the ECDF is evaluated as the share of ranks below j."""
    return np.unique(np.linspace(1, max_rank, min(points, max_rank)).round().astype(int))


def _counts_below(ranks: np.ndarray, max_rank: int, thresholds: np.ndarray) -> np.ndarray:
    """Per column of ``ranks`` (simulations, columns): how many are below each threshold."""
    ranks = np.asarray(ranks, dtype=int)
    columns = ranks.shape[1]
    offset = ranks + (max_rank + 1) * np.arange(columns)[None, :]
    histogram = np.bincount(offset.ravel(), minlength=columns * (max_rank + 1))
    cumulative = np.cumsum(histogram.reshape(columns, max_rank + 1), axis=1)
    return cumulative[:, thresholds - 1]


def _tail_probability(counts: np.ndarray, n: int, z: np.ndarray) -> np.ndarray:
    """Two-sided binomial tail probability of each count (the ECDF test's pointwise p).

    ``counts`` is (rows, points), ``z`` the uniform CDF at each point; evaluated through
    a (points, n + 1) table, since scipy's binomial CDF is slow per element.
    """
    from scipy import stats

    values = np.arange(n + 1)[None, :]
    table = np.minimum(1.0, 2 * np.minimum(stats.binom.cdf(values, n, z[:, None]),
                                           stats.binom.sf(values - 1, n, z[:, None])))
    return table[np.arange(len(z))[None, :], counts]


@dataclass
class EcdfBand:
    """Simultaneous band of the rank ECDF under uniformity (Säilynoja et al. 2022)."""

    z: np.ndarray         # evaluation points (the uniform CDF there)
    lower: np.ndarray     # ECDF bounds, as shares
    upper: np.ndarray
    null_statistic: np.ndarray  # smallest pointwise tail probability, per null draw
    n: int
    max_rank: int

    def p_values(self, ranks: np.ndarray) -> np.ndarray:
        """Per column: share of null ECDFs at least as extreme as the observed one."""
        statistic = self.statistic(ranks)
        return (1 + (self.null_statistic[None, :] <= statistic[:, None]).sum(axis=1)) / (
            1 + self.null_statistic.size)

    def counts(self, ranks: np.ndarray) -> np.ndarray:
        """(coefficients, points): how many ranks fall below each threshold."""
        thresholds = np.rint(self.z * (self.max_rank + 1)).astype(int)
        return _counts_below(ranks, self.max_rank, thresholds)

    def statistic(self, ranks: np.ndarray) -> np.ndarray:
        return _tail_probability(self.counts(ranks), self.n, self.z).min(axis=1)

    def outside(self, ranks: np.ndarray) -> np.ndarray:
        share = self.counts(ranks) / self.n
        return ((share < self.lower - 1e-12) | (share > self.upper + 1e-12)).any(axis=1)


def ecdf_band(n: int, max_rank: int, *, prob: float = BAND_PROB, null_draws: int = 10000,
              seed: int = 0) -> EcdfBand:
    """The simultaneous ``prob`` band of the ECDF of ``n`` uniform ranks on 0..max_rank.

    Simulation method: the pointwise binomial band is narrowed (its level gamma chosen)
    until the whole null ECDF stays inside it with probability ``prob``.
    """
    from scipy import stats

    thresholds = _ecdf_thresholds(max_rank)
    z = thresholds / (max_rank + 1)
    rng = np.random.default_rng(seed)
    null = rng.integers(0, max_rank + 1, size=(n, null_draws))
    counts = _counts_below(null, max_rank, thresholds)
    statistic = _tail_probability(counts, n, z).min(axis=1)
    gamma = float(np.quantile(statistic, 1 - prob))
    lower = stats.binom.ppf(gamma / 2, n, z) / n
    upper = stats.binom.ppf(1 - gamma / 2, n, z) / n
    return EcdfBand(z=z, lower=lower, upper=upper, null_statistic=statistic, n=n,
                    max_rank=max_rank)
