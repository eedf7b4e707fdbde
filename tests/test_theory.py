"""Closed-form theory: known answers against mpmath, identities, bounds, bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rfkernels.numerics import hypergeometric as hg
from rfkernels import draw_projections, estimate, theory
from rfkernels.theory import (
    Geometry,
    exact_mse,
    geometry_from_angle,
    lemma2_mse,
    pair,
    pairs_in_blocks,
    theorem2_bound,
)

from _mpmath_reference import exact_mse as mp_exact_mse

mpmath = pytest.importorskip("mpmath")

KINDS = ("positive", "hyperbolic", "trig")


def _scaled_geometry(d, target, kind, angle=1.0):
    """A geometry whose |x+y|² (|x-y|² for trig) equals ``target``."""
    if d == 1:
        angle = 0.0 if kind != "trig" else np.pi
    g0 = geometry_from_angle(d, 1.0, 1.0, angle)
    q = float(g0.t if kind == "trig" else g0.s)
    scale = np.sqrt(target / q)
    return geometry_from_angle(d, scale, scale, angle)


def _log_rel_err(got_log, ref):
    return abs(got_log - float(mpmath.log(ref)))


# ---------------------------------------------------------------------------
# Known answers (50-digit mpmath)
# ---------------------------------------------------------------------------

GRID_D = (1, 2, 3, 16, 65, 4096)
GRID_S = (1e-8, 1e-4, 0.02, 0.7, 5.0, 30.0, 200.0, 1000.0)


@pytest.mark.parametrize("norms", ["chi", "fixed"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d", GRID_D)
def test_exact_mse_against_mpmath(kind, norms, d):
    """Relative error <= 1e-10 over |x±y|² in [1e-8, 1e3], d in [1, 4096]."""
    worst = 0.0
    for target in GRID_S:
        g = _scaled_geometry(d, target, kind)
        for m in sorted({1, 3, d, 2 * d + 1}):
            for ensemble in ("iid", "orthogonal"):
                got = exact_mse(g, None, m, kind, ensemble=ensemble, norms=norms, log=True)
                ref = mp_exact_mse(d, float(g.half_sq), float(g.s), float(g.t), m, kind, ensemble, norms)
                err = _log_rel_err(float(got), ref)
                worst = max(worst, err)
                assert err <= 1e-10, (target, m, ensemble, float(got), float(mpmath.log(ref)))
    assert worst < 1e-10
    # the exact_mse docstring quotes the largest of these (run with -rP to see them)
    print(f"worst |log got - log ref| = {worst:.2e} (kind={kind}, norms={norms}, d={d})")


@pytest.mark.parametrize("d", [1, 2, 3, 7, 64, 4096])
def test_chi_covariance_difference_cancellation(d):
    """1F1(d; d/2; s/2) - e^s at tiny s keeps full relative accuracy."""
    for s in (1e-8, 1e-6, 1e-3, 0.1, 3.0, 19.0, 21.0, 80.0, 1000.0):
        with mpmath.workdps(50):
            ref = mpmath.hyp1f1(d, mpmath.mpf(d) / 2, mpmath.mpf(s) / 2) - mpmath.exp(mpmath.mpf(s))
        got = hg.log_neg_chi_diff(np.array([s / 2]), d)[0]
        assert abs(got - float(mpmath.log(-ref))) < 1e-12, s


@pytest.mark.parametrize("d", [1, 3, 4, 16, 4096])
def test_chi_trig_covariance_absolute_accuracy(d):
    for t in (1e-6, 0.5, 3.9, 4.1, 40.0, 600.0, 12000.0):
        with mpmath.workdps(50):
            ref = mpmath.hyp1f1(d, mpmath.mpf(d) / 2, -mpmath.mpf(t) / 2, maxprec=100000) - mpmath.exp(
                -mpmath.mpf(t)
            )
        got = hg.chi_diff_neg(np.array([t / 2]), d)[0]
        scale = (1 - np.exp(-t)) ** 2 / 2  # the variance it is added to
        assert abs(got - float(ref)) <= 1e-14 * scale + 1e-300, t


@pytest.mark.parametrize("d", [2, 3, 16, 1000, 4096])
def test_hyp0f1_negative_argument_quadrature(d):
    for y in (0.5, 50.0, 5000.0, 1.2e5, 1e6):
        with mpmath.workdps(40):
            ref = float(mpmath.hyp0f1(mpmath.mpf(d) / 2, -mpmath.mpf(y), maxprec=100000))
        assert abs(hg.hyp0f1_neg(np.array([y]), d)[0] - ref) < 1e-14


# ---------------------------------------------------------------------------
# Identities and bounds
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_exact_iid_equals_lemma2(kind):
    d = 16
    nx, ny, ang = np.meshgrid([0.05, 0.5, 1.0, 3.0], [0.3, 1.0, 2.0], np.linspace(0, np.pi, 7))
    x, y = pair(d, nx, ny, ang)
    for m in (1, 7, 64):
        exact = exact_mse(x, y, m, kind, log=True)
        lemma = lemma2_mse(x, y, m, kind, log=True)
        finite = np.isfinite(lemma)
        np.testing.assert_allclose(exact[finite], lemma[finite], rtol=0, atol=1e-11)
        assert np.array_equal(np.isfinite(exact), finite)


def test_exact_orthogonal_below_theorem2_bound_on_a_grid():
    for d in (2, 4, 16, 128):
        nx, ny, ang = np.meshgrid([0.1, 0.5, 1.0, 2.0], [0.1, 0.7, 1.5], np.linspace(0, np.pi, 9))
        x, y = pair(d, nx, ny, ang)
        for m in sorted({1, 2, d // 2 or 1, d}):
            ort = exact_mse(x, y, m, "positive", ensemble="orthogonal", log=True)
            bound = theorem2_bound(x, y, m, log=True)
            iid = exact_mse(x, y, m, "positive", log=True)
            assert np.all(ort <= bound + 1e-12)
            assert np.all(bound <= iid + 1e-12)


def test_theorem2_is_tight_to_second_order():
    """MSE_iid - MSE_ort -> the bound's correction as |u| -> 0 (expansion of 1F1)."""
    d, m = 16, 16
    x, y = pair(d, 1e-3, 1e-3, 0.5)
    iid = exact_mse(x, y, m, "positive")
    ort = exact_mse(x, y, m, "positive", ensemble="orthogonal")
    bound = theorem2_bound(x, y, m)
    gap_exact, gap_bound = iid - ort, iid - bound
    assert gap_bound > 0
    assert abs(gap_exact / gap_bound - 1) < 1e-5


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
def test_orthogonal_helps_positive_and_hyperbolic(kind):
    nx, ang = np.meshgrid([0.2, 1.0, 2.0], np.linspace(0, np.pi, 5))
    for d in (1, 3, 16):
        x, y = pair(d, nx, nx, ang if d > 1 else np.zeros_like(ang))
        for m in (1, d, 3 * d + 1):
            ort = exact_mse(x, y, m, kind, ensemble="orthogonal", log=True)
            iid = exact_mse(x, y, m, kind, log=True)
            assert np.all(ort <= iid + 1e-12)
            if m > 1 and d > 1:  # strictly, where the gain exceeds rounding
                s = theory.geometry(x, y).s
                moderate = (s > 0.01) & (s < 5)  # the gain fades like e^{-s} beyond
                assert np.all((ort < iid - 1e-6)[moderate])


