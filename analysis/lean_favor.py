"""Bidirectional FAVOR on NumPy for the attention study's inner loop (:class:`LeanFavor`).

:func:`rfkernels.analysis.attention.attention_mse` computes the same FAVOR
attention as :func:`rfkernels.attention.favor_attention` for many projection
matrices per input; :class:`LeanFavor` reuses what does not depend on the
projections, and :func:`one_blas_thread` keeps BLAS on one thread for its
skinny products.
"""

from __future__ import annotations

import numpy as np

from rfkernels.estimators import registry

__all__ = ["LEAN_KINDS", "LeanFavor", "lean_kinds", "one_blas_thread"]


def lean_kinds():
    """Kinds whose bidirectional NumPy passes go through :class:`LeanFavor`.

    Those whose feature map takes attention and no parameter (a parameter
    fitted on the data, OPRF's ``A="auto"``, goes through ``favor_attention``).
    """
    return tuple(k.name for k in registry.entries("kind")
                 if k.feature_map is not None and k.feature_map.param is None
                 and k.feature_map.attention_reason is None)


def __getattr__(name):
    if name == "LEAN_KINDS":  # the registry's, at the time of asking
        return lean_kinds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def one_blas_thread():
    """BLAS limited to one thread (threadpoolctl, a dependency).

    The study's matrix products are skinny ((L, 16) by (16, 2m), (L, 2m) by
    (2m, 17)); threaded BLAS made them slower, not faster (docs/performance.md).
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


class LeanFavor:
    """Bidirectional FAVOR on NumPy for one input (Q, K, V), whole sequence at once.

    The study's inner loop: the same computation as
    :func:`rfkernels.attention.favor_attention` (equal to rounding, tested),
    with |k|²/2 and [V, 1] computed once per input and reused for every
    projection matrix, all L rows in one pass (no row blocks: the study's
    ``attention_bytes`` check covers the (L, 2m) feature arrays), and the
    same stabilisation: positive per-row / per-key-set maxima subtracted in
    the exponent, trig keys scaled by exp(|k|²/2 − max), query factors
    dropped. ``output(w, kind, nonpositive)`` returns ``(output, rows with a
    normaliser <= 0)`` under the policies of ``favor_attention``.
    """

    def __init__(self, q, k, v):
        self.q, self.k = q, k
        self.half_q, self.half_k = 0.5 * np.sum(q * q, axis=1), 0.5 * np.sum(k * k, axis=1)
        self.v1 = np.concatenate([v, np.ones((v.shape[0], 1))], axis=1)

    def _num_den(self, w, kind):
        fmap = registry.entry("kind", kind).feature_map
        phiq = fmap.query_features(self.q @ w.T, w, None, np, half_sq=self.half_q[:, None])
        log_k, sign_k = fmap.key_log_features(self.k @ w.T, w, self.half_k[:, None], None, np)
        phik = np.exp(log_k - log_k.max())  # the key set's shift
        if sign_k is not None:
            phik = phik * sign_k
        # one product per group of m outputs (sin | cos, exp(+) | exp(-)), summed in order
        m = w.shape[0]
        out = None
        for g in range(0, phiq.shape[1], m):
            part = phiq[:, g:g + m] @ (phik[:, g:g + m].T @ self.v1)
            out = part if out is None else out + part
        return out[:, :-1], out[:, -1]

    def output(self, w, kind, nonpositive):
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            num, den = self._num_den(w, kind)
            bad = den <= 0
            n_bad = int(np.sum(bad))
            if n_bad and nonpositive == "raise":
                raise FloatingPointError(
                    f"attention_mse(kind={kind!r}): {n_bad} row(s) have a non-positive normaliser "
                    "sum_j phi(q_i).phi(k_j) <= 0; pass nonpositive='nan' or 'divide'"
                )
            zero = den == 0 if nonpositive == "divide" else bad
            out = num / np.where(zero, 1.0, den)[:, None]
            out[zero] = np.nan
        finite = np.all(np.isfinite(out), axis=1)
        if not bool(np.all(finite | bad)):
            raise FloatingPointError(
                f"attention_mse(kind={kind!r}) overflowed in rows with a positive normaliser; "
                "the inputs or projections are too large"
            )
        out[bad & ~finite] = np.nan
        return out, n_bad
