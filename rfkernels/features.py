r"""Feature maps: random features of the softmax kernel, and the deterministic maps of linear attention.

Given a projection matrix W (rows ω_1..ω_m, see
:func:`rfkernels.draw_projections`), each feature map φ is a deterministic
function of (X, W) and

.. math:: \widehat{SM}(x, y) = \varphi(x)^\top \varphi(y)

is an unbiased estimate of :math:`SM(x, y) = \exp(x^\top y)` when every
:math:`\omega_i \sim N(0, I_d)` marginally.

Shapes and conventions shared by every function here:

- X is (n_x, d), Y is (n_y, d), W is (m, d), all finite. A 1-D ``x`` of
  shape (d,) is accepted as a single row and, as in :func:`numpy.matmul`,
  its axis is dropped from the result: ``estimate(x, y, W, k)`` is a scalar,
  ``feature_map(x, W, k)`` has shape (r,). W must be 2-D with m >= 1 rows.
- NumPy arrays in give NumPy arrays out; CuPy arrays in (any argument) give
  CuPy arrays out. The code is written once against the array namespace.
- Linear-domain functions (:func:`feature_map`, :func:`estimate`,
  :func:`softmax_kernel`) never return inf or NaN: if a result overflows
  they raise ``FloatingPointError`` and point to the log-domain functions
  :func:`log_estimate` and :func:`log_softmax_kernel`, which stay finite.

The deterministic feature maps of linear attention (:data:`FEATURE_MAPS`:
identity, ELU+1 and DPFP-ν of Schlag et al. [2]_) go through the same
:func:`feature_map` with ``W=None``; they estimate nothing (their kernel
φ(x)ᵀφ(y) is not exp(xᵀy)), so :func:`estimate`, the theory and the Monte
Carlo code take only the random kinds of :data:`rfkernels.KINDS`.

References
----------
.. [1] K. Choromanski, V. Likhosherstov, D. Dohan, X. Song, A. Gane,
   T. Sarlos, P. Hawkins, J. Davis, A. Mohiuddin, L. Kaiser, D. Belanger,
   L. Colwell and A. Weller, "Rethinking Attention with Performers",
   ICLR 2021. https://arxiv.org/abs/2009.14794
.. [2] I. Schlag, K. Irie and J. Schmidhuber, "Linear Transformers Are
   Secretly Fast Weight Programmers", ICML 2021. https://arxiv.org/abs/2102.11174
"""

from __future__ import annotations

import numpy as np

from .backends import get_array_module
from .estimators import estimator, oprf, registry
from .estimators.spec import refuse_parameter
from .pairs import (
    check_map_param,
    check_memory_pairs,
    fit_map_param,
    check_pair,
    check_phase,
    check_projections,
    check_rows,
    check_target,
    is_derf,
    refuse_derf_parameters,
    require_finite,
    require_projections,
    squeeze_pairs,
)
from .softmax import LME_CHUNK, log_softmax_kernel, softmax_kernel
from .validation import (
    renamed,
    check_bool,
    check_choice,
    check_finite,
    check_int,
    check_memory,
    check_same_d,
)

__all__ = [
    "FEATURE_MAPS",
    "estimate",
    "feature_dimension",
    "feature_map",
    "log_estimate",
    "log_softmax_kernel",
    "fitted_features",
    "fitted_map_kinds",
    "mapped_kinds",
    "oprf_auto_a",
    "softmax_kernel",
]

#: Deterministic feature maps of linear attention (``W=None``): no projections,
#: no variance. Kept apart from the random kinds (:data:`rfkernels.KINDS`), which
#: are the only ones theory and Monte Carlo code accept.
FEATURE_MAPS = ("identity", "elu1", "dpfp")
#: DERF's two maps (:func:`feature_map`'s ``role``).
ROLES = ("query", "key")
#: Deterministic maps whose features are non-negative (sum normalisation is
#: defined); a random kind says so in its entry (:attr:`Kind.nonnegative`).
NONNEGATIVE_MAPS = ("elu1", "dpfp")

#: Below this, the max-shifted product of exponentials in the log-domain
#: path may have lost terms to underflow; those entries are recomputed exactly.
_LME_TINY = 1e-250


_UNCHECKED = object()


