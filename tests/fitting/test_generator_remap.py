"""Properties of ``request_remap``: the Gaussian-copula table that moves a uniform quantile index to the
index of a request at one of the REQUEST_LEVELS random-intercept levels (score sqrt(1 - rho) Z + sqrt(rho) W)."""

import numpy as np
import pytest
from scipy import special

from adsl.fitting.generator import QUANTILE_BITS, REQUEST_LEVELS, request_remap

SIZE = 1 << QUANTILE_BITS


@pytest.mark.parametrize("rho", [0.0, 1e-12])
def test_no_request_effect_is_the_identity_at_every_level(rho):
    """Without a request effect the score is Z itself, so every level maps each mid-point quantile index
    to itself: the table equals the identity that draw_streams substitutes for rho = 0 (all 0..SIZE-1)."""
    table = request_remap(rho)
    assert table.shape == (REQUEST_LEVELS, SIZE)
    assert table.dtype == np.uint16
    np.testing.assert_array_equal(table, np.broadcast_to(np.arange(SIZE), table.shape))


@pytest.mark.parametrize("rho", [0.05, 0.3, 0.6, 0.9])
def test_table_is_point_symmetric(rho):
    """Mid-point quantiles are symmetric (z[i] = -z[SIZE-1-i], w[k] = -w[LEVELS-1-k]) and ndtr(-s) = 1 - ndtr(s),
    so index i at level k and index SIZE-1-i at the mirrored level add up to SIZE-1 exactly (the table has no
    shift towards either end)."""
    table = request_remap(rho).astype(np.int64)
    np.testing.assert_array_equal(table + table[::-1, ::-1], SIZE - 1)


@pytest.mark.parametrize("rho", [0.05, 0.3, 0.6, 0.9])
def test_levels_are_ordered_and_each_level_is_monotone(rho):
    """W's levels are increasing normal quantiles entering the score with a + sign, so at every quantile index
    a higher level never maps lower (and the mean index rises strictly from level to level); within a level
    the map is non-decreasing in the quantile index (a monotone transform of Z)."""
    table = request_remap(rho).astype(np.int64)
    assert (np.diff(table, axis=0) >= 0).all()
    assert (np.diff(table.mean(axis=1)) > 0).all()
    assert (np.diff(table, axis=1) >= 0).all()
    # level 0 is below the median quantile, the top level above it
    assert table[0].mean() < (SIZE - 1) / 2 < table[-1].mean()


@pytest.mark.parametrize("rho", [0.3, 0.6, 0.9])
def test_normal_scores_of_the_table_have_unit_variance(rho):
    """The levels are rescaled to unit variance, so the score sqrt(1 - rho) Z + sqrt(rho) W has variance 1 over the
    equiprobable (level, quantile) cells whatever rho: the normal scores of the remapped indices keep the
    standard normal's spread (mean 0, standard deviation 1 up to the 1/SIZE quantisation)."""
    table = request_remap(rho)
    scores = special.ndtri((table.astype(np.float64) + 0.5) / SIZE)
    assert abs(scores.mean()) < 1e-9
    assert scores.std() == pytest.approx(1.0, abs=2e-3)


@pytest.mark.parametrize("rho", [0.05, 0.2])
def test_marginal_over_levels_stays_uniform(rho):
    """Over the equiprobable levels the remapped index keeps the uniform marginal: each of the SIZE indices is
    hit about LEVELS times (the empirical CDF stays within 0.2 % of (j + 1) / SIZE and no index is missed, the
    lowest and the highest included)."""
    table = request_remap(rho)
    counts = np.bincount(table.ravel(), minlength=SIZE)
    assert counts.sum() == REQUEST_LEVELS * SIZE
    assert counts.min() >= 1
    cdf = np.cumsum(counts) / counts.sum()
    assert np.abs(cdf - np.arange(1, SIZE + 1) / SIZE).max() < 2e-3
