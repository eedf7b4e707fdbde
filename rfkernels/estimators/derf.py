r"""Kinds ``"derf"``, ``"saderf"``, ``"aderf"``, ``"sderf"``: dense-exponential random features [1]_.

:math:`f_k(\omega, x) = D \exp(\omega^\top A \omega + \omega^\top B_k x + x^\top C_k x)`
(k = 1 queries, k = 2 keys), :math:`8A \prec I`,
:math:`B_1^\top (I - 4A)^{-1} B_2 = I`; formulas, the exact second moment
and the orthogonal covariance in :mod:`rfkernels.numerics.derf`, the fits
in :mod:`rfkernels.numerics.derf_fit`, the derivations in ``docs/derf.rst``.

- ``"derf"`` takes ``A`` (a float a, meaning aI, or a symmetric (d, d)
  array), ``B_query`` and optionally ``B_key`` (derived from the identity
  when omitted). At FAVOR+'s parameters (A = 0, B = I) it *is* kind
  ``"positive"``, at OPRF's (A = aI, B = sqrt(1 - 4a) I) kind ``"oprf"``:
  :func:`rfkernels.estimators.estimator` returns those kinds (the same
  bits), through :attr:`Kind.dispatch`.
- ``"saderf"``, ``"aderf"``, ``"sderf"`` take no parameter: they are
  fitted on a population of queries and keys (:attr:`Kind.fit`,
  :meth:`rfkernels.estimators.Estimator.fitted_on`), never on one pair.

The reduction the engine uses: with an isotropic ``A = aI`` and
:math:`\beta = \sqrt{1 - 4a}`, :math:`x^\top C_1 x = -|B_1x|^2/(2\beta^2)` and
:math:`D = \beta^{d/2}`, so :math:`f_1(\omega, x)` is exactly OPRF's feature
of :math:`x' = B_1 x/\beta` (and :math:`f_2` of :math:`y' = B_2 y/\beta`),
with :math:`x'\cdot y' = x^\top B_1^\top (I - 4A)^{-1} B_2 y = x\cdot y`:
the reduced engine samples OPRF at the pair :math:`(x', y')`
(:attr:`Kind.pair_transform`), whose length is
:math:`|x' + y'| = \sqrt{\sigma}`. A non-isotropic A tilts each row by
:math:`\omega^\top A \omega`, which depends on its direction: no scalar
reduction, the literal method only.

References
----------
.. [1] V. Likhosherstov et al., "Dense-Exponential Random Features: Sharp
   Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..numerics import derf as dt
from ..numerics import derf_fit
from . import maps, oprf, pair_law, registry
from ..validation import check_choice

#: The kinds of this module; the last three are fitted on a population.
FITTED_KINDS = ("saderf", "aderf", "sderf")
DERF_KINDS = ("derf",) + FITTED_KINDS


@dataclass(frozen=True, eq=False)
class DERFKindParams:
    """A DERF kind's parameters: ``derf`` a :class:`rfkernels.numerics.derf.DERFParams`, or None.

    None: a data-fitted kind not fitted yet (its estimator must be
    :meth:`rfkernels.estimators.Estimator.fitted_on` a population first).
    """

    derf: object = None

    @property
    def fitted(self):
        """Parameters given or fitted (False: a data-fitted kind not fitted yet)."""
        return self.derf is not None

    @property
    def d(self):
        return None if self.derf is None else self.derf.d


def _infer_d(values):
    for name in ("A", "B_query", "B_key"):
        shape = np.shape(values.get(name))
        if len(shape) not in (0, 2):
            raise ValueError(f"{name} must be a float or a (d, d) array; got shape {shape}")
        if len(shape) == 2:
            return shape[0]
    raise ValueError("kind='derf' needs a (d, d) array among A, B_query and B_key (its shape is "
                     "d); got only numbers")


def check_derf_params(values, *, batch=False):
    """The one check of kind ``'derf'``'s ``A``, ``B_query`` (both required) and ``B_key``."""
    missing = [n for n in ("A", "B_query") if values.get(n) is None]
    if missing:
        raise ValueError(f"kind='derf' needs {' and '.join(missing)}: A (a float or a symmetric "
                         "(d, d) array, 8A < I) and B_query ((d, d)); B_key may be derived")
    params = dt.derf_params(values["A"], values["B_query"], values.get("B_key"),
                            d=_infer_d(values))
    return DERFKindParams(params)


