"""The Gaussian (RBF) kernel's closed forms (kernel="gaussian", kind "offset") against mpmath.

The reference below is written from MATH.md, "The Gaussian (RBF) kernel",
in the Gaussian normalisation directly (not as softmax MSE times a factor):
with x' = sqrt(2 gamma) x, y' likewise, h = (|x'|^2 + |y'|^2)/2,
s = |x' + y'|^2, t = |x' - y'|^2 and k = exp(-t/2) = exp(-gamma |x - y|^2),
projection i contributes the term

- trig (and offset, whose phase term adds 1/(2m)): cos(w_i . z'),
- positive: exp(-2h) exp(w_i . u'),  hyperbolic: exp(-2h) cosh(w_i . u'),

and the MSE is (E f - k)^2 + (m Var f + P Cov)/m^2, P = sum_j b_j (b_j - 1)
over the blocks of d rows. The moments E exp(w . a) (E cos for a = i z') are
1F1(n d/2; d/2; q/2) for chi norms and 0F1(; d/2; n d q/4) for rows of length
sqrt(d), n = 1 for one row and n = 2 for w_i + w_j of two orthogonal rows
(|w_i +- w_j| = sqrt(2d) with a uniform direction for fixed norms; chi^2_2d
for chi norms); E cos^2 = (1 + M(4q))/2, E cos(w_i.z) cos(w_j.z) =
(E cos((w_i - w_j).z) + E cos((w_i + w_j).z))/2 = M_2(q). mpmath works at 50
digits. Run with -rP to see the worst errors found.
"""

import math

import mpmath as mp
import numpy as np
import pytest

from rfkernels import theory
from rfkernels.analysis import monte_carlo_mse
from rfkernels.theory import Geometry, exact_mse

from _mpmath_reference import exact_mse as mp_softmax_mse

DPS = 50
GRID_D = (1, 2, 3, 16, 64)
GRID_T = (1e-6, 1e-3, 0.1, 1.0, 4.0, 15.0, 50.0)  # t = |x' - y'|^2, the scaled pair's
GAMMAS = (1e-3, 0.5, 10.0)
KINDS = ("trig", "offset", "positive", "hyperbolic")


def _moment(d, q, norms, n):
    d = mp.mpf(d)
    if norms == "chi":
        return mp.hyp1f1(n * d / 2, d / 2, q / 2, maxprec=200000, zeroprec=400)
    return mp.hyp0f1(d / 2, n * d * q / 4, maxprec=200000, zeroprec=400)


def _pairs(m, d, ensemble):
    if ensemble == "iid":
        return 0
    q, r = divmod(m, d)
    return q * d * (d - 1) + r * (r - 1)


def gaussian_mse_mp(d, h, s, t, ms, kind, ensemble, norms):
    """{m: MSE} of the Gaussian-kernel estimate at the scaled invariants (h, s, t), 50 digits."""
    with mp.workdps(DPS):
        h, s, t = mp.mpf(h), mp.mpf(s), mp.mpf(t)
        k = mp.exp(-t / 2)
        if kind in ("trig", "offset"):
            pref, q = mp.mpf(1), -t
        else:
            pref, q = mp.exp(-2 * h), s
        m1, m14, m2 = (_moment(d, q, norms, 1), _moment(d, 4 * q, norms, 1),
                       _moment(d, q, norms, 2))
        mean = pref * m1
        second = pref**2 * (m14 if kind == "positive" else (1 + m14) / 2)
        var, cov = second - mean**2, pref**2 * m2 - mean**2
        out = {}
        for m in ms:
            mse = (mean - k) ** 2 + (m * var + _pairs(m, d, ensemble) * cov) / mp.mpf(m) ** 2
            out[m] = mse + (1 / mp.mpf(2 * m) if kind == "offset" else 0)
        return out


def mp_log(v):
    """float(log v), taken at DPS digits: mpmath 1.3's log of a DPS-digit number just above a
    power of two, taken at 53 bits, drops the power (log(0.25 + 4e-27) -> 1.6e-26)."""
    with mp.workdps(DPS):
        return float(mp.log(v))


def _geom(d, h, s, t):
    return Geometry(*(np.asarray(v, dtype=np.float64) for v in (d, h, s, t)))


