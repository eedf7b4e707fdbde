r"""Feature maps as registry values: what a kind computes on the rows of X given its projections W.

A kind's :attr:`~rfkernels.estimators.registry.Kind.feature_map` is one of
two shapes, each holding the kind's own arithmetic (the layers above call
it; none of them asks for a kind's name):

- :class:`ExponentialMap`: :math:`\varphi_l(x) = e^{e_l(x) - |x|^2/2} / \sqrt r`
  with the kind's exponents :math:`e_l` of the projections :math:`\omega^\top x`
  (positive: :math:`\omega_l^\top x`; hyperbolic: :math:`\pm\omega_l^\top x`;
  OPRF: :math:`\sqrt{1-4A}\,\omega_l^\top x + A|\omega_l|^2 + \tfrac d4 \log(1-4A)`).
  Non-negative: sum normalisation, the log-sum-exp estimate and the
  max-shifted attention features all work on the exponents.
- :class:`PairMap`: a query map and a key map (the DERF family),
  :math:`f_1(\omega, x) f_2(\omega, y)` estimating the kernel; its attention
  runs as another kind's on transformed rows.
- :class:`SignedMap`: :math:`\varphi(x) = e^{|x|^2/2} c\, s(x)` with a
  bounded, signed part :math:`s` (trig: :math:`[\sin, \cos](\omega^\top x)`;
  offset: :math:`\sqrt 2 \cos(\omega^\top x + b)`). Its log estimate is the
  log of the mean product of the bounded parts plus the rows' :math:`|x|^2/2`.

Every function takes the array namespace ``xp`` (NumPy or CuPy) and, where
attention's precision study emulates a lower precision, a rounding callable
``r`` applied after each arithmetic step.

A map's parameter (OPRF's A) is a :class:`MapParam`: its check, its
data-fitted value (``"auto"``) and the message when it is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

__all__ = ["ExponentialMap", "MapParam", "PairMap", "SignedMap"]


def _same(a):
    return a


@dataclass(frozen=True)
class MapParam:
    """The one parameter a feature map takes (OPRF's ``A``).

    Attributes
    ----------
    name : str
    check : callable
        ``check(value) -> value``: the validated float, or ``"auto"``
        (ValueError otherwise).
    fit : callable
        ``fit(x, y) -> float``: the value ``"auto"`` stands for, fitted on
        the rows of x and y (y None: x with itself).
    missing : str
        The error message when the parameter is not given.
    """

    name: str
    check: Callable
    fit: Callable
    missing: str


@dataclass(frozen=True)
class ExponentialMap:
    """:math:`\\varphi_l(x) = e^{e_l(x) - |x|^2/2} / \\sqrt r`, the exponents the kind's own.

    Attributes
    ----------
    exponents : callable
        ``exponents(proj, w, value, xp) -> (n, r)``: the exponents
        :math:`e_l` from the projections ``proj = x @ w.T`` (n, m), before
        :math:`-|x|^2/2`; ``value`` is the map's parameter (None without one).
    param : MapParam or None
        The map's parameter (None: it takes none).
    """

    exponents: Callable
    param: Optional[MapParam] = None

    #: Features are >= 0 (sum normalisation and log-sum-exp apply).
    nonnegative = True
    #: The terms are unbounded (exponentials): their squared errors can have a heavy tail.
    bounded = False
    #: One map serves queries and keys.
    two_roles = False
    #: Its linear-domain estimate is formed by cancellation (False: literal Monte Carlo may use it).
    linear_cancels = False
    #: The estimate is ``phi(x) . phi(y)`` with the same map (False: a key map of its own).
    symmetric = True
    #: Max-shifted (stabilised) attention features exist.
    attention_reason = None

    def features(self, proj, w, half_sq, shift, value, phase, xp):
        """The linear-domain features (n, r); ``shift`` is a per-row log factor added to the exponent."""
        e = self.exponents(proj, w, value, xp)
        return xp.exp(e - half_sq + shift) / math.sqrt(e.shape[1])

    def sum_normalised(self, proj, w, value, xp):
        """:math:`\\varphi / \\max_l \\varphi_l` per row (the positive per-row factors cancel): entries in (0, 1]."""
        e = self.exponents(proj, w, value, xp)
        return xp.exp(e - xp.max(e, axis=1, keepdims=True))

    def log_estimate(self, px, py, sq_x, sq_y, row_x, row_y, w, value, phase, xp, log_matmul_exp):
        """``(sign, log|estimate|)`` for every pair of rows, through ``log_matmul_exp(a, b, xp)``.

        ``px``, ``py``: the projections; ``sq_x``, ``sq_y``: :math:`|x|^2/2`
        per row; ``row_x``, ``row_y``: the target kernel's per-row log factors.
        """
        px = self.exponents(px, w, value, xp)
        py = self.exponents(py, w, value, xp)
        logabs = log_matmul_exp(px - (sq_x - row_x)[:, None], py - (sq_y - row_y)[:, None], xp)
        logabs = logabs - math.log(px.shape[1])
        return xp.ones_like(logabs), logabs

    def query_features(self, proj, w, value, xp, r=_same, half_sq=None):
        """Stabilised query features: :math:`e^{e_l - \\max_l e_l}` (the row's factor cancels in
        attention; ``half_sq``, the rows' :math:`|q|^2/2`, is not needed)."""
        e = r(self.exponents(proj, w, value, xp))
        return r(xp.exp(r(e - xp.max(e, axis=1, keepdims=True))))

    def key_log_features(self, proj, w, half_sq, value, xp, r=_same):
        """``(log-part, sign-part)`` of the key features: :math:`\\varphi \\propto e^{\\text{log-part}}` (sign-part None)."""
        return r(r(self.exponents(proj, w, value, xp)) - half_sq), None


@dataclass(frozen=True)
class SignedMap:
    """:math:`\\varphi(x) = e^{|x|^2/2} s(x) / \\sqrt m`-type maps with a bounded, signed part.

    Attributes
    ----------
    features : callable
        ``features(proj, w, half_sq, shift, value, phase, xp)``: the kind's
        linear-domain features (n, r), its own arithmetic.
    mean_product : callable
        ``mean_product(px, py, phase, xp) -> (n_x, n_y)``: the estimate with
        the rows' :math:`e^{|x|^2/2}` factors taken out (trig: the mean
        cosine of the projections' differences).
    parts : callable or None
        ``parts(proj, phase, xp, r) -> (n, r)``: the bounded part alone (the
        per-row positive factor dropped), for stabilised attention; None
        where attention does not take the kind (``attention_reason`` says why).
    attention_reason : str or None
        Why attention does not take the kind (None: it does).
    """

    features: Callable
    mean_product: Callable
    parts: Optional[Callable] = None
    attention_reason: Optional[str] = None
    param = None

    #: Features can be negative (no sum normalisation; the log estimate carries a sign).
    nonnegative = False
    #: Each term of the estimate is bounded (a cosine): its squared errors have every moment.
    bounded = True
    #: One map serves queries and keys.
    two_roles = False
    #: Its linear-domain estimate is formed by cancellation (False: literal Monte Carlo may use it).
    linear_cancels = False
    #: The estimate is ``phi(x) . phi(y)`` with the same map.
    symmetric = True

    def sum_normalised(self, proj, w, value, xp):
        """Refused: a signed map's features can sum to 0."""
        raise ValueError("sum normalisation needs non-negative features; this map's are signed")

    def log_estimate(self, px, py, sq_x, sq_y, row_x, row_y, w, value, phase, xp, log_matmul_exp):
        """``(sign, log|estimate|)``: the sign and log of the mean product, plus the rows' log factors."""
        mean = self.mean_product(px, py, phase, xp)
        sq_x, sq_y = sq_x + row_x, sq_y + row_y  # exactly 0 for the Gaussian kernel
        sign = xp.sign(mean)
        return sign, xp.log(xp.abs(mean)) + sq_x[:, None] + sq_y[None, :]

    def query_features(self, proj, w, value, xp, r=_same, phase=None, half_sq=None):
        """Stabilised query features: the bounded part (the row's positive factor cancels;
        ``half_sq`` is not needed)."""
        return self.parts(proj, phase, xp, r)

    def key_log_features(self, proj, w, half_sq, value, xp, r=_same, phase=None):
        """``(log-part, sign-part)`` of the key features: :math:`|k|^2/2` and the bounded part."""
        return half_sq, self.parts(proj, phase, xp, r)


@dataclass(frozen=True)
class PairMap:
    """A query map and a key map whose product estimates the kernel (the DERF family).

    Attributes
    ----------
    features : callable
        ``features(x, w, params, role, xp, shift) -> (n, m)``: the features
        of the rows ``x`` for ``role`` ``"query"`` or ``"key"`` (``params``:
        the fitted or given parameters; ``shift``: a per-row log factor).
    log_features : callable
        The same, as logs (``log(sqrt(m) f)``), for estimates that overflow.
    attention_inputs : callable
        ``attention_inputs(est, q, k, xp) -> (q', k', value)``: the rows at
        which this kind's attention *is* ``runs_as``'s with its map parameter
        ``value`` (a scalar law: DERF with an isotropic A is OPRF).
    dense_attention_inputs : callable
        ``dense_attention_inputs(est, q, k, w, xp) -> (q', k', w')``: the
        rows and projections at which the attention of a non-scalar law (a
        dense A) is ``dense_runs_as``'s.
    runs_as, dense_runs_as : str
        The registered kinds whose one-map attention serves it.
    given_kind : str or None
        The kind whose keyword parameters a fit's ``keywords`` are (the
        user-given form of the family: ``feature_map(X, W, given_kind, **fit.keywords)``);
        None: no public map takes the fitted values (``no_keywords_reason``).
    keywords : callable
        ``keywords(value) -> {name: value}``: ``given_kind``'s keyword
        parameters of the kind's resolved value.
    no_keywords_reason : str
        Why there is no ``given_kind`` (the error :meth:`rfkernels.estimators.Estimator.map_arguments` raises).
    shared : bool
        One map serves queries and keys (``role`` is ignored): the fitted
        map transforms any rows (the scikit-learn transformer takes it).
    """

    features: Callable
    log_features: Callable
    attention_inputs: Callable
    dense_attention_inputs: Callable
    runs_as: str
    dense_runs_as: str
    given_kind: Optional[str]
    keywords: Callable = dict
    no_keywords_reason: str = ""
    shared: bool = False
    param = None

    #: Features are >= 0.
    nonnegative = True
    #: The terms are unbounded (exponentials): their squared errors can have a heavy tail.
    bounded = False
    #: A query map and a key map.
    two_roles = True
    #: favor_attention takes it (through ``attention_inputs``).
    attention_reason = None
    #: Two maps by role (``two_roles``), not one map with the same features on both sides.
    symmetric = False
    #: Its linear-domain estimate is formed by cancellation (False: literal Monte Carlo may use it).
    linear_cancels = False