def oprf_auto_a(X, Y=None):
    r"""The OPRF parameter ``A*`` for all pairs of rows of X and Y at once (``A='auto'``).

    ``A*`` of :func:`rfkernels.theory.oprf_optimal_a` at
    :math:`\rho = \operatorname{mean}_{i,j} |x_i + y_j|^2 / d`, which needs
    no pairs: expanding the square,

    .. math::

        \frac{1}{n_x n_y} \sum_{i,j} |x_i + y_j|^2 = \overline{|x|^2}
            + \overline{|y|^2} + 2\,\bar x \cdot \bar y

    (means over the rows), O((n_x + n_y) d). ``Y=None`` means Y = X.
    Returns a float (``A* <= 0``).
    """
    x = check_finite(X, "X")
    x = x[None, :] if x.ndim == 1 else x
    y = x if Y is None else check_finite(Y, "Y")
    y = y[None, :] if y.ndim == 1 else y
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] < 1 or y.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"X and Y must be (n, d) arrays with n, d >= 1; got shapes {x.shape} "
                         f"and {y.shape}")
    check_same_d([x.shape, y.shape], ["X", "Y"])
    return registry.entry("kind", "oprf").fit(x, y)["A"]


def mapped_kinds():
    """The registered kinds with one literal feature map (:attr:`Kind.feature_map`) serving queries and
    keys alike, in the registry's order (not the DERF family's two maps, nor the hybrid's key map)."""
    return tuple(k.name for k in registry.entries("kind")
                 if k.feature_map is not None and not k.feature_map.two_roles and k.feature_map.symmetric)


def fitted_map_kinds():
    """The data-fitted kinds whose one fitted map serves every row (:attr:`PairMap.shared`): a
    transformer fits them on its training rows, then maps any rows (``data-tilted``)."""
    return tuple(k.name for k in registry.entries("kind") if k.population
                 and k.feature_map is not None and k.feature_map.two_roles and k.feature_map.shared)


def fitted_features(X, W, est):
    r"""The features of the rows of X under a fitted data-fitted kind's one map, ``(n, m)``.

    ``est`` is a fitted :class:`rfkernels.estimators.Estimator` of a kind of
    :func:`fitted_map_kinds` (its target kernel included:
    :math:`\hat K(x, y) = arphi(x)\cdotarphi(y)`); X is validated here,
    W as in :func:`feature_map`. FloatingPointError where a feature
    overflows float64.
    """
    if est.kind.name not in fitted_map_kinds() or est.needs_fit:
        raise ValueError(f"fitted_features takes a fitted estimator of "
                         f"{', '.join(map(repr, fitted_map_kinds()))}; got kind={est.kind.name!r}"
                         + (" not fitted yet" if est.needs_fit else ""))
    xp = get_array_module(X, W)
    x, x1 = check_rows(X, "X", xp)
    w = check_projections(W, xp)
    check_same_d([x.shape, w.shape], ["X", "W"])
    check_memory_pairs(x, None, w, xp)
    c = est.scale
    x = c * x if c != 1.0 else x
    shift = est.kernel.log_factor(0.5 * xp.sum(x * x, axis=1, keepdims=True))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        phi = est.kind.feature_map.features(x, w, est.kind.resolve(est.params, None), "query", xp,
                                            shift)
    if not bool(xp.all(xp.isfinite(phi))):
        raise FloatingPointError(f"the features of kind={est.kind.name!r} overflowed float64 (inf "
                                 "or NaN): the rows are too large for the linear domain; rescale X")
    return phi[0] if x1 else phi


def sum_normalizable():
    """The maps whose features are non-negative (sum normalisation is defined), registry first."""
    return tuple(k for k in mapped_kinds() if registry.entry("kind", k).nonnegative) + NONNEGATIVE_MAPS


