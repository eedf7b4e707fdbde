"""Why the attention floor's tilts are weighted: the Monte Carlo ratio with and without the weights.

MATH.md draws omega for the attention floor from tilts at q + k_j weighted by
K_qj |v_j - o_q| / D_q with 10% from N(0, I), so that sqrt(H) Omega / M is
bounded; an unweighted mixture of a few thousand pairs has no such bound.
On four MiniLM heads (default text, 512 tokens), 40 x 1024 draws each:

- weighted (rfkernels.floor): the ratio's largest value over its mean;
- unweighted: 4,000 query-key pairs chosen uniformly, each tilt equally
  likely, no defensive share: the floor it reads (three seeds), its
  standard error and the same max / mean.

Usage::

    python benchmarks/floor_mixture_weights.py
"""

from __future__ import annotations

import math

import numpy as np

from rfkernels import models
from rfkernels import floor as module
from rfkernels.estimators import registry
from rfkernels.models.texts import text_and_source

HEADS = ((0, 11), (5, 0), (0, 7), (4, 0))
BATCHES, BATCH, PAIRS = 40, 1024, 4000


def _summary(logs):
    top = float(logs.max())
    r = np.exp(logs - top)
    z, se = r.mean() * math.exp(top), r.std(ddof=1) / math.sqrt(r.size) * math.exp(top)
    return z, se, r.max() / r.mean()


def main():
    text, _ = text_and_source(None)
    cap = models.load().capture(text)
    rep = registry.entry("representation", "positive")
    root = math.sqrt(cap.scale)
    print("| head | weighted floor | max / mean | unweighted floor (3 seeds) | max / mean |")
    print("|---|---|---|---|---|")
    for layer, h in HEADS:
        q, k, v = root * cap.q[layer, h], root * cap.k[layer, h], cap.v[layer, h]
        head = module._Head(rep, q, k, v, module.DEFENSIVE)
        rng = np.random.default_rng(0)
        logs = np.concatenate([head.logs(module._draw(head.centres, rep, rng, BATCH, q.shape[1],
                                                      module.DEFENSIVE))[0] for _ in range(BATCHES)])
        z, se, top = _summary(logs)
        weighted = f"{z * z / head.out_sq:.3g} ± {2 * z * se / head.out_sq:.2g}"
        head.tilted = False  # logs() then gives log sqrt(H) alone
        cells, tops = [], []
        for seed in range(3):
            rng = np.random.default_rng(seed)
            kept = rng.choice(q.shape[0] * k.shape[0], size=PAIRS, replace=False)
            i, j = np.divmod(kept, k.shape[0])
            u = q[i] + k[j]
            half = 0.5 * np.sum(u * u, axis=1)
            parts = []
            for _ in range(BATCHES):
                om = u[rng.integers(0, PAIRS, BATCH)] + rng.standard_normal((BATCH, q.shape[1]))
                lt = om @ u.T - half[None, :]
                peak = lt.max(axis=1, keepdims=True)
                log_mix = peak[:, 0] + np.log(np.exp(lt - peak).sum(axis=1)) - math.log(PAIRS)
                parts.append(head.logs(om)[0] - log_mix)
            zu, seu, topu = _summary(np.concatenate(parts))
            cells.append(f"{zu * zu / head.out_sq:.3g} ± {2 * zu * seu / head.out_sq:.2g}")
            tops.append(f"{topu:.0f}")
        print(f"| ({layer}, {h}) | {weighted} | {top:.1f} | {', '.join(cells)} | {', '.join(tops)} |")


if __name__ == "__main__":
    main()
