"""The attention study's regime map, its lean FAVOR passes and the first-order theory (issue 12)."""

import math

import numpy as np
import pytest
from rfkernels.analysis import (
    attention_mse,
    attention_mse_first_order,
    attention_regime,
    local_slopes,
    study_inputs,
)
from rfkernels.analysis.attention import DEFAULT_KINDS, LeanFavor

from rfkernels.attention import favor_attention, softmax_attention
from rfkernels.projections import draw_projections


def test_default_kinds_are_the_papers_three():
    t = attention_mse(32, 4, [2], samples=2, seed=0)
    assert DEFAULT_KINDS == ("trig", "positive", "hyperbolic")
    assert t.meta["kinds"] == list(DEFAULT_KINDS)


@pytest.mark.parametrize("kind", DEFAULT_KINDS)
@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_lean_passes_equal_favor_attention(kind, scale):
    q, k, v = study_inputs(300, 8, 0, input_scale=scale, seed=1)
    lean = LeanFavor(q, k, v)
    for m in (2, 24):
        w = draw_projections(m, 8, ensemble="orthogonal", seed=m)
        out, n_bad = lean.output(w, kind, "divide")
        ref = favor_attention(q, k, v, w, kind, nonpositive="divide")
        assert n_bad == ref.n_nonpositive_denominators
        ok = np.isfinite(ref.output)
        np.testing.assert_array_equal(np.isfinite(out), ok)
        scale_out = np.max(np.abs(ref.output[ok]))
        np.testing.assert_allclose(out[ok], ref.output[ok], rtol=0, atol=1e-9 * scale_out)


def test_local_slopes():
    assert local_slopes([2, 4, 8], [1.0, 0.5, 0.25]) == pytest.approx([-1, -1, -1])
    s = local_slopes([2, 4, 8], [1.0, None, 0.25])
    assert s[0] is None and s[1] == pytest.approx(-1) and s[2] is None


def test_regime_is_paired_across_scales_and_equals_the_study():
    reg = attention_regime(128, 4, [0.5, 1.0], [2, 8, 32], samples=3, seed=2)
    one = attention_mse(128, 4, [2, 8, 32], samples=3, seed=2, input_scale=1.0)
    for r in one.rows:
        got = next(x for x in reg.rows if x["input_scale"] == 1.0 and x["m"] == r["m"]
                   and x["kind"] == r["kind"] and x["ensemble"] == r["ensemble"])
        assert got["mse_mean"] == r["mse_mean"]
    comps = {(c["input_scale"], c["m"], c["comparison"], c["within"]) for c in reg.comparisons}
    assert len(comps) == 2 * 3 * (2 + 3)
    for c in reg.comparisons:
        assert not (c["holds"] and c["reversed"])
    with pytest.raises(ValueError, match="input_scales"):
        attention_regime(16, 2, [], [2], samples=2)


# ------------------------------------------------------------ first-order theory

def _monte_carlo(q, k, v, m, kind, draws, seed):
    exact = softmax_attention(q, k, v)
    errs = np.empty(draws)
    for i in range(draws):
        w = draw_projections(m, q.shape[1], seed=np.random.SeedSequence(seed, spawn_key=(i,)))
        out = favor_attention(q, k, v, w, kind, nonpositive="divide").output
        errs[i] = np.mean((out - exact) ** 2)
    return errs.mean(), errs.std(ddof=1) / math.sqrt(draws)


@pytest.mark.parametrize("kind", DEFAULT_KINDS)
def test_first_order_matches_monte_carlo_at_small_scale(kind):
    # L = 32, d = d_v = 4, |q|^2 ~ 0.04 (sigma = 0.2): the expansion holds; m = 256 makes
    # the second-order bias ~1/m relative, below the Monte Carlo error of 400 draws (~4%)
    q, k, v = study_inputs(32, 4, 0, input_scale=0.2, seed=1)
    th = attention_mse_first_order(q, k, v, 256, kind)
    assert th.stderr is None and th.all_rows and th.per_row.shape == (32,)
    mc, se = _monte_carlo(q, k, v, 256, kind, 400, seed=5)
    assert abs(mc - th.mse) / se < 4, (mc, th.mse, se)