def check_feature_map(kind, W, nu, sum_normalize, d=None, A=None):
    """Validate a feature map's kind, W, nu, sum_normalize and A; returns (deterministic, nu, flag).

    ``d`` (when known) bounds DPFP's ν <= 2d - 1; ``W=_UNCHECKED`` skips the W rule,
    ``A=_UNCHECKED`` the OPRF parameter's (required for kind 'oprf', refused for the others).
    """
    if isinstance(kind, str) and kind in FEATURE_MAPS:
        deterministic = True
    elif isinstance(kind, str) and kind in registry.names("kind"):
        deterministic = False
    else:
        valid = ", ".join(repr(c) for c in registry.names("kind") + FEATURE_MAPS)
        raise ValueError(f"kind must be one of {valid}; got {kind!r}")
    if W is _UNCHECKED:
        pass
    elif deterministic and W is not None:
        raise ValueError(
            f"W must be None for the deterministic feature map {kind!r} (it has no "
            "projections); got an array"
        )
    if not deterministic:
        require_projections(kind, W)
    if kind == "dpfp":
        nu = 1 if nu is None else check_int(nu, "nu")
        if d is not None and nu > 2 * d - 1:
            raise ValueError(
                f"nu must be between 1 and 2d - 1 = {2 * d - 1} for d = {d} "
                f"(DPFP shifts a 2d-vector by 1..nu); got nu={nu}"
            )
    elif nu is not None:
        raise ValueError(f"nu is the parameter of kind='dpfp' only; got nu={nu!r} with kind={kind!r}")
    sum_normalize = check_bool(sum_normalize, "sum_normalize")
    nonnegative = kind in NONNEGATIVE_MAPS if deterministic else registry.entry("kind", kind).nonnegative
    if sum_normalize and not nonnegative:
        raise ValueError(
            f"sum_normalize needs non-negative features ({', '.join(sum_normalizable())}); "
            f"the features of kind={kind!r} can be negative, so their sum can be 0"
        )
    if A is not _UNCHECKED and not deterministic:
        check_map_param(kind, A)
    elif A is not _UNCHECKED and A is not None:
        refuse_parameter("A", A, kind)
    return deterministic, nu, sum_normalize


def feature_dimension(kind, d, *, m=None, nu=None):
    """Number of features r (the state size d_dot of linear attention) of a feature map.

    Parameters
    ----------
    kind : str
        One of :data:`rfkernels.KINDS` (then ``m`` is required) or :data:`FEATURE_MAPS`.
    d : int
        Input dimension.
    m : int, optional
        Projections of a random kind.
    nu : int, optional
        DPFP's ν (default 1).

    Returns
    -------
    int
        ``m`` (positive, oprf, offset), ``2m`` (trig, hyperbolic), ``27m`` (hybrid), ``d``
        (identity, elu1), ``2 d nu`` (dpfp).
    """
    d = check_int(d, "d")
    deterministic, nu, _ = check_feature_map(kind, _UNCHECKED, nu, False, d, A=_UNCHECKED)
    if deterministic:
        if m is not None:
            raise ValueError(f"m is the number of projections of a random kind; got m={m!r} "
                             f"with kind={kind!r}")
        return 2 * d * nu if kind == "dpfp" else d
    if m is None:
        raise ValueError(f"m (the number of projections) is required for kind={kind!r}")
    return registry.entry("kind", kind).features_per_projection * check_int(m, "m")


def _deterministic_features(x, kind, nu, xp):
    """identity, elu(x) + 1 or DPFP-ν of the rows of x (see :func:`feature_map`)."""
    if kind == "identity":
        return xp.array(x, dtype=xp.float64, copy=True)
    if kind == "elu1":
        return xp.where(x > 0, x + 1.0, xp.exp(xp.minimum(x, 0.0)))
    # DPFP-ν: k~ = relu([x, -x]) (2d), then concat_s k~ * roll(k~, -s), s = 1..ν
    kt = xp.maximum(xp.concatenate([x, -x], axis=1), 0.0)
    return xp.concatenate([kt * xp.roll(kt, -s, axis=1) for s in range(1, nu + 1)], axis=1)


def _sum_normalised(x, w, kind, nu, xp, A=None):
    """φ(x) / Σ φ(x), computed where the positive per-row factors cancel (no overflow)."""
    if w is not None:  # a random kind: the |x|²/2 and 1/sqrt(r) are per-row factors, they cancel
        phi = registry.entry("kind", kind).feature_map.sum_normalised(x @ w.T, w, A, xp)  # max 1
    elif kind == "dpfp":
        # DPFP is homogeneous of degree 2: scale each row by a power of two (exact) first
        _, ex = xp.frexp(xp.max(xp.abs(x), axis=1))
        phi = _deterministic_features(xp.ldexp(x, -ex[:, None]), kind, nu, xp)
    else:
        phi = _deterministic_features(x, kind, nu, xp)
    total = xp.sum(phi, axis=1, keepdims=True)
    if not bool(xp.all(xp.isfinite(total))):
        raise FloatingPointError(
            f"sum normalisation of kind={kind!r}: the sum of the features overflows float64 "
            "(inputs near 1e308); rescale the inputs"
        )
    bad = ~(total > 0)
    if bool(xp.any(bad)):
        rows = [int(i) for i in xp.nonzero(bad[:, 0])[0][:10]]
        n_bad = int(xp.count_nonzero(bad))
        shown = ", ".join(map(str, rows)) + (", ..." if n_bad > 10 else "")
        raise FloatingPointError(
            f"sum normalisation of kind={kind!r}: {n_bad} row(s) have features that are all 0 "
            f"(rows {shown}), so phi / sum(phi) is undefined"
            + ("; DPFP features vanish where no two entries of relu([x, -x]) that are "
               "1..nu apart are both positive" if kind == "dpfp" else "")
        )
    return phi / total


