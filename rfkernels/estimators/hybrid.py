r"""Kind ``"hybrid"``: angular hybrid random features (Choromanski et al., ICLR 2022, arXiv 2110.04367).

The trigonometric estimator :math:`\hat A` (exact at :math:`x = y`) and the
positive estimator :math:`\hat B` (exact at :math:`y = -x`), mixed by an
estimated angle :math:`\hat p \approx \theta_{x,y}/\pi`:

.. math::

    \hat H = (1 - \hat p)\,\hat A + \hat p\,\hat B, \qquad
    \hat p = \frac12 - \frac1{2n}\sum_{k=1}^{n} \operatorname{sgn}(u_k\cdot x)\operatorname{sgn}(u_k\cdot y),

:math:`E\hat p = \theta/\pi` (:math:`P[\operatorname{sgn} u\cdot x \ne \operatorname{sgn} u\cdot y] = \theta/\pi`).

- **Projections**: W has ``m +`` :data:`ANGULAR` rows: the ensemble's m
  rows :math:`\omega_j`, shared by :math:`\hat A` and :math:`\hat B` (as in
  the authors' code), then n = :data:`ANGULAR` rows :math:`u_k`, iid
  N(0, I) and independent of them (drawn after them from the same generator:
  :func:`rfkernels.projections.draw_kind_projections`; :attr:`Kind.extra_rows`).
  :math:`\hat p` independent of :math:`(\hat A, \hat B)` keeps
  :math:`\hat H` unbiased for any weight; with any ensemble whose rows are
  marginally N(0, I).
- **Placement**: the trigonometric estimator gets :math:`1 - \hat p`, the
  positive one :math:`\hat p`. For equal lengths :math:`\hat p = 0` exactly at
  :math:`\theta = 0` and 1 at :math:`\theta = \pi`, so the MSE vanishes at
  both ends (the paper's Figure 1). The reversed placement (trig weighted
  by :math:`\hat p`, as in one of the authors' notebooks) has an MSE larger by exactly
  :math:`(1 - 2\theta/\pi)(\mathrm{Var}\,\hat B - \mathrm{Var}\,\hat A)`
  (:func:`log_mse`): worse at every angle below :math:`\pi/2`, where
  :math:`\mathrm{Var}\,\hat A < \mathrm{Var}\,\hat B` always, better only
  above it where trig is still the better estimator (``docs/qmc.rst``).
- **Features**: :math:`\hat p` and :math:`1 - \hat p` are bilinear in
  :math:`g(x) = [1, \operatorname{sgn}(u_k\cdot x)/\sqrt n]/\sqrt2` (the
  key's signs negated for :math:`\hat p`), so :math:`\hat H = \varphi_q(x)\cdot\varphi_k(y)`
  with :math:`\varphi = [g \otimes \varphi_{trig},\; g^{\pm} \otimes \varphi_{+}]`:
  :math:`r = 3m(n + 1)` features (:data:`FEATURES_PER_PROJECTION`), the
  count ``rank`` compares at. The key map differs from the query map (the
  weight :math:`\hat p` is not positive semi-definite): no single map
  :math:`z(x)\cdot z(y)`, so no scikit-learn transformer.
- **Exact MSE** (iid rows, chi norms):
  :math:`E[(1-\hat p)^2]\mathrm{Var}\hat A + E[\hat p^2]\mathrm{Var}\hat B + 2(E\hat p - E\hat p^2)\mathrm{Cov}(\hat A, \hat B)`,
  :math:`\hat p` binomial (:math:`E\hat p^2 = p^2 + p(1-p)/n`), the variances
  Lemma 2's, and with shared rows
  :math:`\mathrm{Cov} = \frac1m SM^2(\cos(|x|^2 - |y|^2) - 1) \le 0`
  (from :math:`E[e^{\omega\cdot u}\cos\omega\cdot z] = e^{(|u|^2 - |z|^2)/2}\cos(u\cdot z)`
  at :math:`u = x + y`, :math:`z = x - y`).

No scalar law (the weight reads x and y apart): the literal method only.
"""

from __future__ import annotations

import math

import numpy as np

from ..numerics.closed_form import log_neg_expm1_neg
from . import positive, registry, trig

#: n, the angular projections :math:`u_k` (the authors' language-model setting).
ANGULAR = 8
#: Outputs per base projection: (trig's 2 + positive's 1) times the n + 1 angular features.
FEATURES_PER_PROJECTION = 3 * (ANGULAR + 1)
#: The trigonometric estimator's weight: ``"1-theta/pi"`` (this kind) or ``"theta/pi"`` (reversed).
PLACEMENTS = ("1-theta/pi", "theta/pi")