def _fitted_check(name):
    def check(values, *, batch=False):
        return DERFKindParams()
    check.__doc__ = f"Kind {name!r} takes no parameter (it is fitted on a population)."
    return check


def params_of(value):
    """The :class:`rfkernels.numerics.derf.DERFParams` of a pair's value, refusing an unfitted kind."""
    derf = value.derf if isinstance(value, DERFKindParams) else value
    if derf is None:
        raise ValueError("a data-fitted DERF kind ('saderf', 'aderf', 'sderf') has no parameters "
                         "until it is fitted on a population of queries and keys (never on one "
                         "pair): pass the pairs, or fit it with rfkernels.fit_derf(kind, Q, K)")
    return derf


def resolve(params, geom):
    """The pair's value: the :class:`rfkernels.numerics.derf.DERFParams` (shared by every pair)."""
    return params_of(params)


def _isotropic_a(value):
    p = params_of(value)
    if not p.isotropic:
        raise ValueError(REDUCED_REASON)
    return p.a


_DIAGNOSE_REASON = ("diagnose runs the isotropic DERF kinds (saderf, aderf) as OPRF on the "
                    "transformed head; SDERF's dense A is not diagnosed yet: favor_attention(Q, K, "
                    "V, W, 'sderf') and theory.exact_mse on the head")
_GIVEN_REASON = ("its parameters are the user's; diagnose fits 'saderf' and 'aderf' on each "
                 "head")
REDUCED_REASON = ("a non-isotropic A (not a*I) tilts each row by w^T A w, which depends on its "
                  "direction: the reduced engine (scalar projections) cannot sample it; use "
                  "method='literal'")


def constants(value, length, d):
    """OPRF's constants at ``A = a`` (isotropic A only); ``length`` is ``|x' + y'| = sqrt(sigma)``."""
    return oprf.constants(_isotropic_a(value), length, d)


def tilt_slope(value):
    return oprf.tilt_slope(_isotropic_a(value))


def transformed(params, x, role):
    """``x' = B_k x / sqrt(1 - 4a)`` (k = 1 ``'query'``, 2 ``'key'``): OPRF's input (isotropic A)."""
    B = params.B1 if role == "query" else params.B2
    return (np.asarray(x, dtype=np.float64) @ B.T) / math.sqrt(1.0 - 4.0 * params.a)


def pair_transform(value, x, y):
    """``(x', y')``: the pair at which OPRF (A = a) is this DERF (isotropic A)."""
    p = params_of(value)
    _isotropic_a(p)
    return transformed(p, x, "query"), transformed(p, y, "key")


def representation_pairs(value, x, y):
    r"""``(x~, y~)``: the pairs at which this DERF is the positive representation under one
    Gaussian policy (MATH.md, "The variance floor"): :math:`\tilde B_k = (I - 4A)^{-1/2} B_k`,
    so :math:`\tilde x\cdot\tilde y = x\cdot y`; for an isotropic A, :func:`pair_transform`'s pairs."""
    p = params_of(value)
    if p.isotropic:
        return pair_transform(p, x, y)
    A = np.asarray(p.A)
    lam, U = np.linalg.eigh(np.eye(A.shape[0]) - 4.0 * A)
    root = (U / np.sqrt(lam)) @ U.T  # (I - 4A)^{-1/2}; I - 4A is positive definite (a DERF's A)
    return (np.asarray(x, dtype=np.float64) @ (root @ p.B1).T,
            np.asarray(y, dtype=np.float64) @ (root @ p.B2).T)


def log_features(x, w, params, role, xp, shift=0.0):
    r"""``log(sqrt(m) f_k(w_i, x_n))`` for the rows ``x`` (n, d) and projections ``w`` (m, d), (n, m).

    :math:`\log D + w^\top A w + w \cdot B_k x + x^\top C_k x + \mathrm{shift}`;
    the quadratic form :math:`w^\top A w` is :math:`a|w|^2` for an isotropic A.
    """
    B = xp.asarray(params.B1 if role == "query" else params.B2)
    C = xp.asarray(params.C1 if role == "query" else params.C2)
    quad_x = xp.sum((x @ C) * x, axis=1, keepdims=True)
    if params.isotropic:
        quad_w = params.a * xp.sum(w * w, axis=1)
    else:
        quad_w = xp.sum((w @ xp.asarray(params.A)) * w, axis=1)
    return ((x @ B.T) @ w.T + (quad_w[None, :] + params.log_D)) + (quad_x + shift)