# --------------------------------------------------------------- linear domain


def _features(x, w, kind, xp, A=None, phase=None, target=None, role="query"):
    """The random features of the rows of x (the kind's map); ``target`` adds its per-row log factor.

    ``role`` reaches a map whose key map differs from its query map (``symmetric`` False: the hybrid).

    The Gaussian kernel's factor ``-|x'|^2/2`` cancels the trig and offset
    maps' ``e^{|x'|^2/2}`` exactly (``exp(0) = 1``), so those stay bounded.
    """
    proj = x @ w.T  # (n, m): ω_i·x
    half_sq = 0.5 * xp.sum(x * x, axis=1, keepdims=True)  # |x|²/2
    shift = 0.0 if target is None else target.log_factor(half_sq)
    fmap = registry.entry("kind", kind).feature_map
    if not fmap.symmetric:
        return fmap.features(proj, w, half_sq, shift, A, phase, xp, role=role)
    return fmap.features(proj, w, half_sq, shift, A, phase, xp)


def feature_map(X, W, kind, *, nu=None, sum_normalize=False, A=None, phase=None,
                kernel="softmax", gamma=None, B_query=None, B_key=None, role="query"):
    r"""Features φ(X): random features of the softmax kernel, or a deterministic map.

    Parameters
    ----------
    X : array_like of shape (n, d) or (d,)
        Finite inputs; a 1-D x is one row and the result is then (r,).
    W : array_like of shape (m, d), or None
        Projections ω_1..ω_m as rows (:func:`rfkernels.draw_projections`)
        for the random kinds; must be None for the deterministic maps
        :data:`FEATURE_MAPS`.
    kind : str
        The feature map: a random kind of :data:`rfkernels.KINDS`, or a
        deterministic map of linear attention [2]_.
    nu : int, optional
        DPFP's ν, 1 <= ν <= 2d - 1 (default 1); only for ``kind="dpfp"``.
    sum_normalize : bool, default False
        Return :math:`\varphi(x) / \sum_l \varphi_l(x)` (Schlag et al.'s sum
        normalisation [2]_: entries in [0, 1] summing to 1). Only for the
        non-negative maps (:func:`sum_normalizable`); computed where positive
        per-row factors cancel, so it does not overflow where φ would.
    A : float or "auto", optional
        The parameter of ``kind="oprf"`` (required there, refused for the
        other kinds): a float ``A < 1/8``, the same for every input whose
        features are combined, or ``"auto"``, the optimal ``A*`` for the
        pairs of rows of X with themselves (:func:`oprf_auto_a` ``(X)``).
        Features of two different sets must share one A: compute it once
        with ``oprf_auto_a(X, Y)`` and pass the float. With
        ``kernel="gaussian"`` A is that of the scaled inputs
        (``"auto"`` resolves on :math:`\sqrt{2\gamma}\,X`; the shared float is
        ``oprf_auto_a(c * X, c * Y)``, ``c = sqrt(2 * gamma)``).
    phase : array_like of shape (m,), optional
        The phases :math:`b_i \in [0, 2\pi)` of ``kind="offset"`` (required
        there, refused for the other kinds; :func:`rfkernels.draw_phases`).
    B_query, B_key : array_like of shape (d, d), optional
        ``kind="derf"`` (with ``A``, a float or a symmetric (d, d) array,
        :math:`8A \prec I`): the dense-exponential features
        :math:`D e^{\omega^\top A\omega + \omega^\top B_k x + x^\top C_k x}/\sqrt m`
        of :mod:`rfkernels.estimators.derf`; ``B_key`` is derived from the
        unbiasedness identity when omitted. The data-fitted kinds
        (``"saderf"``, ``"aderf"``, ``"sderf"``) are fitted first:
        ``rfkernels.fit_derf(kind, Q, K).keywords`` are these arguments.
    role : {"query", "key"}, default "query"
        Which of DERF's two maps (:math:`B_1` queries, :math:`B_2` keys), or
        of the hybrid's (its key map negates the angular signs of its
        positive block); the other kinds have one map for both and ignore it.
    kernel : {"softmax", "gaussian"}, default "softmax"
        The kernel the random features estimate: ``exp(x·y)``, or
        ``exp(-gamma |x - y|^2)``, whose features are the softmax ones of
        :math:`x' = \sqrt{2\gamma}\, x` times :math:`e^{-|x'|^2/2}`
        (for trig: :math:`[\sin, \cos](W x')/\sqrt m`; for offset:
        ``RBFSampler``'s :math:`\sqrt{2/m}\cos(W x' + b)`).
    gamma : float, optional
        The Gaussian kernel's parameter (> 0; ``kernel="gaussian"`` only).

    Returns
    -------
    phi : ndarray of shape (n, r)
        r = 2m for ``"trig"`` and ``"hyperbolic"``, r = m for ``"positive"``, ``"oprf"``
        and ``"offset"``,
        r = d for ``"identity"`` and ``"elu1"``, r = 2dν for ``"dpfp"``
        (:func:`feature_dimension`). For the random kinds
        ``feature_map(X, W, k) @ feature_map(Y, W, k).T`` is
        :func:`estimate`. Columns are ordered [sin | cos],
        [exp(+) | exp(−)] and, for DPFP, by shift s = 1..ν.

    Raises
    ------
    ValueError
        Non-finite or badly shaped X or W, d mismatch, unknown kind; W given
        for a deterministic map or missing for a random kind; nu out of
        range or given for another kind; sum_normalize for a kind whose
        features can be negative (trig, identity).
    TypeError
        sum_normalize not a bool, nu not an integer.
    FloatingPointError
        If a feature overflows (random kinds: use :func:`log_estimate`;
        DPFP: inputs beyond about 1e154); with ``sum_normalize``, if a row's
        features are all 0 (DPFP of an input with no two positive entries of
        relu([x, −x]) 1..ν apart, e.g. x = (0, 1) with ν = 1).

    Notes
    -----
    With :math:`\omega_1..\omega_m` the rows of W [1]_:

    .. math::

        \varphi_{\text{trig}}(x) &= \frac{e^{|x|^2/2}}{\sqrt{m}}
            \bigl[\sin(\omega_i^\top x)\bigr]_i \oplus
            \frac{e^{|x|^2/2}}{\sqrt{m}}\bigl[\cos(\omega_i^\top x)\bigr]_i \\
        \varphi_{+}(x) &= \frac{1}{\sqrt{m}}
            \bigl[e^{\omega_i^\top x - |x|^2/2}\bigr]_i \\
        \varphi_{\text{hyp}}(x) &= \frac{e^{-|x|^2/2}}{\sqrt{2m}}
            \bigl[e^{\omega_i^\top x}\bigr]_i \oplus
            \frac{e^{-|x|^2/2}}{\sqrt{2m}}\bigl[e^{-\omega_i^\top x}\bigr]_i \\
        \varphi_{\text{oprf}}(x) &= \frac{(1 - 4A)^{d/4}}{\sqrt{m}}
            \bigl[e^{A|\omega_i|^2 + \sqrt{1 - 4A}\,\omega_i^\top x - |x|^2/2}\bigr]_i

    (optimal positive random features, Likhosherstov et al. 2022: unbiased
    for every A < 1/8, A = 0 is FAVOR+; see ``docs/beyond.rst``).

    The deterministic maps [2]_: identity :math:`\varphi(x) = x`; ELU+1
    :math:`\varphi(x)_i = \operatorname{elu}(x_i) + 1` (:math:`x_i + 1` for
    :math:`x_i > 0`, :math:`e^{x_i}` otherwise); DPFP-ν with
    :math:`\tilde x = \operatorname{relu}([x, -x]) \in \mathbb R^{2d}`,

    .. math::

        \varphi_{\text{DPFP-}\nu}(x) = \bigoplus_{s=1}^{\nu}
            \bigl[\tilde x_i\, \tilde x_{(i+s) \bmod 2d}\bigr]_{i=0}^{2d-1}
            \quad (\texttt{kt * np.roll(kt, -s)}).

    Example (Schlag et al.'s worked example, checked in the tests): for
    x = (1.5, −0.8), :math:`\tilde x = (1.5, 0, 0, 0.8)` and DPFP-1 gives
    (0, 0, 0, 1.2); ELU+1 of (1, 0) is (2, 1), sum-normalised (2/3, 1/3).

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021, Lemma 1 and Section 2.3. https://arxiv.org/abs/2009.14794
    .. [2] I. Schlag, K. Irie and J. Schmidhuber, "Linear Transformers Are
       Secretly Fast Weight Programmers", ICML 2021, Sections 4-5.
       https://arxiv.org/abs/2102.11174
    """
    check_choice(role, "role", ROLES)
    if is_derf(kind):
        if nu is not None or sum_normalize or phase is not None:
            raise ValueError(f"kind={kind!r} takes none of nu, sum_normalize, phase")
        return _derf_feature_map(X, W, kind, A, B_query, B_key, role, kernel, gamma)
    refuse_derf_parameters(kind, B_query, B_key)
    xp = get_array_module(X) if W is None else get_array_module(X, W)
    deterministic, nu, sum_normalize = check_feature_map(kind, W, nu, sum_normalize, A=A)
    A = None if deterministic else check_map_param(kind, A)
    target, scale = check_target(kernel, gamma)
    if deterministic and target.name != "softmax":
        raise ValueError(f"kernel={kernel!r} is for the random kinds; the deterministic map "
                         f"{kind!r} estimates no kernel")
    x, x1 = check_rows(X, "X", xp)
    if deterministic:
        w = None
        check_feature_map(kind, None, nu, sum_normalize, x.shape[1])  # nu <= 2d - 1
        if xp is np:
            r = feature_dimension(kind, x.shape[1], nu=nu)
            check_memory(8 * 3 * x.shape[0] * r, f"feature_map(kind={kind!r}) of n={x.shape[0]} "
                                                 f"inputs with r={r} features")
    else:
        w = check_projections(W, xp)
        check_same_d([x.shape, w.shape], ["X", "W"])
        phase = check_phase(kind, phase, w.shape[0], xp)
        check_memory_pairs(x, None, w, xp, kind)
        if scale != 1.0:
            x = scale * x
        A = fit_map_param(kind, A, x, x)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if sum_normalize:
            phi = _sum_normalised(x, w, kind, nu, xp, A)
        elif deterministic:
            phi = _deterministic_features(x, kind, nu, xp)
        else:
            phi = _features(x, w, kind, xp, A, phase, target, role)
    if deterministic or sum_normalize:
        if not bool(xp.all(xp.isfinite(phi))):
            raise FloatingPointError(
                f"feature_map(kind={kind!r}) overflowed (inf or NaN): the inputs are too large "
                "for this map (DPFP squares them: entries beyond about 1e154); rescale X"
            )
    else:
        require_finite(phi, xp, f"feature_map(kind={kind!r})", "log_estimate")
    return phi[0] if x1 else phi