_NO_SCALAR_LAW = ("kind='hybrid' weights its two estimators by sign features of x and y apart: "
                  "no scalar reduction; use method='literal'")


# ---------------------------------------------------------------------------
# The map
# ---------------------------------------------------------------------------


def _same(a):
    return a


def split(proj, w):
    """``(base, angular)`` projections: the first ``m`` columns and the last :data:`ANGULAR`."""
    m = KIND.base_rows(w.shape[0])
    return proj[:, :m], proj[:, m:]


def _signs(angular, xp):
    return xp.where(angular >= 0.0, 1.0, -1.0)


def _angular(angular, role, block, xp):
    """``g`` (n_rows, n + 1): ``[1, s_k/sqrt(n)]/sqrt(2)``; the key's signs negated in the positive block."""
    s = _signs(angular, xp) / math.sqrt(ANGULAR)
    if role == "key" and block == "positive":
        s = -s
    return xp.concatenate([xp.ones((s.shape[0], 1)), s], axis=1) / math.sqrt(2.0)


def _log_parts(proj, w, half_sq, shift, role, xp):
    """``(log-part, sign-part)``: the features are ``exp(log-part) * sign-part`` (both (n_rows, r)).

    Each angular feature times each trig output, then each angular feature times each positive
    output: the log-part repeats the base block per angular feature, the sign-part spreads each
    angular feature over the base block's outputs.
    """
    base, angular = split(proj, w)
    m = base.shape[1]
    log_trig = xp.broadcast_to(half_sq + shift - 0.5 * math.log(m), (base.shape[0], 2 * m))
    log_pos = base - half_sq + shift - 0.5 * math.log(m)
    trig_sign = trig.parts(base, None, xp, _same)  # [sin, cos]
    g_t, g_p = _angular(angular, role, "trig", xp), _angular(angular, role, "positive", xp)
    log_part = xp.concatenate([xp.tile(log_trig, (1, ANGULAR + 1)), xp.tile(log_pos, (1, ANGULAR + 1))],
                              axis=1)
    sign_part = xp.concatenate([xp.repeat(g_t, 2 * m, axis=1) * xp.tile(trig_sign, (1, ANGULAR + 1)),
                                xp.repeat(g_p, m, axis=1)], axis=1)
    return log_part, sign_part


def components(x, y, w):
    """``(A, B, p-hat)`` of one pair at one W: the trig estimate, the positive estimate and the
    angle's estimate, in the linear domain (tame pairs: benchmarks and figures)."""
    base, angular = split(np.stack([x, y]) @ w.T, w)
    half = 0.5 * float(x @ x + y @ y)
    a = math.exp(half) * float(np.mean(np.cos(base[0] - base[1])))
    b = math.exp(-half) * float(np.mean(np.exp(base[0] + base[1])))
    return a, b, float(np.mean(_signs(angular[0], np) != _signs(angular[1], np)))