def features(x, w, params, role, xp, shift=0.0):
    """``f_k(w_i, x_n) / sqrt(m)``: :func:`log_features`, exponentiated."""
    return xp.exp(log_features(x, w, params, role, xp, shift)) / math.sqrt(w.shape[0])


#: The ensembles of the DERF theory: independent rows, or orthogonal blocks (the pair term of
#: rows at another cosine is no radial integral of this form).
THEORY_ENSEMBLES = ("iid", "orthogonal")


def log_mse(geom, m, est, vectors=None):
    x, y = vectors
    return dt.derf_log_mse(x, y, m, params_of(est.params),
                           orthogonal_blocks=pair_law.row_cosine(est.ensemble) is not None)


def theory_reason(ensemble, norms):
    if ensemble.name not in THEORY_ENSEMBLES:
        return (f"DERF features have an exact MSE for ensemble 'iid' and 'orthogonal' (chi "
                f"norms) only; ensemble={ensemble.name!r}: Monte Carlo only")
    return pair_law.chi_only_reason(ensemble, norms, "DERF features")


def params_reason(params, ensemble, what):
    """Why these parameters have no ``what`` ('theory' or 'reduced'); None where they have."""
    if params is None or params.derf is None or params.derf.isotropic:
        return None
    if what == "reduced":
        return REDUCED_REASON
    if ensemble.name != "iid":
        return (f"ensemble={ensemble.name!r} with a non-isotropic A has no exact theory (the tilt "
                "w^T A w depends on each row's direction, so the pair term is no radial "
                "integral): Monte Carlo only")
    return None


def dispatch(params):
    """``(kind, values)`` where these parameters are exactly FAVOR+'s or OPRF's, else None."""
    p = params.derf
    if p is None or not p.is_oprf:
        return None
    if p.is_favor_plus:
        return "positive", {}
    return "oprf", {"A": p.a}


#: The families :func:`fit_derf` fits (FAVOR+ and OPRF included, for comparisons).
FIT_KINDS = ("favor+", "oprf", "saderf", "aderf", "sderf")
_FITTERS = dict(zip(FIT_KINDS, (derf_fit.fit_favor_plus, derf_fit.fit_oprf, derf_fit.fit_saderf,
                                derf_fit.fit_aderf, derf_fit.fit_sderf)))


def fit_derf(kind, x, y):
    r"""Fit ``kind`` (one of :data:`FIT_KINDS`) on queries ``x`` and keys ``y``.

    Parameters
    ----------
    kind : {'favor+', 'oprf', 'saderf', 'aderf', 'sderf'}
    x, y : array_like, shape (n1, d) and (n2, d)

    Returns
    -------
    rfkernels.numerics.derf_fit.DERFFit

    Notes
    -----
    Each kind minimises the mean over pairs of the log second moment
    :math:`\overline{\log E[f_1^2f_2^2]}` within its family (FAVOR+ has no
    free parameter); see :func:`rfkernels.numerics.derf_fit.fit_saderf`,
    :func:`~rfkernels.numerics.derf_fit.fit_aderf`,
    :func:`~rfkernels.numerics.derf_fit.fit_sderf`.

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    """
    return _FITTERS[check_choice(kind, "kind", FIT_KINDS)](x, y)


def _fit(name):
    def fit(x, y):
        return fit_derf(name, x, y).keywords
    fit.__doc__ = (f"Kind {name!r} fitted on queries ``x`` (n, d) and keys ``y`` (n', d): "
                   ":func:`fit_derf`.")
    return fit


_SUMMARY = {
    "derf": "dense-exponential random features (A, B_query, B_key; Likhosherstov et al. 2023)",
    "saderf": "simplified asymmetric DERF: OPRF on (Psi x, Psi^-1 y), fitted on a population",
    "aderf": "asymmetric DERF: isotropic A, B_query, B_key fitted on a population",
    "sderf": "symmetric DERF: dense A, B_query = B_key fitted on a population",
}



def attention_inputs(est, q, k, xp):
    r"""``(q', k', a)``: an isotropic DERF's attention is OPRF's (A = a) on ``q'``, ``k'``.

    ``q' = q B_1^T / sqrt(1 - 4a)``, ``k' = k B_2^T / sqrt(1 - 4a)``: the
    features are OPRF's of these rows exactly (see the module notes), and
    :math:`q'\cdot k' = q \cdot k` by the identity, so the attention is the
    same estimate of the same softmax attention. A dense A raises (use
    :func:`dense_attention_inputs`).
    """
    p = params_of(est.params)
    if not p.isotropic:
        raise ValueError("a dense A has no OPRF form: rfkernels.estimators.derf.dense_attention_inputs")
    beta = math.sqrt(1.0 - 4.0 * p.a)
    return (q @ xp.asarray(p.B1.T)) / beta, (k @ xp.asarray(p.B2.T)) / beta, p.a


