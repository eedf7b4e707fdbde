r"""Kind ``"data-tilted"``: positive features drawn toward the data (MATH.md, "Near the floor").

The positive representation :math:`e^{x\cdot y} = E_{\omega\sim\Omega}\,
\varphi(x, \omega)\varphi(y, \omega)`, :math:`\varphi(x, \omega) = e^{\omega\cdot x - |x|^2/2}`,
sampled from a policy fitted on a population of queries and keys instead of
:math:`\Omega = N(0, I)`. The optimal policy of a population is the square
root of a mixture of the pairs' tilts :math:`N(x_p + y_p, I)` (MATH.md, "The
variance floor"); this kind samples a mixture of tilts itself:

- **fit** (:func:`fit`): a pool of :data:`POOL` centres :math:`u = q_i + k_j`,
  pairs of the population taken by systematic resampling with weight
  :math:`p_{ij}/L_q` (each query the same mass; its keys by its softmax
  attention weights :math:`p_{ij} \propto e^{q_i\cdot k_j}`, the attention
  floor's weights :math:`K_{ij}|v_j - o_i|/D_i` without the values, which the
  fit does not see). Deterministic: the same rows give the same pool.
- **draw** (:func:`shifts`, :func:`log_weights`): row :math:`i` of the
  ensemble's projections W (any ensemble whose rows are marginally
  :math:`N(0, I)`) is shifted, :math:`\omega_i = w_i + s_i`: every
  :data:`DEFENSIVE_EVERY`-th row not at all (the defensive component), the
  others by centres spread evenly through the pool. Each feature carries the
  weight :math:`\sqrt{\Omega(\omega_i)/M(\omega_i)}` with
  :math:`M = \frac1m\sum_{l} N(s_l, I)`, the balance heuristic of multiple
  importance sampling: :math:`E\,\frac1m\sum_i
  \varphi(x, \omega_i)\varphi(y, \omega_i)\,\Omega/M = e^{x\cdot y}` for every
  pair (:math:`\frac1m\sum_i N(s_i, I) = M`), and the defensive rows bound
  the weight: :math:`\Omega/M \le m/\#\{\text{defensive rows}\} \le 10`.

Rows with a deterministic centre each are a stratified (coupled) design: their
variance is at most that of m independent draws from M, so it can go below
the floor of independent draws (measured in ``docs/floor.rst``).

No scalar law (the weight reads every row's shift): the literal method only.
Attention runs as FAVOR+'s in d + 1 dimensions: with :math:`\tilde x = [x, 1]`
and :math:`\tilde\omega_i = [\omega_i, (\lambda_i + 1)/2]`,
:math:`\lambda_i = \log\Omega(\omega_i)/M(\omega_i)`,
:math:`\tilde\omega\cdot\tilde x - |\tilde x|^2/2 = \omega\cdot x - |x|^2/2 + \lambda/2`
exactly (:func:`dense_attention_inputs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import maps, positive, registry

#: Centres the fit keeps (a pool; the draw spreads its rows evenly through it).
POOL = 4096
#: Every DEFENSIVE_EVERY-th row (from row 0) is not shifted: the defensive share 1/10.
DEFENSIVE_EVERY = 10
#: Rows of the log-weight computation per block (memory: BLOCK x distinct shifts).
BLOCK = 512


@dataclass(frozen=True, eq=False)
class TiltPolicy:
    """The fitted policy: the pool of centres (None until fitted) and how many rows it was fitted on.

    Attributes
    ----------
    centres : ndarray of shape (POOL, d) or None
        The centres :math:`q_i + k_j` (read-only).
    fitted_rows : tuple of int
        ``(queries, keys)`` of the population it was fitted on.
    """

    centres: object = None
    fitted_rows: tuple = ()

    @property
    def fitted(self):
        """Fitted on a population (an unfitted policy draws nothing)."""
        return self.centres is not None

    @property
    def d(self):
        return None if self.centres is None else self.centres.shape[1]


_UNFITTED = ("kind='data-tilted' draws toward a population of queries and keys: fit it on one "
             "(rfkernels.estimator('data-tilted', m=..., d=...).fit(Q, K), or pass the rows to "
             "favor_attention, diagnose or rank, which fit it there)")


def policy_of(value):
    """The fitted :class:`TiltPolicy` of a pair's value, refusing an unfitted one."""
    if not isinstance(value, TiltPolicy) or not value.fitted:
        raise ValueError(_UNFITTED)
    return value


