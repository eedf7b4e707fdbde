"""Data-tilted positive features against the floor, fitted on some query rows and measured on others.

An experiment ahead of the registered estimator (issue 39), checking
MATH.md's "Near the floor: data-tilted features", whose numbers were fitted
and measured on the same rows. On the four MiniLM heads with the lowest
attention floor at m = 1024 (the default text, 512 tokens; the heads read
from ``benchmarks/bench_floor.py --csv``, or the four given), per head:

- **fit** on the even query rows: S = 4096 pairs (q, k_j) drawn by the
  attention floor's weights c_qj = K_qj |v_j - o_q| / D_q, the mixture
  M = 0.1 N(0, I) + 0.9 mean_{i in S} N(q_i + k_i, I);
- **measure** on the odd query rows (every key), m = 1024 draws from M,
  features exp(w.x - |x|^2/2) sqrt(Omega(w) / M(w)) shared by every row
  (unbiased for every pair), stabilised per row as rfkernels does: the
  relative attention MSE over 16 draws, with its standard error; beside it
  FAVOR+ (positive, iid) on the same rows and the floor of those rows
  (:func:`rfkernels.floor.attention_floor`, 1%), with its validity at r = 1024.

Prints a Markdown table (docs/floor.rst)::

    python benchmarks/tilted_vs_floor.py [--heads 0:2,0:11,...]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from rfkernels import draw_projections, favor_attention, models, softmax_attention
from rfkernels.floor import attention_floor
from rfkernels.models.texts import text_and_source

M = 1024
DRAWS = 16
CENTRES = 4096
DEFENSIVE = 0.1
#: The four heads of lowest attention floor at m = 1024 (bench_floor.py --csv, 2026-12-03).
HEADS = ((0, 2), (0, 11), (5, 0), (0, 7))


def _logsumexp(a, axis):
    top = np.max(a, axis=axis, keepdims=True)
    return np.squeeze(top, axis) + np.log(np.sum(np.exp(a - top), axis=axis))


def fit(q, k, v, rng):
    """The tilt centres: pairs of the fit rows drawn by K_qj |v_j - o_q| / D_q."""
    logits = q @ k.T
    p = np.exp(logits - _logsumexp(logits, 1)[:, None])
    o = p @ v
    c = p * np.sqrt(np.maximum(np.sum((v[None, :, :] - o[:, None, :]) ** 2, axis=2), 0.0))
    idx = rng.choice(c.size, size=CENTRES, p=(c / c.sum()).ravel())
    i, j = np.divmod(idx, k.shape[0])
    return q[i] + k[j]


def log_weight(w, centres):
    """log Omega(w) / M(w) for each row of w."""
    log_tilts = w @ centres.T - 0.5 * np.sum(centres * centres, axis=1)[None, :]
    log_mix = _logsumexp(log_tilts, 1) - math.log(centres.shape[0])
    return -np.logaddexp(math.log(DEFENSIVE), math.log1p(-DEFENSIVE) + log_mix)


def draw(centres, rng):
    w = rng.standard_normal((M, centres.shape[1]))
    tilted = rng.random(M) >= DEFENSIVE
    w[tilted] += centres[rng.integers(0, centres.shape[0], size=int(tilted.sum()))]
    return w


def tilted_attention(q, k, v, w, lw):
    """Positive features with the shared weight sqrt(Omega/M), each row stabilised by its maximum."""
    def log_phi(x):
        return x @ w.T - 0.5 * np.sum(x * x, axis=1, keepdims=True) + 0.5 * lw[None, :]

    lq, lk = log_phi(q), log_phi(k)
    pq = np.exp(lq - lq.max(axis=1, keepdims=True))
    pk = np.exp(lk - lk.max())
    num, den = pq @ (pk.T @ v), pq @ pk.sum(axis=0)
    return num / den[:, None]


def head_row(cap, layer, head, seed):
    rng = np.random.default_rng(seed)
    root = math.sqrt(cap.scale)
    q, k, v = root * cap.q[layer, head], root * cap.k[layer, head], cap.v[layer, head]
    fit_rows, test_rows = q[0::2], q[1::2]
    centres = fit(fit_rows, k, v, rng)
    exact = softmax_attention(test_rows, k, v)
    ms = float(np.mean(exact * exact))
    tilted, favor = [], []
    for t in range(DRAWS):
        w = draw(centres, rng)
        tilted.append(np.mean((tilted_attention(test_rows, k, v, w, log_weight(w, centres))
                               - exact) ** 2) / ms)
        w0 = draw_projections(M, q.shape[1], seed=np.random.default_rng([seed, t]))
        out = favor_attention(test_rows, k, v, w0, "positive", nonpositive="divide").output
        favor.append(np.mean((out - exact) ** 2) / ms)
    floor = attention_floor(test_rows, k, v, scale=1.0, seed=seed)
    return {"head": (layer, head), "tilted": (np.mean(tilted), np.std(tilted, ddof=1) / math.sqrt(DRAWS)),
            "favor": (np.mean(favor), np.std(favor, ddof=1) / math.sqrt(DRAWS)),
            "floor": (floor.mse(M), floor.stderr / M), "valid": floor.valid_at(M),
            "uniform": float(np.mean((exact - v.mean(axis=0)) ** 2)) / ms}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", default=None, help="layer:head,... (default: the four of HEADS)")
    args = parser.parse_args()
    heads = HEADS if args.heads is None else tuple(
        tuple(int(x) for x in h.split(":")) for h in args.heads.split(","))
    text, _ = text_and_source(None)
    cap = models.load().capture(text)
    print(f"m = {M}, {DRAWS} draws, fit on the even query rows, measured on the odd ones\n")
    print("| head | floor (first order valid?) | data-tilted | / floor | FAVOR+ iid | uniform |")
    print("|---|---|---|---|---|---|")
    for layer, head in heads:
        row = head_row(cap, layer, head, seed=1000 * layer + head)
        (t, tse), (f, fse), (fl, flse) = row["tilted"], row["favor"], row["floor"]
        print(f"| {row['head']} | {fl:.4g} ± {flse:.2g} ({'yes' if row['valid'] else 'no'}) "
              f"| {t:.4g} ± {tse:.2g} | {t / fl:.2f} ± {tse / fl:.2f} | {f:.4g} ± {fse:.2g} "
              f"| {row['uniform']:.4g} |")


if __name__ == "__main__":
    main()