class HybridMap:
    """The hybrid's query and key maps (:func:`_log_parts`); the interface of
    :class:`rfkernels.estimators.maps.SignedMap` with a ``role``."""

    param = None
    nonnegative = False
    #: The positive block is unbounded (exponentials): its squared errors can have a heavy tail.
    bounded = False
    two_roles = False
    #: The key map differs from the query map: the estimate is ``phi_q(x) . phi_k(y)``.
    symmetric = False
    #: The features form the weight 1 - p-hat by cancellation among the angular features, in
    #: terms the size of the trig block's :math:`e^{(|x|^2 + |y|^2)/2}`: where the weight is
    #: exactly 0 (equal lengths near theta = pi) the linear estimate keeps their rounding (at
    #: :math:`|x| = |y| = 5`, -4.6e-7 for a kernel of 1.4e-11). :meth:`log_estimate` mixes the
    #: two estimates in log space instead, and literal Monte Carlo uses it. Attention computes
    #: with the features: there the rounding stays, relative to the row's largest terms.
    linear_cancels = True
    attention_reason = None

    def features(self, proj, w, half_sq, shift, value, phase, xp, role="query"):
        """The linear-domain features (n_rows, 3m(n + 1)) of ``role``."""
        log_part, sign_part = _log_parts(proj, w, half_sq, shift, role, xp)
        return xp.exp(log_part) * sign_part

    def sum_normalised(self, proj, w, value, xp):
        raise ValueError("sum normalisation needs non-negative features; kind='hybrid' has signed ones")

    def log_estimate(self, px, py, sq_x, sq_y, row_x, row_y, w, value, phase, xp, log_matmul_exp):
        """``(sign, log|estimate|)`` of every pair: the weighted trig and positive estimates in log space."""
        bx, ax = split(px, w)
        by, ay = split(py, w)
        m = bx.shape[1]
        p = 0.5 - 0.5 * (_signs(ax, xp) @ _signs(ay, xp).T) / ANGULAR  # exactly k/n
        mean = trig.mean_product(bx, by, phase, xp)
        with np.errstate(divide="ignore"):
            log_a = xp.log(xp.abs(mean)) + (sq_x + row_x)[:, None] + (sq_y + row_y)[None, :]
        log_b = log_matmul_exp(bx - (sq_x - row_x)[:, None], by - (sq_y - row_y)[:, None], xp) - math.log(m)
        # the shift of the terms that count: a term of weight 0 (p = 0 or 1) must not set it, or the
        # other one underflows (a weight of exactly 1 on a term 745 below the discarded one)
        top = xp.maximum(xp.where(p < 1.0, log_a, -xp.inf), xp.where(p > 0.0, log_b, -xp.inf))
        with np.errstate(invalid="ignore", over="ignore"):
            val = (xp.where(p < 1.0, (1.0 - p) * xp.sign(mean) * xp.exp(log_a - top), 0.0)
                   + xp.where(p > 0.0, p * xp.exp(log_b - top), 0.0))
        with np.errstate(divide="ignore"):
            return xp.sign(val), xp.log(xp.abs(val)) + top

    def query_features(self, proj, w, value, xp, r=_same, half_sq=None):
        """Stabilised query features: the log-part shifted by its row maximum (a positive per-row
        factor). Needs the rows' ``half_sq`` (:math:`|q|^2/2`): the trig block carries
        :math:`e^{+|q|^2/2}`, the positive block :math:`e^{-|q|^2/2}`, so it does not cancel between them."""
        if half_sq is None:
            raise ValueError("kind='hybrid' needs the queries' |q|^2/2 (half_sq=) for its stabilised features")
        log_part, sign_part = _log_parts(r(proj), w, half_sq, 0.0, "query", xp)
        return r(xp.exp(log_part - xp.max(log_part, axis=1, keepdims=True)) * sign_part)

    def key_log_features(self, proj, w, half_sq, value, xp, r=_same):
        """``(log-part, sign-part)`` of the key features."""
        return _log_parts(r(proj), w, half_sq, 0.0, "key", xp)


# ---------------------------------------------------------------------------
# Theory
# ---------------------------------------------------------------------------


def angle_fraction(x, y):
    r""":math:`p = \theta_{x,y}/\pi` of vectors (batch shape + (d,)), as the map's signs see it.

    :math:`\theta = 2\arctan(|\hat x - \hat y| / |\hat x + \hat y|)` (accurate at
    small and near-:math:`\pi` angles). A zero vector's sign is always +1: p
    is 1/2 against a non-zero one, 0 against another zero.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    nx = np.sqrt(np.einsum("...i,...i->...", x, x))
    ny = np.sqrt(np.einsum("...i,...i->...", y, y))
    with np.errstate(invalid="ignore", divide="ignore"):
        ux, uy = x / nx[..., None], y / ny[..., None]
        diff = np.sqrt(np.einsum("...i,...i->...", ux - uy, ux - uy))
        summ = np.sqrt(np.einsum("...i,...i->...", ux + uy, ux + uy))
        p = 2.0 * np.arctan2(diff, summ) / math.pi
    zero_x, zero_y = nx == 0.0, ny == 0.0
    return np.where(zero_x & zero_y, 0.0, np.where(zero_x | zero_y, 0.5, p))


def angle_fractions(x, y):
    r"""``(p, 1 - p)``, each formed directly (:math:`1 - p = 2rctan(|\hat x + \hat y| / |\hat x - \hat y|)/\pi`),
    so that neither loses digits near its zero (:math:`	heta` near 0 or near :math:`\pi`)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    p = angle_fraction(x, y)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = angle_fraction(x, -y)  # the angle to -y is pi - theta
    zero = (np.einsum("...i,...i->...", x, x) == 0.0) | (np.einsum("...i,...i->...", y, y) == 0.0)
    return p, np.where(zero, 1.0 - p, q)


def _weights(p, q, placement):
    """``(c_trig, c_positive, c_cov)``: E[w_A^2], E[w_B^2] and 2 E[w_A w_B], p-hat binomial(n, p)/n,
    ``q = 1 - p`` formed apart (:func:`angle_fractions`)."""
    spread = p * q / ANGULAR
    near, far = q * q + spread, p * p + spread
    cov = 2.0 * (p * q - spread)
    return (near, far, cov) if placement == PLACEMENTS[0] else (far, near, cov)