def _scaled_invariants(t):
    """(h, s, t) of a scaled pair with |x'| = |y'| at a right angle: s = t, h = t/2."""
    return t / 2, t, t


@pytest.mark.parametrize("norms", ["chi", "fixed"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d", GRID_D)
def test_gaussian_exact_mse_against_mpmath(kind, norms, d):
    """Relative error <= 1e-9 over t in [1e-6, 50], gamma in {1e-3, 0.5, 10}, iid and orthogonal."""
    ms = sorted({1, 3, d, 2 * d + 1})
    worst, where = 0.0, None
    for ensemble in ("iid", "orthogonal"):
        refs = {t: {m: mp_log(v) for m, v in
                    gaussian_mse_mp(d, *_scaled_invariants(t), ms, kind, ensemble, norms).items()}
                for t in GRID_T}
        for gamma in GAMMAS:
            h, s, t = (np.array([_scaled_invariants(t)[i] for t in GRID_T]) / (2 * gamma)
                       for i in range(3))
            geom = _geom(d, h, s, t)  # of the unscaled pair
            for m in ms:
                got = exact_mse(geom, None, m, kind, ensemble=ensemble, norms=norms,
                                              kernel="gaussian", gamma=gamma, log=True)
                for tz, g in zip(GRID_T, got):
                    err = abs(float(g) - refs[tz][m])
                    if err > worst:
                        worst, where = err, (ensemble, gamma, m, tz)
                    assert err <= 1e-9, (ensemble, gamma, m, tz, float(g), refs[tz][m])
    print(f"worst |log got - log ref| = {worst:.2e} at (ensemble, gamma, m, t) = {where} "
          f"(kind={kind}, norms={norms}, d={d})")


@pytest.mark.parametrize("kind", ["trig", "positive", "hyperbolic"])
def test_reference_is_the_softmax_reference_times_the_factor(kind):
    """The reference above against tests/_mpmath_reference.py (softmax) times exp(-4h) (MSE factor)."""
    for d in (1, 3, 16):
        for t in (1e-3, 1.0, 15.0):
            for ensemble, norms in (("iid", "chi"), ("orthogonal", "chi"), ("orthogonal", "fixed")):
                h, s, t_ = _scaled_invariants(t)
                ref = gaussian_mse_mp(d, h, s, t_, [d + 2], kind, ensemble, norms)[d + 2]
                with mp.workdps(DPS):
                    soft = mp_softmax_mse(d, h, s, t_, d + 2, kind, ensemble, norms)
                    assert abs(soft * mp.exp(-2 * mp.mpf(h)) / ref - 1) < mp.mpf(10) ** -30


@pytest.mark.parametrize("d", [2, 3, 5])
def test_fixed_norm_moments_by_sampling(d):
    """The fixed-norm moments the reference uses, by sampling blocks (|z| < 4).

    Rows of length sqrt(d): E cos(w.z) = 0F1(; d/2; -d t/4), E cos^2 = (1 + 0F1(; d/2; -d t))/2,
    and for two rows of one orthogonal block E cos(w_i.z) cos(w_j.z) = 0F1(; d/2; -2 d t/4).
    """
    from rfkernels import draw_projections

    n, t = 40_000, 0.8
    W = draw_projections(d * n, d, ensemble="orthogonal", norms="fixed", seed=d)
    z = np.zeros(d)
    z[0] = math.sqrt(t)
    c = np.cos(W @ z).reshape(n, d)
    for sample, ref in ((c[:, 0], _moment(d, -t, "fixed", 1)),
                        (c[:, 0] ** 2, (1 + _moment(d, -4 * t, "fixed", 1)) / 2),
                        (c[:, 0] * c[:, 1], _moment(d, -t, "fixed", 2))):
        zval = (sample.mean() - float(ref)) / (sample.std(ddof=1) / math.sqrt(n))
        assert abs(zval) < 4, (d, float(ref), sample.mean())
    # and the chi-norm pair moment would be rejected: the two laws differ at this t
    pair = c[:, 0] * c[:, 1]
    wrong = float(_moment(d, -t, "chi", 2))
    assert abs(pair.mean() - wrong) / (pair.std(ddof=1) / math.sqrt(n)) > 8


# ---------------------------------------------------------------------------
# Closed forms and identities
# ---------------------------------------------------------------------------

def _pair(d, gamma, t, angle=np.pi / 2):
    """An unscaled pair whose scaled |x' - y'|^2 is t (|x'| = |y'|; d = 1: y = -0.3 x)."""
    x, y = theory.pair(d, 1.0, 1.0, angle) if d > 1 else theory.pair(1, 1.0, 0.3, np.pi)
    c = math.sqrt(t / (2 * gamma) / float(np.sum((x - y) ** 2)))
    return c * x, c * y


@pytest.mark.parametrize("gamma", [1e-3, 0.3, 0.5, 10.0])
def test_iid_closed_forms(gamma):
    """iid, chi norms: paired (1 - k^2)^2/(2m), offset (1 - k^2 + k^4/2)/m; positive k^2 (e^s - 1)/m."""
    for d in (1, 5, 32):
        for t in (1e-4, 0.3, 2.0, 9.0):
            x, y = _pair(d, gamma, t)
            k = math.exp(-gamma * float(np.sum((x - y) ** 2)))
            s = 2 * gamma * float(np.sum((x + y) ** 2))
            for m in (1, 4, 33):
                kw = dict(kernel="gaussian", gamma=gamma)
                assert exact_mse(x, y, m, "trig", **kw) == pytest.approx((1 - k * k) ** 2 / (2 * m),
                                                                         rel=1e-12)
                assert exact_mse(x, y, m, "offset", **kw) == pytest.approx(
                    (1 - k * k + k**4 / 2) / m, rel=1e-12)
                assert exact_mse(x, y, m, "positive", **kw) == pytest.approx(
                    k * k * math.expm1(s) / m, rel=1e-12)


def test_offset_is_trig_plus_half_over_m_for_every_ensemble_and_norm_law():
    x, y = _pair(6, 0.7, 1.3, 1.0)
    m = np.array([1, 2, 5, 6, 7, 13])
    for ensemble, norms in (("iid", "chi"), ("iid", "fixed"), ("orthogonal", "chi"),
                            ("orthogonal", "fixed"), ("simplex", "chi")):
        kw = dict(ensemble=ensemble, norms=norms, kernel="gaussian", gamma=0.7)
        off = exact_mse(x, y, m, "offset", **kw)
        trig = exact_mse(x, y, m, "trig", **kw)
        np.testing.assert_allclose(off, trig + 1 / (2 * m), rtol=1e-13)
    # softmax: + exp(|x|^2 + |y|^2)/(2m)
    off = exact_mse(x, y, m, "offset", ensemble="orthogonal")
    trig = exact_mse(x, y, m, "trig", ensemble="orthogonal")
    np.testing.assert_allclose(off, trig + np.exp(np.sum(x * x) + np.sum(y * y)) / (2 * m),
                               rtol=1e-13)


def test_gaussian_mse_is_the_softmax_mse_of_the_scaled_pair_times_the_factor():
    x, y = _pair(4, 1.0, 2.0, 1.2)
    for gamma in (1e-3, 0.3, 0.5, 10.0):
        c = math.sqrt(2 * gamma)
        factor = math.exp(-(c * c) * float(np.sum(x * x) + np.sum(y * y)))
        for kind in KINDS:
            for ensemble, norms in (("iid", "fixed"), ("orthogonal", "chi"), ("simplex", "chi")):
                got = exact_mse(x, y, 5, kind, ensemble=ensemble, norms=norms, kernel="gaussian",
                                gamma=gamma)
                soft = exact_mse(c * x, c * y, 5, kind, ensemble=ensemble, norms=norms)
                assert got == pytest.approx(soft * factor, rel=1e-12), (gamma, kind, ensemble)


#: exact_mse at HEAD (before the Gaussian kernel), pair(4, 0.6, 0.8, 1.1), m = 5
SOFTMAX_AT_HEAD = {
    "trig-iid-chi": "0x1.9e6401f7773f2p-5", "trig-iid-fixed": "0x1.0dd4e63057a2ap-5",
    "trig-orthogonal-chi": "0x1.c9088b3113019p-6", "trig-orthogonal-fixed": "0x1.c79e7b4d80cc9p-8",
    "trig-simplex-chi": "0x1.36b97ff5a0cdfp-5", "positive-iid-chi": "0x1.faba1e422e3fap-1",
    "positive-iid-fixed": "0x1.6c487460ae608p-2", "positive-orthogonal-chi": "0x1.cd1a9f5e45359p-1",
    "positive-orthogonal-fixed": "0x1.2e91a2b9422d0p-2",
    "positive-simplex-chi": "0x1.67993e38bc065p-1", "hyperbolic-iid-chi": "0x1.821f41851716dp-2",
    "hyperbolic-iid-fixed": "0x1.5710014b11ed7p-4",
    "hyperbolic-orthogonal-chi": "0x1.26e043bd4502bp-2",
    "hyperbolic-orthogonal-fixed": "0x1.80d2eab5847b1p-6",
    "hyperbolic-simplex-chi": "0x1.4e587638b07dbp-2",
}


def test_softmax_results_unchanged():
    x, y = theory.pair(4, 0.6, 0.8, 1.1)
    for name, hexval in SOFTMAX_AT_HEAD.items():
        kind, ensemble, norms = name.split("-")
        kw = dict(ensemble=ensemble, norms=norms)
        plain = exact_mse(x, y, 5, kind, **kw)
        assert plain.tobytes() == exact_mse(x, y, 5, kind, kernel="softmax", **kw).tobytes()
        assert plain.tobytes() == exact_mse(x, y, 5, kind, kernel="softmax", gamma=None,
                                            **kw).tobytes()
        # the same bits as before the change on this machine; to rounding anywhere
        assert float(plain) == pytest.approx(float.fromhex(hexval), rel=1e-14, abs=0), name
    X, Y = theory.pair(3, np.array([0.2, 1.0, 3.0]), 0.7, np.array([0.1, 1.5, 3.0]))
    for kind in ("trig", "positive", "hyperbolic", "oprf", "offset"):
        a = exact_mse(X, Y, 7, kind, ensemble="orthogonal", log=True)
        b = exact_mse(X, Y, 7, kind, ensemble="orthogonal", log=True, kernel="softmax")
        assert a.tobytes() == b.tobytes(), kind


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------

BAD_GAMMA = [
    (dict(kernel="gaussian"), ValueError, r"kernel='gaussian' needs gamma > 0 .*got None"),
    (dict(kernel="softmax", gamma=1.0), ValueError,
     r"gamma is the parameter of kernel='gaussian' only; got gamma=1.0 with kernel='softmax'"),
    (dict(gamma=1.0), ValueError, r"gamma is the parameter of kernel='gaussian' only"),
    (dict(kernel="gaussian", gamma=0.0), ValueError, r"gamma must be one finite number > 0; got 0.0"),
    (dict(kernel="gaussian", gamma=-2), ValueError, r"gamma must be one finite number > 0; got -2"),
    (dict(kernel="gaussian", gamma=math.inf), ValueError, r"gamma must be one finite number > 0"),
    (dict(kernel="gaussian", gamma=math.nan), ValueError, r"gamma must be one finite number > 0"),
    (dict(kernel="gaussian", gamma=1 + 1j), ValueError, r"Complex data not supported: gamma"),
    (dict(kernel="gaussian", gamma="1"), TypeError, r"gamma must be a finite number > 0; got '1'"),
    (dict(kernel="gaussian", gamma=True), TypeError, r"gamma must be a finite number > 0; got True"),
    (dict(kernel="gaussian", gamma=[1.0]), TypeError, r"gamma must be a finite number > 0"),
    (dict(kernel="gaussian", gamma=np.array([1.0, 2.0])), ValueError,
     r"gamma must be one finite number > 0"),
    (dict(kernel="rbf", gamma=1.0), ValueError, r"kernel must be one of 'softmax', 'gaussian'"),
]


@pytest.mark.parametrize("kw, exc, match", BAD_GAMMA, ids=[str(i) for i in range(len(BAD_GAMMA))])
def test_bad_gamma_one_line_errors_before_any_work(kw, exc, match):
    x, y = theory.pair(3, 0.5, 0.5, 1.0)
    calls = [
        lambda: exact_mse(x, y, 4, "trig", **kw),
        lambda: exact_mse(theory.geometry(x, y), None, 4, "offset", **kw),
        # 2**39 trials would run for hours: the error must come before any trial
        lambda: monte_carlo_mse(x, y, 4, "offset", trials=2**39, seed=0, progress=_never, **kw),
    ]
    for call in calls:
        with pytest.raises(exc, match=match) as info:
            call()
        assert "\n" not in str(info.value)


def _never(done, total):
    raise AssertionError("work started before the arguments were checked")


def test_gamma_accepts_real_scalars():
    x, y = theory.pair(3, 0.5, 0.5, 1.0)
    ref = exact_mse(x, y, 4, "offset", kernel="gaussian", gamma=2.0)
    for g in (2, np.float32(2.0), np.int64(2), np.array(2.0)):
        assert exact_mse(x, y, 4, "offset", kernel="gaussian", gamma=g) == ref


# ---------------------------------------------------------------------------
# Precision far from the origin
# ---------------------------------------------------------------------------

def _far_pair(R2, tz, d, gamma, seed):
    """An unscaled pair with |x'|^2 = R2 and |x' - y'|^2 = tz (up to rounding)."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    v = rng.standard_normal(d)
    v -= (v @ u) * u
    v /= np.linalg.norm(v)
    xs = math.sqrt(R2) * u
    c = math.sqrt(2 * gamma)
    return xs / c, (xs + math.sqrt(tz) * v) / c


def _iid_mp(x, y, gamma, m, kind):
    """The iid chi closed forms at the exact scaled invariants of the float vectors."""
    with mp.workdps(DPS):
        X, Y = [mp.mpf(float(a)) for a in x], [mp.mpf(float(b)) for b in y]
        c2 = 2 * mp.mpf(gamma)
        t = c2 * sum((a - b) ** 2 for a, b in zip(X, Y))
        s = c2 * sum((a + b) ** 2 for a, b in zip(X, Y))
        k2 = mp.exp(-t)
        return {"trig": (1 - k2) ** 2 / (2 * m), "offset": (1 - k2 + k2 * k2 / 2) / m,
                "positive": k2 * mp.expm1(s) / m,
                "hyperbolic": (mp.exp(-(s + t)) + k2 * (mp.exp(s) - 2)) / (2 * m)}[kind]


#: measured worst |log got - log ref| at |x'|^2 = R2 (d in {3, 16}, gamma in {1e-3, 2, 10},
#: |z'|^2 in {1e-6, 1e-2, 1}): trig and offset lose about 2|x'|^2 ulp-units (2.3e-12 at
#: R2 = 1e4, 7e-11 at 1e6, 6e-9 at 1e8, 2e-4 at 1e12), the cancellation of log SM' + 2 log factor;
#: positive and hyperbolic (log MSE of order 4 R2) a few ulps of 4 R2 (2.2e-11 at R2 = 1e4)
PRECISION = {1e4: (2e-11, 1e-10), 1e6: (1e-9, 1e-8), 1e8: (1e-7, 1e-6)}


@pytest.mark.parametrize("R2", sorted(PRECISION))
def test_precision_far_from_the_origin(R2):
    bound_trig, bound_pos = PRECISION[R2]
    worst = {}
    for d in (3, 16):
        for gamma in (1e-3, 2.0, 10.0):
            for j, tz in enumerate((1e-6, 1e-2, 1.0)):
                x, y = _far_pair(R2, tz, d, gamma, seed=100 * d + j)
                for kind in KINDS:
                    if kind in ("positive", "hyperbolic") and R2 > 1e4:
                        continue  # log MSE ~ 4 R2: the same ulp argument, checked at 1e4
                    got = float(exact_mse(x, y, 7, kind, kernel="gaussian", gamma=gamma, log=True))
                    err = abs(got - mp_log(_iid_mp(x, y, gamma, 7, kind)))
                    worst[kind] = max(worst.get(kind, 0.0), err)
    print(f"|x'|^2 = {R2:g}: worst |log got - log ref| "
          + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    assert worst["trig"] <= bound_trig and worst["offset"] <= bound_trig
    if "positive" in worst:
        assert worst["positive"] <= bound_pos and worst["hyperbolic"] <= bound_pos