def _softmax_rows(logits):
    top = np.max(logits, axis=1, keepdims=True)
    p = np.exp(logits - top)
    return p / np.sum(p, axis=1, keepdims=True)


def fit(x, y):
    """``{"centres": (POOL, d)}``: the pool of centres of queries ``x`` (n, d) and keys ``y`` (n', d).

    Systematic resampling (offsets ``(t + 1/2)/POOL``) of the pairs with
    weight :math:`p_{ij}/n`, :math:`p_{ij}` query i's softmax weight of key j:
    query i holds ``POOL/n`` centres, split among its keys by their weights.
    Refuses a single pair (the policy would be fitted on the pair it measures).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = x.shape[0]
    if n * y.shape[0] < 2:
        raise ValueError("kind='data-tilted' is fitted on a population of queries and keys, never on one "
                         "pair or one sample (its tilt toward that pair alone would measure "
                         "nothing): give x and y of shape (n, d) with n * n' >= 2")
    u = (np.arange(POOL) + 0.5) / POOL * n
    rows = np.minimum(u.astype(np.int64), n - 1)
    within = u - rows
    keys = np.empty(POOL, dtype=np.int64)
    chunk = max(1, (1 << 22) // max(1, y.shape[0]))
    for r0 in range(0, n, chunk):
        cdf = np.cumsum(_softmax_rows(x[r0:r0 + chunk] @ y.T), axis=1)
        sel = np.flatnonzero((rows >= r0) & (rows < r0 + chunk))
        for s0 in range(0, sel.size, chunk):  # each centre's key: searchsorted on its row's cdf
            t = sel[s0:s0 + chunk]
            c = cdf[rows[t] - r0]
            found = np.sum(c < (within[t] * c[:, -1])[:, None], axis=1)
            keys[t] = np.minimum(found, y.shape[0] - 1)
    centres = x[rows] + y[keys]
    centres.setflags(write=False)
    return {"centres": centres, "fitted_rows": (int(n), int(y.shape[0]))}


def fitted_params(values):
    """The :class:`TiltPolicy` of :func:`fit`'s values."""
    return TiltPolicy(values["centres"], tuple(values.get("fitted_rows", ())))


def check_params(values, *, batch=False):
    """Kind 'data-tilted' takes no parameter (it is fitted on a population)."""
    return TiltPolicy()


def _allocation(m, pool):
    """Per row, the centre index (-1: a defensive row, not shifted)."""
    index = np.full(m, -1, dtype=np.int64)
    tilted = np.flatnonzero(np.arange(m) % DEFENSIVE_EVERY != 0)
    if tilted.size:
        index[tilted] = ((np.arange(tilted.size) + 0.5) * pool / tilted.size).astype(np.int64)
    return index


def shifts(policy, m, xp=np):
    """The (m, d) shifts :math:`s_i` of the rows (zero for the defensive ones)."""
    policy = policy_of(policy)
    index = _allocation(m, policy.centres.shape[0])
    out = np.zeros((m, policy.d))
    out[index >= 0] = policy.centres[index[index >= 0]]
    return xp.asarray(out)


def log_weights(policy, omega, xp=np):
    r""":math:`\lambda_i = \log\Omega(\omega_i)/M(\omega_i)`, :math:`M = \frac1m\sum_l N(s_l, I)`, per row of ``omega``.

    :math:`\lambda = \log m - \log\sum_l c_l\, e^{\omega\cdot s_l - |s_l|^2/2}`
    over the distinct shifts :math:`s_l` (``c_l`` rows each), in log space.
    """
    policy = policy_of(policy)
    m = omega.shape[0]
    index = _allocation(m, policy.centres.shape[0])
    distinct, counts = np.unique(index, return_counts=True)
    centres = np.zeros((distinct.size, policy.d))
    centres[distinct >= 0] = policy.centres[distinct[distinct >= 0]]
    s = xp.asarray(centres)
    bias = xp.asarray(np.log(counts) - 0.5 * np.sum(centres * centres, axis=1))
    out = xp.empty(m)
    for r0 in range(0, m, BLOCK):
        a = omega[r0:r0 + BLOCK] @ s.T + bias[None, :]
        top = xp.max(a, axis=1, keepdims=True)
        out[r0:r0 + BLOCK] = math.log(m) - (top[:, 0] + xp.log(xp.sum(xp.exp(a - top), axis=1)))
    return out


