"""The data-tilted estimator against the floor on MiniLM heads: fitted on some rows, measured on others.

Per head of all-MiniLM-L6-v2 (the default text, 512 tokens; the four heads of
lowest attention floor at m = 1024, or those given), the policy is fitted on
the even query rows (every key) and everything is measured on the odd query
rows, at m = 1024 over 16 draws of W (iid), as relative attention MSE with its
standard error:

- the **floor** of the odd rows (:func:`rfkernels.floor.attention_floor`, 1%),
  and whether its first order holds at r = 1024;
- **FAVOR+** (positive, iid) and **SADERF** (``fit_rows``: fitted on the even
  rows), the registered estimators nearest the floor;
- the registered **data-tilted** kind (``fit_rows`` = the even rows), and its
  pool of centres at 256, 1024, 4096 (the default) and 16384;
- **resampled toward the optimal policy** (sampling-importance-resampling):
  N candidates from the data-tilted mixture, resampled to m rows with
  probability proportional to :math:`\\sqrt{H(\\omega)}\\,\\Omega/M`, where
  :math:`H(\\omega) = \\sum_q D_q^{-2}|\\sum_j \\varphi_q\\varphi_j (v_j - o_q)|^2`
  on the fit rows (the attention floor's optimal policy is
  :math:`\\rho^* \\propto \\Omega\\sqrt{H}`, MATH.md); each row weighted by
  :math:`1/\\sqrt{H(\\omega)}` (the normalising constant cancels in attention).
  The resampled law is :math:`\\rho^*` only as N grows: at finite N the
  estimator is biased (the pool-size bias). It is measured on the normaliser
  :math:`\\hat D_q` (the kernel's row sums, where the normalising constant
  :math:`\\hat Z`, the mean of the candidates' ratios, does not cancel): its
  relative bias, the mean over rows and draws of :math:`\\hat D_q/D_q - 1`,
  with its standard error over the draws. FAVOR+ and the data-tilted kind are
  unbiased there (a check); attention itself, a ratio, is biased for every
  estimator.

Prints Markdown tables (docs/floor.rst)::

    python benchmarks/tilted_vs_floor.py [--heads 0:2,0:11,...] [--draws 16]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from rfkernels import draw_projections, favor_attention, models, softmax_attention
from rfkernels.estimators import estimator, tilted
from rfkernels.floor import attention_floor
from rfkernels.models.texts import text_and_source

M = 1024
#: The four heads of lowest attention floor at m = 1024 (bench_floor.py --csv, 2026-12-03).
HEADS = ((0, 2), (0, 11), (5, 0), (0, 7))
POOLS = (256, 1024, 4096, 16384)
#: Candidates per row of the resampling toward the optimal policy.
SIR_FACTORS = (2, 8, 32)
CHUNK = 2048


def _logsumexp(a, axis):
    top = np.max(a, axis=axis, keepdims=True)
    return np.squeeze(top, axis) + np.log(np.sum(np.exp(a - top), axis=axis))


def log_h(omega, q, k, v):
    """log H(omega) on the rows q (the attention floor's first-order integrand), per row of omega."""
    logits = q @ k.T
    log_d = _logsumexp(logits, 1)
    o = np.exp(logits - log_d[:, None]) @ v
    out = np.empty(omega.shape[0])
    for c0 in range(0, omega.shape[0], CHUNK):
        w = omega[c0:c0 + CHUNK]
        lb = w @ k.T - 0.5 * np.sum(k * k, axis=1)[None, :]
        top = np.max(lb, axis=1, keepdims=True)
        b = np.exp(lb - top)
        bv, b1 = b @ v, b.sum(axis=1)
        la = 2.0 * (w @ q.T - 0.5 * np.sum(q * q, axis=1)[None, :] - log_d[None, :])
        sq = (np.sum(bv * bv, axis=1)[:, None] - 2.0 * b1[:, None] * (bv @ o.T)
              + (b1 * b1)[:, None] * np.sum(o * o, axis=1)[None, :])
        with np.errstate(divide="ignore"):
            out[c0:c0 + CHUNK] = 2.0 * top[:, 0] + _logsumexp(la + np.log(np.maximum(sq, 0.0)), 1)
    return out


def augmented(test, k, omega, lam):
    """The positive form in d + 1 dimensions of features exp(omega.x - |x|^2/2 + lam/2)."""
    qt = np.concatenate([test, np.ones((test.shape[0], 1))], axis=1)
    kt = np.concatenate([k, np.ones((k.shape[0], 1))], axis=1)
    return qt, kt, np.concatenate([omega, (0.5 * (lam + 1.0))[:, None]], axis=1)


def sir_inputs(test, k, v, fit_rows, policy, n_candidates, rng, seed):
    """The positive form of m rows resampled from n_candidates draws of the mixture toward rho*."""
    w = draw_projections(n_candidates, k.shape[1], seed=seed)
    omega, lam = tilted.draws(policy, w)
    lh = log_h(omega, fit_rows, k, v)
    logr = lam + 0.5 * lh  # log of Omega sqrt(H) / M
    top = logr.max()
    p = np.exp(logr - top)
    log_z = top + math.log(p.mean())  # Z-hat: the mean of the candidates' ratios
    idx = rng.choice(n_candidates, size=M, p=p / p.sum())
    return augmented(test, k, omega[idx], log_z - 0.5 * lh[idx])  # Omega / rho-hat = Z-hat / sqrt(H)


def log_normaliser(qt, kt, wt):
    """log D-hat per query row of the positive features (qt, kt, wt), in log space."""
    lk = wt @ kt.T - 0.5 * np.sum(kt * kt, axis=1)[None, :]
    lq = qt @ wt.T - 0.5 * np.sum(qt * qt, axis=1)[:, None]
    return _logsumexp(lq + _logsumexp(lk, 1)[None, :], 1) - math.log(wt.shape[0])


def head_rows(cap, layer, head, draws, seed):
    root = math.sqrt(cap.scale)
    q, k, v = root * cap.q[layer, head], root * cap.k[layer, head], cap.v[layer, head]
    fit, test = q[0::2], q[1::2]
    exact = softmax_attention(test, k, v)
    ms = float(np.mean(exact * exact))
    runs = {"FAVOR+": [], "SADERF": []}
    policies = {}
    for pool in POOLS:
        tilted.POOL = pool
        policies[pool] = estimator("data-tilted", d=q.shape[1]).fitted_on(fit, k).params
    tilted.POOL = 4096
    outs, biases = {}, {}
    log_d = _logsumexp(test @ k.T, 1)
    rng = np.random.default_rng(seed)
    for t in range(draws):
        w = draw_projections(M, q.shape[1], seed=np.random.SeedSequence([seed, t]))
        outs.setdefault("SADERF", []).append(favor_attention(
            test, k, v, w, "saderf", fit_rows=(fit, k), nonpositive="divide").output)
        forms = {"FAVOR+": (test, k, w)}
        for pool, policy in policies.items():
            forms[f"data-tilted, pool {pool}"] = tilted.dense_attention_inputs(_Spec(policy), test,
                                                                               k, w, np)
        for f in SIR_FACTORS:
            forms[f"resampled, N = {f}m"] = sir_inputs(test, k, v, fit, policies[4096], f * M, rng,
                                                       np.random.SeedSequence([seed, t, f]))
        for name, (qt, kt, wt) in forms.items():
            outs.setdefault(name, []).append(favor_attention(qt, kt, v, wt, "positive",
                                                             nonpositive="divide").output)
            rel = np.expm1(log_normaliser(qt, kt, wt) - log_d)
            biases.setdefault(name, []).append(float(np.mean(rel)))
    floor = attention_floor(test, k, v, scale=1.0, seed=seed)
    rows = {}
    for name, got in outs.items():
        errs = np.mean((np.asarray(got) - exact) ** 2, axis=(1, 2)) / ms
        b = np.asarray(biases.get(name, [math.nan, math.nan]))
        rows[name] = (float(errs.mean()), float(errs.std(ddof=1) / math.sqrt(draws)),
                      float(b.mean()), float(b.std(ddof=1) / math.sqrt(b.size)))
    return rows, (floor.mse(M), floor.stderr / M, floor.valid_at(M))


class _Spec:
    """What dense_attention_inputs reads of an estimator: its params."""

    def __init__(self, params):
        self.params = params


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", default=None, help="layer:head,... (default: the four of HEADS)")
    parser.add_argument("--draws", type=int, default=16)
    args = parser.parse_args()
    heads = HEADS if args.heads is None else tuple(
        tuple(int(x) for x in h.split(":")) for h in args.heads.split(","))
    text, _ = text_and_source(None)
    cap = models.load().capture(text)
    started = time.perf_counter()
    print(f"m = {M}, {args.draws} draws of W (iid), fitted on the even query rows, measured on the "
          "odd ones; relative attention MSE ± se, its ratio to the floor ± se, and the "
          "normaliser's relative bias ± se\n")
    for layer, head in heads:
        rows, (fl, flse, valid) = head_rows(cap, layer, head, args.draws, 1000 * layer + head)
        print(f"head ({layer}, {head}): floor {fl:.4g} ± {flse:.2g} (first order "
              f"{'valid' if valid else 'NOT valid'} at r = {M})\n")
        print("| estimator | relative MSE | / floor | normaliser bias |")
        print("|---|---|---|---|")
        for name, (mse, se, bias, bse) in rows.items():
            ratio, rse = mse / fl, mse / fl * math.hypot(se / mse, flse / fl)
            shown = "—" if math.isnan(bias) else f"{bias:+.3f} ± {bse:.3f}"
            print(f"| {name} | {mse:.4g} ± {se:.2g} | {ratio:.2f} ± {rse:.2f} | {shown} |")
        print()
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
