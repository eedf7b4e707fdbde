"""The tilted proposal: a defensive mixture, weighted by its exact likelihood ratio.

:class:`Tilt` holds one pair's proposal (:func:`tilt_for`, :func:`tilt_of`);
:func:`proposal_draws` and :func:`move_block` draw and move the variates of
the vectorised path, :func:`tilt_weights` weights them. The Numba and CUDA
kernels (:mod:`rfkernels.engine.cpu`) do the same operations in the same
order (MATH.md, "Importance sampling for the heavy tail"; docs/importance.rst).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .. import rng
from ..estimators import estimator
from ..numerics import elementary as elem
from ..validation import check_finite, nonnegative_scalar
from .streams import STREAM_PROPOSAL, fixed_order_sum

#: Monte Carlo proposals: the plain law, the tilted defensive mixture, or chosen by a pilot run.
PROPOSALS = ("plain", "tilted", "auto")
#: Weight of the plain law in the defensive mixture (MATH.md): weights never exceed its inverse, 5.
DEFENSIVE_WEIGHT = 0.2


# ---------------------------------------------------------------------------
# The tilted proposal: a defensive mixture, weighted by its exact likelihood ratio
# ---------------------------------------------------------------------------


class Tilt(NamedTuple):
    r"""The tilted proposal of one pair (:func:`tilt_for`; MATH.md, "Importance sampling for the heavy tail").

    Each trial's variates come from the plain law with probability
    ``alpha0``; otherwise one projection i, chosen uniformly, is moved toward
    the region its term's squared error comes from (in the direction
    ``-`` with probability 1/2 where ``symmetric``, else ``+``). Every
    move changes one coordinate of a system in which the plain law is a
    product of independent laws, and keeps the others:

    - chi norms (``on_projections``): :math:`\omega_i` is a standard Gaussian
      vector, so its projection :math:`p_i \sim N(0, 1)` is independent of
      :math:`W_i = |\omega_i|^2 - p_i^2 \sim \chi^2_{d-1}`, of the squared
      norm Z of the Gaussian vector whose direction gives the block's
      directions (G of the orthogonal sampler, h of the simplex one) and of
      the direction of that vector's part orthogonal to row i's own
      coordinate. The move is :math:`p_i \to p_i \pm \mu`,
      :math:`W_i \to \tau W_i`: row i's squared length becomes
      :math:`R_i'^2 = p_i'^2 + W_i'` and its direction coordinate
      :math:`c_i' = p_i'/R_i'`; the block's other rows keep Z and that
      direction, :math:`c_k' = \rho (c_k - \gamma c_i) + \gamma c_i'`,
      :math:`\rho = \sqrt{(1 - c_i'^2)/(1 - c_i^2)}`, :math:`\gamma` the
      cosine between two rows' directions (0 orthogonal, :math:`-1/(d-1)`
      simplex). Density ratio of component i:
      :math:`r_i = e^{\pm\mu p_i - \mu^2/2}\, \tau^{-(d-1)/2} e^{(1 - 1/\tau) W_i/2}`
      at the drawn point, computed as ``exp(+-shift * p_i + (c1 * W_i + c0))``.
      :math:`\tau = 1` (no W term) except for oprf features.
    - fixed norms: the direction coordinate :math:`c_i`, whose plain law has
      density :math:`\propto (1 - c^2)^{(d-3)/2}`, moved in
      :math:`\psi = \operatorname{atanh} c` by :math:`\pm\delta`
      (``shift``): :math:`c_i' = \tanh(\operatorname{atanh} c_i \pm \delta)`,
      the other rows of the block as above. Density ratio (with the
      Jacobian): :math:`r_i = \big(2e^{\mp\delta} / ((1 - c_i) + e^{\mp 2\delta}(1 + c_i))\big)^{d-1}`,
      computed as ``exp(c0 - n1 * log((1 - c_i) + e_minus * (1 + c_i)))`` for
      ``+`` (``c_minus`` and ``e_plus`` for ``-``).

    Each trial's weight is the exact likelihood ratio plain / mixture,

    .. math::

        w = \Big(\alpha_0 + \frac{1 - \alpha_0}{m} \sum_{i=1}^m \bar r_i\Big)^{-1} \le \frac{1}{\alpha_0},

    :math:`\bar r_i` the ratio of the move ``+`` (symmetric: the mean of
    ``+`` and ``-``), so :math:`E_Q[w f] = E_P[f]` for every f: the weighted
    mean squared error and mean are unbiased.

    Attributes
    ----------
    alpha0 : float
        Probability of the plain law (:data:`DEFENSIVE_WEIGHT`).
    shift : float
        :math:`\mu` (chi norms) or :math:`\delta` (fixed norms).
    symmetric : bool
        Move either way with equal probability (hyperbolic features, whose
        terms are large on both sides).
    on_projections : bool
        True for chi norms, False for fixed norms (see above).
    wscale, c1, c0 : float
        :math:`\tau`, :math:`(1 - 1/\tau)/2` and
        :math:`-\mu^2/2 - \tfrac{d-1}{2}\log\tau` (chi norms); fixed norms:
        ``c0`` is :math:`(d - 1)(\log 2 - \delta)`, ``wscale`` 1 and ``c1`` 0.
    e_plus, e_minus, c_minus, n1 : float
        Fixed norms: :math:`e^{2\delta}`, :math:`e^{-2\delta}`,
        :math:`(d - 1)(\log 2 + \delta)` and d - 1 (0 for chi norms).
    """

    alpha0: float
    shift: float
    symmetric: bool
    on_projections: bool
    wscale: float
    c1: float
    c0: float
    e_plus: float
    e_minus: float
    c_minus: float
    n1: float


def tilt_for(kind, ensemble, norms, length, d, *, A=None, alpha0=DEFENSIVE_WEIGHT):
    r"""The :class:`Tilt` of a pair, chosen from its geometry.

    A term :math:`f = e^{B a p + 2A|\omega|^2 + \dots}` (positive and
    hyperbolic: A = 0, B = 1; oprf: :math:`B = \sqrt{1 - 4A}`;
    :math:`a = |x + y|`) has its squared error from the law tilted by
    :math:`f^2`. The move of :class:`Tilt` aims at it:

    - chi norms: under the tilt, :math:`\omega \sim N(\lambda e, \sigma^2 I)`
      with :math:`\sigma^2 = 1/(1 - 8A)`, :math:`\lambda = 2Ba\sigma^2`, i.e.
      :math:`p \sim N(\lambda, \sigma^2)` and :math:`W \sim \sigma^2\chi^2_{d-1}`:
      so :math:`\mu = \lambda` (:math:`2a` for positive and hyperbolic
      features, as in MATH.md: then the moved projection is drawn from
      :math:`N(2a, 1)`, exactly the tilted law of a positive term) and
      :math:`\tau = \sigma^2` (1 unless oprf). With A < 0 (the optimal
      :math:`A^*` always is) the proposal is wider than the tilted law in
      p, which keeps the weights bounded there.
    - fixed norms: :math:`p = \sqrt d\, c`, and the tilted density of
      :math:`\psi = \operatorname{atanh} c`,
      :math:`\propto \cosh^{-(d-1)}\psi\; e^{\kappa \tanh\psi}`,
      :math:`\kappa = 2Ba\sqrt d`, peaks where
      :math:`(d - 1) c = \kappa (1 - c^2)`; :math:`\delta = \operatorname{atanh} c^*`
      moves the plain law's peak (at 0) there, and the proposal's log ratio
      then has the tilt's slope at the peak. d = 1 leaves no direction
      to move (:math:`\delta = 0`).

    Any move keeps the weighted estimates unbiased (the weights are exact);
    the choice only decides how efficient they are.

    Parameters
    ----------
    kind : str
        A registered kind whose terms can be tilted (:attr:`rfkernels.estimators.Kind.tilt_reason`
        None; trig's bounded estimates are refused).
    ensemble : str
        A registered ensemble with a reduced law (:data:`rfkernels.engine.REDUCED_ENSEMBLES`).
    norms : str
        A registered norm law the tilt takes (its :attr:`rfkernels.estimators.NormLaw.tilt_reason`
        is None; the weights are those of independent or fixed lengths).
    length : float
        ``a = |x + y|``.
    d : int
    A : float, optional
        The OPRF parameter (< 1/8); required for kind 'oprf'.
    alpha0 : float, default :data:`DEFENSIVE_WEIGHT`
        Probability of the plain law, in (0, 1).
    """
    est = estimator(kind, ensemble=ensemble, norms=norms, d=d, A=A)
    est.supports.tilted.require()
    a = nonnegative_scalar(length, "length")
    arr = check_finite(alpha0, "alpha0")
    if arr.ndim != 0 or not 0.0 < float(arr) < 1.0:
        raise ValueError(f"alpha0 must be one number in (0, 1); got {alpha0!r}")
    return tilt_of(est, est.kind.resolve(est.params, None), a, float(arr))


def tilt_of(est, value, length, alpha0=DEFENSIVE_WEIGHT):
    """:func:`tilt_for` of a validated :class:`rfkernels.estimators.Estimator` (with d) that can be tilted.

    ``value`` is the pair's kind parameter (:attr:`Kind.resolve`; OPRF: A),
    ``length`` is ``a = |x + y|``. Nothing is checked here.
    """
    d = est.d
    B, A = est.kind.tilt_slope(value)
    a = length
    ba = B * a  # oprf: sqrt(1 - 4A) a; positive and hyperbolic: 1.0 * a, the same bits
    symmetric = est.kind.symmetric_tilt
    n1 = float(d - 1)
    if est.norms.chi:
        sigma2 = 1.0 / (1.0 - 8.0 * A)
        mu = 2.0 * ba * sigma2
        tau = sigma2
        c1, c0 = 0.5 * (1.0 - 1.0 / tau), -0.5 * mu * mu - 0.5 * n1 * math.log(tau)
        return Tilt(alpha0, mu, symmetric, True, tau, c1, c0, 0.0, 0.0, 0.0, 0.0)
    delta = 0.0 if d == 1 else math.atanh(direction_peak(ba, d))
    log2 = math.log(2.0)
    return Tilt(alpha0, delta, symmetric, False, 1.0, 0.0, n1 * (log2 - delta),
                math.exp(2.0 * delta), math.exp(-2.0 * delta), n1 * (log2 + delta), n1)


def direction_peak(length, d):
    r"""The peak :math:`c^*` of a direction coordinate's law tilted by :math:`e^{2\kappa c}`.

    A uniform unit vector's coordinate c has density :math:`\propto (1 - c^2)^{(d-3)/2}`;
    a fixed-norm term :math:`e^{a\sqrt d\, c}` has its squared error where
    :math:`(1 - c^2)^{(d-1)/2} e^{\kappa c}` (the law of
    :math:`\psi = \operatorname{atanh} c` times the tilt),
    :math:`\kappa = 2a\sqrt d`, peaks: :math:`(d - 1) c^* = \kappa (1 - c^{*2})`,
    the root in [0, 1) (``length`` is ``a``, or ``Ba`` for oprf). 1 for d = 1.
    """
    if d == 1:
        return 1.0
    kappa, n1 = 2.0 * length * math.sqrt(d), d - 1.0
    return 2.0 * kappa / (n1 + math.sqrt(n1 * n1 + 4.0 * kappa * kappa))


class Draws(NamedTuple):
    """The proposal's choice per trial: component (-1: the plain law) and direction (True: ``-``)."""

    component: object
    negative: object


def proposal_draws(key, counters, m, tilt, xp):
    """Each trial's mixture component from :data:`STREAM_PROPOSAL` (slot 0): see :func:`rfkernels.rng.uniform_pair`.

    ``u < alpha0``: the plain law (component -1); otherwise projection
    ``min(floor(v m), m - 1)``, moved in the direction ``-`` if ``symmetric``
    and the bit is set, else ``+``. (``floor(v m)`` is uniform over the m
    projections up to the 2**-52 grid of v: a relative error below m 2**-52.)
    """
    u, v, bit = rng.uniform_pair(key, counters, 0, STREAM_PROPOSAL, xp=xp)
    comp = xp.minimum((v * m).astype(xp.int64), m - 1)
    comp = xp.where(u < tilt.alpha0, -1, comp)
    negative = bit if tilt.symmetric else xp.zeros(counters.shape[0], dtype=bool)
    return Draws(comp, negative)


def in_block(draws, i0, b, xp):
    """The trials whose component is in rows ``[i0, i0 + b)``, and those rows."""
    comp = draws.component
    cols = xp.nonzero((comp >= i0) & (comp < i0 + b))[0]
    return cols, comp[cols]


def move_block(c, q, draws, tilt, i0, b, gamma, xp):
    """Move the chosen row of block ``[i0, i0 + b)`` (see :class:`Tilt`), in place.

    ``c`` (m, n) holds the direction coordinates; ``q`` (m, n) the squared
    lengths (chi norms; None for fixed norms). Same operations, in the same
    order, as the Numba kernels' ``_move_row``.
    """
    cols, rows = in_block(draws, i0, b, xp)
    neg = draws.negative[cols]
    cj = c[rows, cols]
    one = 1.0 - cj * cj
    if tilt.on_projections:
        pj = xp.sqrt(q[rows, cols]) * cj
        w = (q[rows, cols] * one) * tilt.wscale
        pn = pj + xp.where(neg, -tilt.shift, tilt.shift)
        r2 = pn * pn + w
        cn = pn / xp.sqrt(r2)
        q[rows, cols] = r2
    else:
        k = xp.where(neg, tilt.e_minus, tilt.e_plus)
        up, down = (1.0 + cj) * k, 1.0 - cj
        cn = (up - down) / (up + down)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = xp.where(one > 0.0, xp.sqrt((1.0 - cn * cn) / one), 0.0)
    c[i0 : i0 + b, cols] = rho * (c[i0 : i0 + b][:, cols] - gamma * cj) + gamma * cn
    c[rows, cols] = cn


def tilt_weights(variates, tilt, W=None, xp=np):
    """The likelihood-ratio weights of :class:`Tilt`, one per trial.

    ``variates`` (m, n): the projections (chi norms) or the direction
    coordinates (fixed norms) as drawn; ``W`` (m, n): the rows'
    :math:`|\\omega_i|^2 - p_i^2` as drawn, needed where ``tilt.c1 != 0``
    (oprf, chi norms). The sum over projections is :func:`fixed_order_sum`
    (the Numba kernels' bits).
    """
    m = variates.shape[0]
    if tilt.on_projections:
        base = tilt.c0 if tilt.c1 == 0.0 else tilt.c1 * W + tilt.c0
        sg = tilt.shift * variates
        r = elem.exp(sg + base, xp)
        if tilt.symmetric:
            r = 0.5 * (r + elem.exp(base - sg, xp))
    else:
        down, up = 1.0 - variates, 1.0 + variates
        r = elem.exp(tilt.c0 - tilt.n1 * elem.log(down + tilt.e_minus * up, xp), xp)
        if tilt.symmetric:
            r = 0.5 * (r + elem.exp(tilt.c_minus - tilt.n1 * elem.log(down + tilt.e_plus * up, xp),
                                    xp))
    return 1.0 / (tilt.alpha0 + (1.0 - tilt.alpha0) * (fixed_order_sum(r, xp) / m))
