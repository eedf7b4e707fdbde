r"""Streaming moments of Monte Carlo errors, merged in fixed blocks of trials.

Each pair's normalised errors ``e - target`` arrive chunk by chunk; they are
cut into blocks of :data:`MOMENT_BLOCK` consecutive trials, each block
reduced to its count, mean and sum of squared deviations (of the errors and
of the squared errors), and the blocks merged in trial order with Chan et
al.'s pairwise update [1]_. Because the blocks and their order do not
depend on how the trials were chunked, the results do not either. The
largest squared errors are kept in a buffer of fixed size for the tail fit
(:mod:`rfkernels.analysis.tail`); memory does not grow with the trials.

References
----------
.. [1] T. F. Chan, G. H. Golub and R. J. LeVeque, "Updating formulae and a
   pairwise algorithm for computing sample variances", Stanford CS report
   STAN-CS-79-773, 1979.
"""

from __future__ import annotations

import numpy as np

from rfkernels.backends import to_numpy

from .tail import tail_size


class Moments:
    """Count, mean and sum of squared deviations, merged chunk by chunk (Chan et al.)."""

    __slots__ = ("m2", "mean", "n")

    def __init__(self):
        self.n, self.mean, self.m2 = 0, 0.0, 0.0

    def merge(self, n, mean, m2):
        if n == 0:
            return
        total = self.n + n
        delta = mean - self.mean
        self.mean += delta * (n / total)
        self.m2 += m2 + delta * delta * (self.n * n / total)
        self.n = total

    @property
    def variance(self):
        return self.m2 / (self.n - 1)


#: Trials per block of the streaming moments. Moments are merged block by block
#: in trial order, so the reported numbers do not depend on the chunk size or
#: the backend (both only decide how the same blocks arrive).
MOMENT_BLOCK = 4096


class Accumulator:
    """Running statistics of one pair's normalised errors ``e - target``.

    With ``weighted``, each chunk comes with its trials' likelihood-ratio
    weights w (an importance-sampling proposal, :class:`rfkernels.engine.Tilt`)
    and the statistics are those of the weighted terms: ``err`` of
    ``w (e - target)``, ``sq`` of ``w (e - target)**2`` (their means are
    unbiased for the bias and the MSE), the tail of ``w (e - target)**2``,
    and ``weight`` of w itself (its mean is 1 in expectation; with its
    second moment it gives the effective sample size).
    """

    def __init__(self, trials, target, weighted=False):
        self.target = target
        self.weighted = bool(weighted)
        self.err = Moments()
        self.sq = Moments()
        self.weight = Moments() if weighted else None
        self.keep = tail_size(trials) + 1
        self.top = np.empty(0)
        self.maximum = 0.0
        self.pending = None  # the last < MOMENT_BLOCK errors (and weights), not merged yet
        self.pending_w = None
        self.pending_xp = np

    def add(self, estimates, xp, weights=None):
        """Take one chunk of normalised estimates (an array of ``xp``) and, if weighted, their weights."""
        if (weights is not None) != self.weighted:
            raise ValueError("weights must be given exactly when the accumulator is weighted")
        if not bool(xp.all(xp.isfinite(estimates))):
            raise FloatingPointError(
                "a Monte Carlo estimate overflowed (inf or NaN) even after normalisation; "
                "|x + y| (or |x - y| for trig) is too large for this estimator"
            )
        err = estimates - self.target
        if weights is None:
            self._track_tail(err * err, xp)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                weighted = weights * (err * err)
            if not bool(xp.all(xp.isfinite(weighted))):
                raise FloatingPointError(
                    "a weighted squared error of the tilted proposal is beyond float64 (a moved "
                    "term's squared error is about e^(3|x+y|^2) relative to SM^2); "
                    "use proposal='plain'"
                )
            self._track_tail(weighted, xp)
        if self.pending is not None and self.pending.shape[0]:
            err = xp.concatenate([self.pending, err])
            if weights is not None:
                weights = xp.concatenate([self.pending_w, weights])
        n = int(err.shape[0])
        full = n - n % MOMENT_BLOCK
        if full:
            self._merge_blocks(err[:full].reshape(-1, MOMENT_BLOCK), xp,
                               None if weights is None else weights[:full].reshape(-1, MOMENT_BLOCK))
        self.pending, self.pending_xp = err[full:].copy(), xp  # a copy: callers reuse buffers
        self.pending_w = None if weights is None else weights[full:].copy()

    def finish(self):
        """Merge the last, partial block; call once after the last :meth:`add`."""
        if self.pending is not None and self.pending.shape[0]:
            self._merge_blocks(self.pending.reshape(1, -1), self.pending_xp,
                               None if self.pending_w is None else self.pending_w.reshape(1, -1))
        self.pending = self.pending_w = None

    def _merge_blocks(self, err, xp, weights=None):
        """Merge the rows of ``err`` (blocks of consecutive trials) in order."""
        sq = err * err
        pairs = [(self.err, err), (self.sq, sq)]
        if weights is not None:
            pairs = [(self.err, weights * err), (self.sq, weights * sq), (self.weight, weights)]
        for mom, v in pairs:
            means = xp.mean(v, axis=1)
            dev = v - means[:, None]
            m2 = to_numpy(xp.sum(dev * dev, axis=1))
            means = to_numpy(means)
            n = int(v.shape[1])
            for mean, dev2 in zip(means.tolist(), m2.tolist()):
                mom.merge(n, mean, dev2)

    def _track_tail(self, sq, xp):
        """The largest squared error and the ``keep`` largest ones seen so far."""
        self.maximum = max(self.maximum, float(xp.max(sq)))
        if self.top.size >= self.keep:
            sq = sq[sq > float(self.top.min())]
        if sq.shape[0] > self.keep:
            sq = xp.partition(sq, sq.shape[0] - self.keep)[-self.keep:]
        if sq.shape[0]:
            merged = np.concatenate([self.top, to_numpy(sq)])
            if merged.size > self.keep:
                merged = np.partition(merged, merged.size - self.keep)[-self.keep:]
            self.top = merged