def test_trig_covariance_changes_sign_at_large_distance():
    """Orthogonal trig features are *worse* than iid at d = 3, |x-y|² = 20."""
    g = geometry_from_angle(3, np.sqrt(5.0), np.sqrt(5.0), np.pi)  # |x - y|² = 20
    assert float(g.t) == pytest.approx(20.0)
    ort = exact_mse(g, None, 3, "trig", ensemble="orthogonal")
    iid = exact_mse(g, None, 3, "trig")
    assert ort > iid
    with mpmath.workdps(30):
        cov = mpmath.hyp1f1(3, 1.5, -10) - mpmath.exp(-20)
    assert cov > 0
    # MSE_ort / MSE_iid = 1 + (P/m) C/V with P/m = 2 and V = (1 - e^{-t})²/2
    np.testing.assert_allclose(ort / iid, 1 + 4 * float(cov) / (1 - np.exp(-20)) ** 2, rtol=1e-10)


def test_single_projection_needs_no_block_structure():
    x, y = pair(8, 0.6, 0.4, 1.2)
    for kind in KINDS:
        for norms in ("chi", "fixed"):
            assert exact_mse(x, y, 1, kind, ensemble="orthogonal", norms=norms) == pytest.approx(
                exact_mse(x, y, 1, kind, norms=norms), rel=1e-13
            )