def draws(policy, w, xp=np):
    """``(omega, lambda)``: the shifted rows and their log weights, from the ensemble's ``w``."""
    omega = w + shifts(policy, w.shape[0], xp)
    return omega, log_weights(policy, omega, xp)


def log_features(x, w, params, role, xp, shift=0.0):
    r"""``log(sqrt(m) phi_i(x_n))`` (n, m): :math:`\omega_i\cdot x - |x|^2/2 + \lambda_i/2 + \mathrm{shift}`.

    One map for queries and keys (``role`` is accepted for the two-map interface).
    """
    omega, lam = draws(params, w, xp)
    return (x @ omega.T + 0.5 * lam[None, :]) + (shift - 0.5 * xp.sum(x * x, axis=1, keepdims=True))


def features(x, w, params, role, xp, shift=0.0):
    """``phi_i(x_n)``: :func:`log_features`, exponentiated, over ``sqrt(m)``."""
    return xp.exp(log_features(x, w, params, role, xp, shift)) / math.sqrt(w.shape[0])


_NO_SCALAR_LAW = ("kind='data-tilted' weights each row by its mixture density Omega/M, which reads every "
                  "row's shift: no scalar reduction; use method='literal'")


def attention_inputs(est, q, k, xp):
    """Refused: the tilted kind has no scalar law (attention uses :func:`dense_attention_inputs`)."""
    raise ValueError(_NO_SCALAR_LAW)


def dense_attention_inputs(est, q, k, w, xp):
    r"""``(q~, k~, w~)``: the tilted attention as FAVOR+'s in d + 1 dimensions (module notes).

    :math:`\tilde q = [q, 1]`, :math:`\tilde k = [k, 1]`,
    :math:`\tilde\omega_i = [\omega_i, (\lambda_i + 1)/2]`: each positive
    feature is the tilted one exactly.
    """
    omega, lam = draws(est.params, w, xp)
    ones_q, ones_k = xp.ones((q.shape[0], 1)), xp.ones((k.shape[0], 1))
    return (xp.concatenate([q, ones_q], axis=1), xp.concatenate([k, ones_k], axis=1),
            xp.concatenate([omega, (0.5 * (lam + 1.0))[:, None]], axis=1))


def resolve(params, geom):
    """The pair's value: the fitted policy (shared by every pair)."""
    return policy_of(params)


def params_reason(params, ensemble, what):
    """No reduced sampler (the weight reads every row); no closed form (Monte Carlo only)."""
    if what == "reduced":
        return _NO_SCALAR_LAW
    return None


def theory_reason(ensemble, norms):
    return ("kind='data-tilted' has no closed-form MSE (its weight is a mixture density): Monte Carlo "
            "only; its floor is the positive representation's (rfkernels.floor)")


#: One map for queries and keys, drawn through the fitted policy; attention in d + 1 dimensions.
MAP = maps.PairMap(features=features, log_features=log_features, attention_inputs=attention_inputs,
                   dense_attention_inputs=dense_attention_inputs, runs_as=positive.KIND.name,
                   dense_runs_as=positive.KIND.name, given_kind=None, shared=True,
                   no_keywords_reason="kind='data-tilted' has no public feature_map parameters (its draw is W and the "
                                      "fitted centres): favor_attention(Q, K, V, W, 'data-tilted', fit_rows=(Q_fit, "
                                      "K_fit)) runs it, and Monte Carlo (method='literal') measures it")

KIND = registry.register("kind", registry.Kind(
    name="data-tilted", seed_index=9,
    summary="positive features drawn toward the data: a mixture of the pairs' tilts, fitted on a "
            "population (MIS weights)",
    features_per_projection=1, on_sum=True, paper=False, nonnegative=True,
    terms=positive.terms, scalar_terms=positive.scalar_terms, log_mse=None,
    theory_reason=theory_reason, resolve=resolve, fixed_params=lambda value: policy_of(value),
    tilt_reason="kind='data-tilted' is importance-sampled already (its own mixture); use proposal='plain'",
    check_params=check_params, fit=fit, fitted_params=fitted_params, population=True,
    held_out_fit=True,
    representation="positive", params_reason=params_reason, feature_map=MAP,
))