@pytest.mark.parametrize("kind", DEFAULT_KINDS)
def test_normaliser_relative_variance_matches_monte_carlo(kind):
    # Var(D_hat)/D^2 from the same closed forms with a_j = 1; tame inputs (sigma = 0.2)
    from rfkernels.features import estimate

    q, k, v = study_inputs(32, 4, 0, input_scale=0.2, seed=1)
    m = 8
    th = attention_mse_first_order(q, k, v, m, kind, normalisers=True)
    assert attention_mse_first_order(q, k, v, m, kind).normaliser_rel_var is None
    D = np.exp(q @ k.T).sum(axis=1)
    per = np.empty(3000)
    for t in range(per.size):
        w = draw_projections(m, 4, seed=np.random.SeedSequence(11, spawn_key=(t,)))
        per[t] = np.mean(((estimate(q, k, w, kind).sum(axis=1) - D) / D) ** 2)
    z = (per.mean() - th.normaliser_rel_var) / (per.std(ddof=1) / math.sqrt(per.size))
    assert abs(z) < 4, (per.mean(), th.normaliser_rel_var, z)
    # exactly 1/m, like the MSE
    th4 = attention_mse_first_order(q, k, v, 4 * m, kind, normalisers=True)
    assert th4.normaliser_rel_var == pytest.approx(th.normaliser_rel_var / 4, rel=1e-12)
    assert th4.mse == pytest.approx(th.mse / 4, rel=1e-12)


def test_first_order_is_exactly_one_over_m_and_subsamples_rows():
    q, k, v = study_inputs(64, 4, 0, input_scale=0.5, seed=1)
    a = attention_mse_first_order(q, k, v, 8, "trig")
    b = attention_mse_first_order(q, k, v, 64, "trig")
    assert a.mse == pytest.approx(8 * b.mse, rel=1e-12)
    sub = attention_mse_first_order(q, k, v, 8, "trig", queries=16, seed=0)
    assert sub.stderr is not None and sub.rows.size == 16
    np.testing.assert_allclose(sub.per_row, a.per_row[sub.rows], rtol=1e-10)
    assert abs(sub.mse - a.mse) < 5 * sub.stderr


def test_first_order_fails_where_rare_huge_features_dominate():
    """MATH.md's failure case: positive, L = 64, d = 4, |q|^2 ~ 1, m = 64: far too high.

    The positive-feature output is a convex combination of the values, so its error is
    bounded, while E[g g'] is dominated by rare huge products: the expansion fails.
    """
    q, k, v = study_inputs(64, 4, 0, input_scale=1.0, seed=3)
    th = attention_mse_first_order(q, k, v, 64, "positive")
    mc, _ = _monte_carlo(q, k, v, 64, "positive", 100, seed=7)
    assert th.mse > 10 * mc, (th.mse, mc)


def test_first_order_bad_input():
    q, k, v = study_inputs(8, 2, 0, seed=0)
    with pytest.raises(ValueError, match="iid projections only"):
        attention_mse_first_order(q, k, v, 4, "positive", ensemble="orthogonal")
    with pytest.raises(ValueError, match="kind"):
        attention_mse_first_order(q, k, v, 4, "elu1")
    with pytest.raises(ValueError, match="V must have one row per key"):
        attention_mse_first_order(q, k, v[:3], 4, "positive")
    with pytest.raises((ValueError, TypeError), match="m"):
        attention_mse_first_order(q, k, v, 0, "positive")


def test_study_takes_oprf_with_its_automatic_a():
    """Non-default kind oprf: A = A* of each input's mean pair, as favor_attention(A="auto")."""
    import numpy as np

    from rfkernels import draw_projections, favor_attention, softmax_attention
    from rfkernels.analysis import attention_inputs, attention_mse

    table = attention_mse(L=32, d=4, m_values=[8], kinds=("oprf",), ensembles=("iid",),
                          samples=2, seed=3)
    row = table.rows[0] if hasattr(table, "rows") else table[0]
    assert row["kind"] == "oprf" and row["r"] == 8 and np.isfinite(row["mse_mean"])
    Q, K, V = attention_inputs(32, 4, seed=np.random.SeedSequence(3, spawn_key=(0, 0)))
    W = draw_projections(8, 4, seed=1)
    out = favor_attention(Q, K, V, W, "oprf", A="auto")
    assert out.A < 0 and np.isfinite(np.mean((out.output - softmax_attention(Q, K, V)) ** 2))