def _derf_feature_map(X, W, kind, A, B_query, B_key, role, kernel, gamma):
    """:func:`feature_map` of a kind with two maps: validated, then its map's ``features``."""
    entry = registry.entry("kind", kind)
    if entry.population:
        given = entry.feature_map.given_kind
        raise ValueError(f"kind={kind!r} is fitted on a population of queries and keys, not on the "
                         "rows of one map: " + (entry.feature_map.no_keywords_reason if given is None
                                                else "fit = rfkernels.fit_derf(kind, Q, K), then "
                                                f"feature_map(X, W, {given!r}, **fit.keywords, role=...)"))
    require_projections(kind, W)
    xp = get_array_module(X, W)
    x, x1 = check_rows(X, "X", xp)
    est = estimator(kind, A=A, B_query=B_query, B_key=B_key, d=x.shape[1])
    params = est.params
    target, scale = check_target(kernel, gamma)
    w = check_projections(W, xp)
    check_same_d([x.shape, w.shape], ["X", "W"])
    if est.kind is not entry:  # another kind's parameters (FAVOR+'s, OPRF's): that kind, the same bits
        param = est.kind.feature_map.param
        values = {} if param is None else {param.name: getattr(params, param.name)}
        return feature_map(X, W, est.kind.name, kernel=kernel, gamma=gamma, **values)
    p = params.derf
    check_memory_pairs(x, None, w, xp)
    x = scale * x if scale != 1.0 else x
    shift = target.log_factor(0.5 * xp.sum(x * x, axis=1, keepdims=True))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        phi = entry.feature_map.features(x, w, p, role, xp, shift)
    require_finite(phi, xp, f"feature_map(kind={kind!r})", "log_estimate")
    return phi[0] if x1 else phi