def log_mse_parts(geom, m, vectors):
    r"""``(log Var A, log Var B, log |Cov(A, B)|, p, 1 - p)``: iid shared rows, chi norms (Lemma 2's
    variances, exact there), and the angle fractions.

    ``geom`` may carry a target kernel's factor folded in (the theory folds it for kinds on
    x - y: ``half_sq`` and ``x.y`` shifted by it, :func:`rfkernels.theory.exact_mse`); every term
    takes :math:`SM^2` and the factor from ``geom.log_sm`` and its other invariants from the
    pair itself: the trig term from ``t`` and ``half_sq``, the positive term from
    :math:`|x + y|^2` of ``vectors`` (Lemma 2's :math:`e^{|u|^2}(1 - e^{-|u|^2})\,SM^2/m`).
    """
    x, y = vectors
    u2 = np.einsum("...i,...i->...", x + y, x + y)
    log_a = trig.lemma2(geom, m)
    with np.errstate(divide="ignore"):
        log_b = u2 + 2.0 * geom.log_sm + log_neg_expm1_neg(u2) - np.log(m)
    delta = np.einsum("...i,...i->...", x, x) - np.einsum("...i,...i->...", y, y)
    with np.errstate(divide="ignore"):
        log_c = 2.0 * geom.log_sm + np.log(2.0 * np.sin(0.5 * delta) ** 2) - np.log(m)
    return (log_a, log_b, log_c) + angle_fractions(x, y)


def log_mse_placed(geom, m, vectors, placement=PLACEMENTS[0]):
    r"""The log of the exact MSE at ``placement`` (iid rows, chi norms; module notes), in log space.

    :math:`c_A \mathrm{Var}A + c_B \mathrm{Var}B - c_C |\mathrm{Cov}|` with the
    placement's weights (:func:`_weights`); -inf where it is exactly 0 (equal
    lengths at :math:`\theta = 0` or :math:`\pi`). ``placement``
    (:data:`PLACEMENTS`): ``"1-theta/pi"`` is the registered kind
    (``rfkernels.estimator("hybrid", m=m).mse(x, y)``); ``"theta/pi"``
    weights the trigonometric estimator by the angle (the reversed
    placement), whose MSE exceeds the registered one by exactly
    :math:`(1 - 2p)(\mathrm{Var}B - \mathrm{Var}A)`. ``geom`` is
    ``rfkernels.theory.geometry(x, y)`` and ``vectors`` the pair ``(x, y)``.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(map(repr, PLACEMENTS))}; got {placement!r}")
    log_a, log_b, log_c, p, q = log_mse_parts(geom, m, vectors)
    c_a, c_b, c_c = _weights(p, q, placement)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ta, tb, tc = np.log(c_a) + log_a, np.log(c_b) + log_b, np.log(c_c) + log_c
        top = np.maximum(ta, tb)
        safe = np.where(np.isfinite(top), top, 0.0)
        total = np.exp(ta - safe) + np.exp(tb - safe) - np.exp(tc - safe)
        out = np.where(total > 0.0, np.log(np.maximum(total, 0.0)) + safe, -np.inf)
    return np.where(np.isnan(top), np.nan, np.where(top == -np.inf, -np.inf, out))


def log_mse(geom, m, est, vectors):
    """The registered kind's log exact MSE (:attr:`Kind.log_mse`): :func:`log_mse_placed` at ``"1-theta/pi"``."""
    return log_mse_placed(geom, m, vectors)


def theory_reason(ensemble, norms):
    if ensemble.name != "iid" or not norms.independent_chi:
        return ("kind='hybrid' has an exact MSE for ensemble='iid' with norms='chi' (its covariance "
                "term is that of independent shared rows): Monte Carlo only for "
                f"ensemble={ensemble.name!r}, norms={norms.name!r}")
    return None


def params_reason(params, ensemble, what):
    """No reduced sampler (the weight reads x and y apart)."""
    return _NO_SCALAR_LAW if what == "reduced" else None


def terms(p, w2, length, consts, xp):
    """Refused: the hybrid has no scalar law."""
    raise ValueError(_NO_SCALAR_LAW)


KIND = registry.register("kind", registry.Kind(
    name="hybrid", seed_index=10,
    summary=f"angular hybrid: trig weighted 1 - theta/pi, positive theta/pi, the angle from {ANGULAR} "
            f"sign features ({FEATURES_PER_PROJECTION} outputs per projection)",
    features_per_projection=FEATURES_PER_PROJECTION, on_sum=False, paper=False, nonnegative=False,
    terms=terms, scalar_terms=positive.scalar_terms, log_mse=log_mse, theory_needs_vectors=True,
    theory_reason=theory_reason, params_reason=params_reason,
    tilt_reason="kind='hybrid' has no scalar law to tilt (its weight reads x and y apart); use proposal='plain'",
    feature_map=HybridMap(), extra_rows=ANGULAR,
))