def test_pairs_in_blocks():
    assert pairs_in_blocks(5, 4, "iid") == 0
    assert pairs_in_blocks(4, 4, "orthogonal") == 12
    assert pairs_in_blocks(9, 4, "orthogonal") == 24  # 4 + 4 + 1
    assert pairs_in_blocks(11, 4, "orthogonal") == 30  # blocks 4, 4, 3: 12 + 12 + 6
    np.testing.assert_array_equal(pairs_in_blocks(np.array([1, 2, 3]), 2, "orthogonal"), [0, 2, 2])


def test_fixed_norms_full_block_hyperbolic_variance_is_fourth_order():
    """With a full block of fixed-norm rows, sum_i (w_i.u)^2 = d|u|^2 exactly."""
    d = 8
    for scale in (1e-2, 1e-3):
        x, y = pair(d, scale, scale, 0.0)
        mse_full = exact_mse(x, y, d, "hyperbolic", ensemble="orthogonal", norms="fixed")
        mse_iid = exact_mse(x, y, d, "hyperbolic", norms="fixed")
        # iid variance ~ s^2 / m; full-block variance and bias² ~ s^4
        s = 4 * scale**2
        assert mse_iid > 0.1 * s**2 / d
        assert mse_full < 10 * s**4


# ---------------------------------------------------------------------------
# Monte Carlo spot checks of the closed forms with the literal estimator
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind,norms",
    [("positive", "chi"), ("trig", "chi"), ("hyperbolic", "fixed"), ("positive", "fixed")],
)
def test_exact_orthogonal_mse_matches_literal_monte_carlo(kind, norms):
    d, m, trials = 4, 6, 20000
    x, y = pair(d, 0.5, 0.4, 1.0)
    rng = np.random.default_rng(20261129)
    sm = np.exp(x @ y)
    err2 = np.empty(trials)
    for i in range(trials):
        w = draw_projections(m, d, ensemble="orthogonal", norms=norms, seed=rng)
        err2[i] = (estimate(x[None], y[None], w, kind)[0, 0] - sm) ** 2
    theory_value = exact_mse(x, y, m, kind, ensemble="orthogonal", norms=norms)
    z = (err2.mean() - theory_value) / (err2.std(ddof=1) / np.sqrt(trials))
    assert abs(z) < 4, (err2.mean(), theory_value, z)
    # and it is distinguishable from the iid value where that differs
    if norms == "chi":
        iid = exact_mse(x, y, m, kind)
        assert abs(theory_value - iid) > 0.05 * iid


# ---------------------------------------------------------------------------
# Overflow and the log domain
# ---------------------------------------------------------------------------


def test_overflow_raises_and_log_stays_finite():
    x, y = pair(16, 20.0, 20.0, 0.0)  # |x+y|² = 1600: MSE ~ exp(1600)
    with pytest.raises(FloatingPointError, match="overflows float64.*log=True"):
        exact_mse(x, y, 4, "positive")
    with pytest.raises(FloatingPointError, match="overflows"):
        lemma2_mse(x, y, 4, "positive")
    value = exact_mse(x, y, 4, "positive", ensemble="orthogonal", log=True)
    iid = exact_mse(x, y, 4, "positive", log=True)
    # log MSE_iid = -2 half_sq + s + log expm1(s) - log m, with half_sq = 400, s = 1600
    assert iid == pytest.approx(-800 + 1600 + 1600 - np.log(4), rel=1e-14)
    assert np.isfinite(value) and value <= iid
    assert np.isfinite(theorem2_bound(x, y, 4, log=True))


def test_mse_is_exactly_zero_where_the_estimator_is_exact():
    # x = -y: positive and hyperbolic estimates are Λ·1 = SM for every draw
    x = np.array([0.7, 0.1, -0.2, 0.0])
    y = -x
    assert exact_mse(x, y, 3, "positive") == 0.0
    assert exact_mse(x, y, 3, "hyperbolic", ensemble="orthogonal", log=True) == -np.inf
    assert exact_mse(x, x, 3, "trig") == 0.0  # x = y: the trig estimate is exact


# ---------------------------------------------------------------------------
# Shapes, broadcasting, symmetry (hypothesis)
# ---------------------------------------------------------------------------