def estimate(X, Y, W, kind, *, A=None, phase=None, kernel="softmax", gamma=None):
    r"""Random-feature estimate of exp(X @ Y.T) (or of the Gaussian kernel) for every pair of rows.

    Parameters
    ----------
    X : array_like of shape (n_x, d) or (d,)
    Y : array_like of shape (n_y, d) or (d,)
    W : array_like of shape (m, d)
        Projections as rows.
    kind : str
        A registered kind with a literal feature map (:func:`mapped_kinds`).
    A : float or "auto", optional
        The OPRF parameter (``kind="oprf"`` only, required there): a float
        < 1/8, or ``"auto"``: :func:`oprf_auto_a` ``(X, Y)``, the optimal A
        for the mean ``|x_i + y_j|^2 / d`` over all pairs.
    phase, kernel, gamma
        As in :func:`feature_map` (the offset kind's phases; the Gaussian
        kernel ``exp(-gamma |x - y|^2)``).

    Returns
    -------
    K : ndarray of shape (n_x, n_y)
        ``feature_map(X, W, kind) @ feature_map(Y, W, kind).T``; the row
        axis of a 1-D X or Y is dropped (a scalar for two vectors).

    Raises
    ------
    ValueError
        Non-finite or badly shaped inputs, d mismatch, unknown kind.
    FloatingPointError
        If a feature or the estimate overflows; :func:`log_estimate` gives
        the same numbers as ``(sign, log|K|)`` without overflow.

    Notes
    -----
    With :math:`u = x + y`, :math:`z = x - y` and
    :math:`\Lambda = e^{-(|x|^2 + |y|^2)/2}`, the estimates are [1]_

    .. math::

        \widehat{SM}_{\text{trig}} &= e^{(|x|^2+|y|^2)/2}\,
            \frac1m\sum_i \cos(\omega_i^\top z) \\
        \widehat{SM}_{+} &= \Lambda\, \frac1m\sum_i e^{\omega_i^\top u} \\
        \widehat{SM}_{\text{hyp}} &= \Lambda\, \frac1m\sum_i \cosh(\omega_i^\top u)

    each unbiased for :math:`SM(x, y) = e^{x^\top y}` when
    :math:`\omega_i \sim N(0, I_d)` marginally. Underflow to 0 is not an
    error (the estimate is then below the smallest double).

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021. https://arxiv.org/abs/2009.14794
    """
    xp, x, y, w, x1, y1, phase = check_pair(X, Y, W, kind, A, phase)
    target, scale = check_target(kernel, gamma)
    check_memory_pairs(x, y, w, xp, kind)
    if scale != 1.0:
        x, y = scale * x, scale * y
    A = fit_map_param(kind, check_map_param(kind, A), x, y)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        k = (_features(x, w, kind, xp, A, phase, target)
             @ _features(y, w, kind, xp, A, phase, target, "key").T)
    require_finite(k, xp, f"estimate(kind={kind!r})", "log_estimate")
    return squeeze_pairs(k, x1, y1)