def dense_attention_inputs(est, q, k, w, xp):
    r"""``(q~, k~, w~)``: any DERF's attention as positive features' attention in d + 2 dimensions.

    With :math:`\kappa_l = \omega_l^\top A\omega_l`, :math:`G = 2C_2 + B_2^\top B_2`
    and :math:`K = \max_j k_j^\top G k_j`:
    :math:`\tilde q = [B_1 q, 1, 0]`, :math:`\tilde k = [B_2 k, 1, \sqrt{K - k^\top G k}]`,
    :math:`\tilde\omega_l = [\omega_l, \kappa_l, 0]`. Then
    :math:`\tilde\omega\cdot\tilde k - |\tilde k|^2/2 = \omega\cdot B_2k + \kappa + k^\top C_2k - (1 + K)/2`:
    each key's positive feature is its DERF feature times one constant
    (with :math:`\log D`), each query's times a per-row factor; both cancel
    in attention's normalisation, so the output is DERF's.
    """
    p = params_of(est.params)
    B1, B2 = xp.asarray(p.B1), xp.asarray(p.B2)
    G = xp.asarray(2.0 * p.C2 + p.B2.T @ p.B2)
    kg = xp.sum((k @ G) * k, axis=1)
    top = float(xp.max(kg))
    n_q, n_k = q.shape[0], k.shape[0]
    qt = xp.concatenate([q @ B1.T, xp.ones((n_q, 1)), xp.zeros((n_q, 1))], axis=1)
    kt = xp.concatenate([k @ B2.T, xp.ones((n_k, 1)), xp.sqrt(xp.maximum(top - kg, 0.0))[:, None]],
                        axis=1)
    kappa = xp.sum((w @ xp.asarray(p.A)) * w, axis=1)
    wt = xp.concatenate([w, kappa[:, None], xp.zeros((w.shape[0], 1))], axis=1)
    return qt, kt, wt


def keywords(value):
    """Kind ``'derf'``'s keyword parameters of a fitted or given value (``feature_map(X, W, 'derf', **...)``)."""
    p = params_of(value)
    return {"A": p.a if p.isotropic else p.A, "B_query": p.B1, "B_key": p.B2}


#: The family's map: a query map and a key map; attention as OPRF on transformed
#: rows (isotropic A) or FAVOR+ in d + 2 dimensions (a dense A).
MAP = maps.PairMap(features=features, log_features=log_features, attention_inputs=attention_inputs,
                   dense_attention_inputs=dense_attention_inputs, runs_as=oprf.KIND.name,
                   dense_runs_as="positive", given_kind="derf", keywords=keywords)

KINDS = {}
for _name in DERF_KINDS:
    _fitted = _name in FITTED_KINDS
    KINDS[_name] = registry.register("kind", registry.Kind(
        name=_name, summary=_SUMMARY[_name],
        features_per_projection=1, on_sum=True, paper=False, nonnegative=True,
        terms=oprf.terms, scalar_terms=oprf.scalar_terms, log_mse=log_mse,
        theory_reason=theory_reason, resolve=resolve,
        fixed_params=lambda value: DERFKindParams(params_of(value)),
        constants=constants, tilt_slope=tilt_slope, needs_squared_norms=True,
        theory_needs_vectors=True,
        param_names=() if _fitted else ("A", "B_query", "B_key"),
        check_params=_fitted_check(_name) if _fitted else check_derf_params,
        fit=_fit(_name) if _fitted else None,
        fitted_params=(lambda values: check_derf_params(values)) if _fitted else None,
        population=_fitted, pair_transform=pair_transform, representation="positive",
        representation_pairs=representation_pairs, params_reason=params_reason,
        dispatch=None if _fitted else dispatch,
        diagnose_reason=(_DIAGNOSE_REASON if _name == "sderf" else
                         None if _fitted else _GIVEN_REASON),
        seed_index=5 + DERF_KINDS.index(_name),  # after the five kinds before them
        example=None if _fitted else (lambda d: {"A": -0.1, "B_query": 0.9 * np.eye(d)}),
        feature_map=MAP,
    ))
del _name, _fitted
