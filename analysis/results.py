"""Results of the Monte Carlo engine: one pair, or a batch of pairs, JSON-ready."""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

import numpy as np

from .tail import TailDiagnostic

__all__ = ["MonteCarloBatch", "MonteCarloResult"]




@dataclass(frozen=True)
class MonteCarloResult:
    """Monte Carlo MSE of one estimator at one pair (x, y).

    Attributes
    ----------
    kind, ensemble, norms, method, backend : str
        What was run.
    d, m, trials : int
        Dimension, number of projections, number of trials.
    pair : int
        Index of the pair in its batch (0 for :func:`monte_carlo_mse`); the
        reduced method's counters depend on it.
    seed_entropy : int or tuple of int
        ``SeedSequence.entropy`` of the seed (a tuple where the seed was
        built from a sequence of ints).
    seed_spawn_key : tuple of int
        ``SeedSequence.spawn_key``; with ``seed_entropy`` (and ``pair``) it
        regenerates every number: ``SeedSequence(seed_entropy,
        spawn_key=seed_spawn_key)``.
    generator : str
        ``"philox4x32-10"`` (reduced) or ``"numpy-default_rng"`` (literal).
    sm : float
        The exact kernel value: :math:`e^{x \\cdot y}`, or the target kernel's
        (:math:`e^{-\\gamma |x - y|^2}` for ``kernel="gaussian"``).
    mse : float
        Sample mean of the squared errors :math:`(\\widehat{SM} - SM)^2`.
    stderr : float
        Its standard error (sample standard deviation / sqrt(trials)).
    ci95 : tuple of float
        ``mse -+ 1.96 stderr``, the lower end clipped at 0.
    mean_estimate : float
        Sample mean of the estimates.
    bias, bias_stderr : float
        ``mean_estimate - sm`` and its standard error.
    bias_z : float or None
        ``bias / bias_stderr`` (None if ``bias_stderr`` is 0).
    mse_exact : float or None
        :func:`rfkernels.theory.exact_mse` (None for
        ``"orthogonal-unfixed-qr"``, which has no closed form).
    z : float or None
        ``(mse - mse_exact) / stderr``; None without theory or when
        ``stderr`` is 0. Honest only where ``tail_ok``.
    tail : TailDiagnostic
        Tail of the squared errors.
    tail_ok : bool
        ``tail.ok``: whether ``stderr``, ``ci95`` and ``z`` can be trusted.
    proposal : str
        The law the trials came from: ``"plain"`` or ``"tilted"``
        (:class:`rfkernels.engine.Tilt`; ``mse``, ``bias`` and the tail are
        then of the weighted terms).
    proposal_note : str
        Why that proposal (as requested, or what ``proposal="auto"`` saw).
    proposal_shift, proposal_alpha0, proposal_wscale : float or None
        The tilt's shift (mu for chi norms, delta for fixed norms), the plain
        law's share of the mixture and the scale of W (oprf); None if plain.
    pilot_k_hat : float or None
        The k-hat of ``proposal="auto"``'s plain pilot run (None: no pilot).
    ess : float
        Effective sample size of the weights, ``(sum w)**2 / sum w**2``
        (``trials`` if plain).
    weight_mean : float
        Mean weight (1 in expectation; exactly 1 if plain).
    elapsed_s : float
        Wall-clock seconds spent.
    kernel : str
        The target kernel (``"softmax"`` or ``"gaussian"``).
    gamma : float or None
        The Gaussian kernel's parameter (None for softmax).
    output_dimension : int
        The feature map's outputs (scikit-learn's ``n_components``): m for
        positive, oprf and offset features, 2m for trig and hyperbolic.
    """

    kind: str
    ensemble: str
    norms: str
    method: str
    backend: str
    d: int
    m: int
    trials: int
    pair: int
    seed_entropy: int
    seed_spawn_key: tuple
    generator: str
    sm: float
    mse: float
    stderr: float
    ci95: tuple
    mean_estimate: float
    bias: float
    bias_stderr: float
    bias_z: float | None
    mse_exact: float | None
    z: float | None
    tail: TailDiagnostic
    tail_ok: bool
    proposal: str
    proposal_note: str
    proposal_shift: float | None
    proposal_alpha0: float | None
    proposal_wscale: float | None
    pilot_k_hat: float | None
    ess: float
    weight_mean: float
    elapsed_s: float
    kernel: str = "softmax"
    gamma: float | None = None
    output_dimension: int | None = None

    @property
    def k_hat(self):
        """``tail.k_hat``."""
        return self.tail.k_hat

    def to_dict(self):
        """A JSON-ready dict: tuples become lists, NaN becomes None, the tail is flattened."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "tail":
                for g in dataclasses.fields(value):
                    out[f"tail_{g.name}" if g.name in ("ok", "note") else g.name] = _jsonable(
                        getattr(value, g.name)
                    )
            else:
                out[f.name] = _jsonable(value)
        return out


@dataclass(frozen=True)
class MonteCarloBatch:
    """Results of :func:`monte_carlo_mse`, one :class:`MonteCarloResult` per pair."""

    results: tuple

    def __len__(self):
        return len(self.results)

    def __getitem__(self, i):
        return self.results[i]

    def __iter__(self):
        return iter(self.results)

    def column(self, name):
        """One field over the pairs as an array (object dtype if some values are None)."""
        values = [getattr(r, name) for r in self.results]
        if any(v is None for v in values):
            return np.array(values, dtype=object)
        return np.array(values)

    @property
    def mse(self):
        return self.column("mse")

    @property
    def stderr(self):
        return self.column("stderr")

    @property
    def mse_exact(self):
        return self.column("mse_exact")

    @property
    def z(self):
        return self.column("z")

    @property
    def tail_ok(self):
        return self.column("tail_ok")

    def to_dict(self):
        """``{"results": [one dict per pair]}``."""
        return {"results": [r.to_dict() for r in self.results]}


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(a) for a in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (numbers.Integral,)):
        return int(v)
    if isinstance(v, (numbers.Real,)):
        v = float(v)
        return v if math.isfinite(v) else None
    return v