def _log_matmul_exp(a, b, xp):
    r"""``log(exp(a) @ exp(b).T)`` for a (n_x, k), b (n_y, k), without overflow.

    Each row is shifted by its maximum, so the product of exponentials is a
    sum of positive terms <= 1 computed by a matmul. Where that sum is below
    ``_LME_TINY`` the terms that matter may have underflowed (the maxima of a
    row of ``a`` and of ``b`` sit at different k); those entries are redone
    as an exact logsumexp over k of ``a[i] + b[j]``.
    """
    a_max = xp.max(a, axis=1)
    b_max = xp.max(b, axis=1)
    s = xp.exp(a - a_max[:, None]) @ xp.exp(b - b_max[:, None]).T
    out = xp.log(s) + a_max[:, None] + b_max[None, :]
    ii, jj = xp.nonzero(s < _LME_TINY)
    n_bad = int(ii.shape[0])
    if n_bad:
        step = max(1, LME_CHUNK // a.shape[1])
        for start in range(0, n_bad, step):
            i = ii[start : start + step]
            j = jj[start : start + step]
            t = a[i] + b[j]
            t_max = xp.max(t, axis=1)
            out[i, j] = xp.log(xp.sum(xp.exp(t - t_max[:, None]), axis=1)) + t_max
    return out


def log_estimate(X, Y, W, kind, *, A=None, phase=None, kernel="softmax", gamma=None):
    r"""Sign and log-magnitude of :func:`estimate`, without overflow.

    Like :func:`numpy.linalg.slogdet`, the estimate is returned as
    ``sign * exp(logabs)``.

    Parameters
    ----------
    X : array_like of shape (n_x, d) or (d,)
    Y : array_like of shape (n_y, d) or (d,)
    W : array_like of shape (m, d)
    kind : str
        As in :func:`estimate`.
    A : float or "auto", optional
        The OPRF parameter, as in :func:`estimate`.
    phase, kernel, gamma
        As in :func:`feature_map`.

    Returns
    -------
    sign : ndarray of shape (n_x, n_y)
        +1.0 everywhere for ``"positive"``, ``"hyperbolic"`` and ``"oprf"``; for
        ``"trig"`` the sign of the estimate, 0.0 where it is exactly 0.
    logabs : ndarray of shape (n_x, n_y)
        ``log|estimate|``; ``-inf`` only where ``sign`` is 0 (trig). Finite
        wherever the estimate is nonzero, even where :func:`estimate`
        overflows (e.g. ``|x| = |y| = 40``).

    Raises
    ------
    ValueError
        Non-finite or badly shaped inputs, d mismatch, unknown kind.
    FloatingPointError
        Only if ``|x|²`` or the projections ``W @ x`` themselves overflow (beyond
        about 1e308), which no log-domain rewriting can represent.

    Notes
    -----
    Positive and hyperbolic estimates are sums of exponentials, so the log
    is a log-sum-exp over the features' exponents,

    .. math::

        \log \widehat{SM}_{+} &= \operatorname{logsumexp}_i
            \bigl(\omega_i^\top x - \tfrac{|x|^2}{2}
                  + \omega_i^\top y - \tfrac{|y|^2}{2}\bigr) - \log m \\
        \log \widehat{SM}_{\text{hyp}} &= \operatorname{logsumexp}_{i,\pm}
            \bigl(\pm\omega_i^\top x - \tfrac{|x|^2}{2}
                  \pm\omega_i^\top y - \tfrac{|y|^2}{2}\bigr) - \log 2m

    evaluated for all pairs through a max-shifted matrix product, with an
    exact per-pair fallback where that product underflows. The trigonometric
    estimate is

    .. math::

        \log|\widehat{SM}_{\text{trig}}| = \frac{|x|^2 + |y|^2}{2}
            + \log\Bigl|\frac1m \sum_i \cos(\omega_i^\top x - \omega_i^\top y)\Bigr|,

    the sign being that of the mean cosine. The mean has absolute rounding
    error of order m·eps, so where it nearly cancels its relative accuracy
    is limited, as it is for :func:`estimate`.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021. https://arxiv.org/abs/2009.14794
    """
    xp, x, y, w, x1, y1, phase = check_pair(X, Y, W, kind, A, phase)
    target, scale = check_target(kernel, gamma)
    check_memory_pairs(x, y, w, xp, kind)
    if scale != 1.0:
        x, y = scale * x, scale * y
    fmap = registry.entry("kind", kind).feature_map
    A = fit_map_param(kind, check_map_param(kind, A), x, y)
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        sign, logabs = _log_estimate(x, y, w, fmap, xp, A, phase, target)
    # -inf is legitimate (trig, exactly zero mean); NaN or +inf means |x|² or ω·x overflowed
    if bool(xp.any(xp.isnan(logabs) | (logabs == xp.inf))):
        raise FloatingPointError(
            f"log_estimate(kind={kind!r}) overflowed: |x|^2 or the projections W @ x "
            "are too large to represent even in the log domain"
        )
    return squeeze_pairs(sign, x1, y1), squeeze_pairs(logabs, x1, y1)


def _log_estimate(x, y, w, fmap, xp, A=None, phase=None, target=None):
    px = x @ w.T
    py = y @ w.T
    sq_x = 0.5 * xp.sum(x * x, axis=1)
    sq_y = 0.5 * xp.sum(y * y, axis=1)
    # the target kernel's per-row log factors (0 for softmax, -|x'|²/2 for gaussian)
    row_x = 0.0 if target is None else target.log_factor(sq_x)
    row_y = 0.0 if target is None else target.log_factor(sq_y)
    return fmap.log_estimate(px, py, sq_x, sq_y, row_x, row_y, w, A, phase, xp, _log_matmul_exp)


#: Names this module no longer holds (``CHANGELOG.md``).
_RENAMED = {
    "SUM_NORMALIZABLE": ("rfkernels.features.sum_normalizable()", sum_normalizable),
    "oprf_exponents": ("rfkernels.estimators.oprf.exponents", lambda: oprf.exponents),
}


def __getattr__(name):
    return renamed(__name__, _RENAMED, name)