_floats = st.floats(-1.5, 1.5, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(
    d=st.integers(1, 6),
    batch=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    m=st.integers(1, 9),
    kind=st.sampled_from(KINDS),
    ensemble=st.sampled_from(["iid", "orthogonal"]),
    norms=st.sampled_from(["chi", "fixed"]),
    data=st.data(),
)
def test_shapes_broadcasting_and_symmetry(d, batch, m, kind, ensemble, norms, data):
    shape = tuple(batch) + (d,)
    n = int(np.prod(shape))
    x = np.array(data.draw(st.lists(_floats, min_size=n, max_size=n))).reshape(shape)
    y = np.array(data.draw(st.lists(_floats, min_size=d, max_size=d)))  # broadcasts
    out = exact_mse(x, y, m, kind, ensemble=ensemble, norms=norms)
    assert np.shape(out) == tuple(batch)
    assert np.all(np.isfinite(out)) and np.all(np.asarray(out) >= 0)
    swapped = exact_mse(np.broadcast_to(y, shape), x, m, kind, ensemble=ensemble, norms=norms)
    np.testing.assert_allclose(out, swapped, rtol=1e-12, atol=0)
    # elementwise evaluation agrees with the batched one
    flat_x = x.reshape(-1, d)
    one = [float(exact_mse(xi, y, m, kind, ensemble=ensemble, norms=norms)) for xi in flat_x]
    np.testing.assert_allclose(np.ravel(out), one, rtol=1e-12, atol=0)


def test_m_broadcasts_against_the_batch():
    x, y = pair(8, np.array([0.3, 0.6]), 0.5, 1.0)
    out = exact_mse(x, y, np.array([[1], [4], [16]]), "positive", ensemble="orthogonal")
    assert out.shape == (3, 2)
    assert np.all(np.diff(out, axis=0) < 0)


def test_geometry_from_angle_is_accurate_near_pi():
    g = geometry_from_angle(3, 1.0, 1.0, np.pi - 1e-9)
    assert float(g.s) == pytest.approx(1e-18, rel=1e-6)  # |x+y|² = 4 cos²(θ/2)
    x, y = pair(3, 1.0, 1.0, np.pi - 1e-9)
    assert float(theory.geometry(x, y).s) == pytest.approx(1e-18, rel=1e-6)


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


def test_bad_input():
    x, y = pair(4, 0.5, 0.5, 1.0)
    with pytest.raises(ValueError, match="x must be finite"):
        exact_mse(np.array([np.nan, 0, 0, 0]), y, 2, "positive")
    with pytest.raises(ValueError, match="y must be finite"):
        lemma2_mse(x, np.array([np.inf, 0, 0, 0]), 2, "trig")
    with pytest.raises(ValueError, match="dimension mismatch: x has d=4, y has d=3"):
        exact_mse(x, y[:3], 2, "positive")
    with pytest.raises(ValueError, match="m must be >= 1"):
        exact_mse(x, y, 0, "positive")
    with pytest.raises(TypeError, match="m must hold integers"):
        exact_mse(x, y, 2.5, "positive")
    with pytest.raises(ValueError, match="kind must be one of 'trig', 'positive', 'hyperbolic'"):
        exact_mse(x, y, 2, "gaussian")
    with pytest.raises(ValueError, match="no closed form for the orthogonal-unfixed-qr ensemble"):
        exact_mse(x, y, 2, "positive", ensemble="orthogonal-unfixed-qr")
    with pytest.raises(ValueError, match="ensemble must be one of 'iid', 'orthogonal'"):
        exact_mse(x, y, 2, "positive", ensemble="haar")
    with pytest.raises(ValueError, match="norms must be one of 'chi', 'fixed'"):
        exact_mse(x, y, 2, "positive", norms="unit")
    with pytest.raises(ValueError, match="norms='fixed' is not supported by Lemma 2"):
        lemma2_mse(x, y, 2, "positive", norms="fixed")
    with pytest.raises(ValueError, match="norms='fixed' is not supported by Theorem 2"):
        theorem2_bound(x, y, 2, norms="fixed")
    with pytest.raises(ValueError, match="Theorem 2 holds for m <= d"):
        theorem2_bound(x, y, 5)
    with pytest.raises(ValueError, match="angle must lie in"):
        pair(4, 1.0, 1.0, 4.0)
    with pytest.raises(ValueError, match="angle must be 0 or pi when d == 1"):
        pair(1, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="norm_x and norm_y must be >= 0"):
        geometry_from_angle(4, -1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="does not broadcast"):
        exact_mse(np.stack([x, x, x]), y, np.array([1, 2]), "positive")
    with pytest.raises(ValueError, match="x must have d >= 1"):
        exact_mse(np.zeros((2, 0)), np.zeros((2, 0)), 1, "positive")


def test_check_command_passes():
    from rfkernels.commands.cli import main

    assert main(["check"]) == 0


def test_check_command_detects_a_planted_violation(monkeypatch, capsys):
    from rfkernels.commands.cli import main

    real = theory.theorem2_bound_from_geometry

    def too_small(*args, **kwargs):
        return real(*args, **kwargs) - 1.0  # a bound 1 nat too tight must be caught

    monkeypatch.setattr(theory, "theorem2_bound_from_geometry", too_small)
    assert main(["check"]) == 1
    assert "violation" in capsys.readouterr().out


def test_docstring_examples():
    import doctest

    result = doctest.testmod(theory, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 5 and result.failed == 0


def test_huge_integer_arguments_are_refused_not_wrapped():
    x, y = pair(4, 0.5, 0.5, 1.0)
    for m in (2**63, 1e20):
        with pytest.raises(ValueError, match="m must hold integers below 2\\*\\*62"):
            exact_mse(x, y, m, "positive")


def test_trig_mse_at_vanishing_distance_is_finite():
    """|x - y|^2 = 3e-179: D(-t/2) underflows and 1/V overflows; C/V -> -1/(d + 2)."""
    x, y = np.array([0.0]), np.array([5.783319306764868e-90])  # found by hypothesis
    assert exact_mse(x, y, 1, "trig") == 0.0  # t^2/2 = 5e-358 underflows: not an error
    assert np.isfinite(exact_mse(x, y, 1, "trig", log=True))
    for d, m in ((1, 3), (3, 3), (3, 7), (16, 33)):
        for t in (1e-99, 1e-101, 1e-200):
            g = Geometry(np.array(float(d)), np.array(0.5), np.array(2.0 - t), np.array(t))
            got = float(exact_mse(g, None, m, "trig", ensemble="orthogonal", log=True))
            q, r = divmod(m, d)
            pairs = q * d * (d - 1) + r * (r - 1)
            # Λ^-2 (t^2/2) / m (1 - (P/m) / (d + 2)), to relative O(t)
            want = 1.0 + 2 * np.log(t) - np.log(2 * m) + np.log1p(-pairs / m / (d + 2))
            assert got == pytest.approx(want, abs=1e-12), (d, m, t)


def test_one_exact_mse_function_the_old_names_warn_and_agree():
    """exact_mse takes pairs or a Geometry (and a name or a validated Estimator); the three old
    doors are deprecated aliases that warn and give the same bits (CHANGELOG.md)."""
    from rfkernels.estimators import estimator

    x, y = pair(8, 0.6, 0.4, [0.3, 1.2, 2.5])
    g = theory.geometry(x, y)
    want = exact_mse(x, y, 5, "hyperbolic", ensemble="orthogonal", log=True)
    assert np.array_equal(exact_mse(g, None, 5, "hyperbolic", ensemble="orthogonal", log=True), want)
    spec = estimator("hyperbolic", ensemble="orthogonal", batch=True)
    assert np.array_equal(exact_mse(x, y, 5, spec, log=True), want)
    with pytest.warns(DeprecationWarning, match="theory.exact_mse_from_geometry is deprecated"):
        old = theory.exact_mse_from_geometry(g, 5, "hyperbolic", ensemble="orthogonal", log=True)
    assert np.array_equal(old, want)
    with pytest.warns(DeprecationWarning, match="log_exact_mse is deprecated"):
        assert np.array_equal(theory.log_exact_mse(x, y, 5, "hyperbolic", ensemble="orthogonal"), want)
    with pytest.warns(DeprecationWarning, match="exact_log_mse is deprecated"):
        assert np.array_equal(theory.exact_log_mse(g, 5, spec), want)
    with pytest.raises(ValueError, match="kind is an Estimator: its ensemble, .* are its own; leave out ensemble"):
        exact_mse(x, y, 5, spec, ensemble="orthogonal")
    with pytest.raises(ValueError, match="y must be None"):
        exact_mse(g, y, 5, "positive")
    with pytest.raises(ValueError, match="vectors go with a theory.Geometry"):
        exact_mse(x, y, 5, "positive", vectors=(x, y))
