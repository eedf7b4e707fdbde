r"""The front door: an estimator users build once and call.

``rfkernels.estimator(kind, ...)`` checks a choice once and returns a
:class:`FrozenEstimator` (SciPy's frozen distributions are the model): its
exact MSE (:meth:`~FrozenEstimator.mse`), its Monte Carlo MSE beside that
theory (:meth:`~FrozenEstimator.monte_carlo`), what it supports and why not
(:attr:`~FrozenEstimator.supports`), and one draw of its randomness
(:meth:`~FrozenEstimator.draw`): a :class:`FrozenFeatureMap` with features,
estimates and attention, exportable as plain arrays.

The methods are the package's functions given the validated estimator, so
they return the same numbers: ``est.mse(x, y)`` is
:func:`rfkernels.theory.exact_mse`, ``est.monte_carlo(x, y, ...)`` is
:func:`rfkernels.analysis.monte_carlo_mse`, and
``est.draw(seed).features(X)`` is ``feature_map(X, draw_projections(m, d,
ensemble=..., norms=..., seed=seed), kind)``.

Examples
--------
>>> import rfkernels
>>> from rfkernels.theory import pair
>>> est = rfkernels.estimator("positive", ensemble="orthogonal", m=16, d=16)
>>> x, y = pair(16, 0.5, 0.5, 1.0)
>>> bool(est.mse(x, y) < rfkernels.estimator("positive", m=16, d=16).mse(x, y))
True
>>> fmap = est.draw(seed=0)
>>> fmap.features(x[None]).shape
(1, 16)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from .analysis import monte_carlo as _mc
from .attention import favor_attention
from .docstrings import fill
from .estimators import Estimator, estimator as _spec_of, registry
from .features import feature_map
from .pairs import check_map_param, fit_map_param
from .projections import draw_kind_projections, draw_phases
from .theory import Geometry, exact_mse, fit_population
from .validation import check_matrix, check_seed, seed_sequence

__all__ = ["FrozenEstimator", "FrozenFeatureMap", "estimator"]


@fill()
def estimator(kind, *, ensemble="iid", norms="chi", kernel="softmax", gamma=None, m=None, d=None,
              **params):
    """The frozen estimator of these choices, checked once.

    Parameters
    ----------
    %(kind)s
    %(ensemble)s
    %(norms)s
    %(kernel)s
    %(gamma)s
    m, d : int, optional
        Projections and dimension; ``m`` is needed by :meth:`FrozenEstimator.mse`
        and ``monte_carlo`` (or given there), both by ``draw``.
    **params
        The kind's parameters by name: ``A`` (oprf: a float < 1/8 or
        ``'auto'``, fitted by :meth:`FrozenEstimator.fit`; derf), ``B_query``,
        ``B_key`` (derf).

    Returns
    -------
    FrozenEstimator

    Raises
    ------
    ValueError
        An unknown name (the message lists the valid ones), a parameter of
        another kind or kernel, or a bad size.
    """
    auto = _auto_param(kind, params)
    spec = _spec_of(kind, ensemble=ensemble, norms=norms, kernel=kernel, gamma=gamma, m=m, d=d,
                    **params)
    return FrozenEstimator(spec, auto)


def _auto_param(kind, params):
    """The name of the kind's map parameter given as a string (``'auto'``, fitted by ``fit``), popped.

    Only the parameter the kind's feature map fits on data takes a string
    (its check refuses any other); None where there is none.
    """
    param = getattr(registry.entry("kind", kind).feature_map, "param", None)
    if param is None or not isinstance(params.get(param.name), str):
        return None
    check_map_param(kind, params[param.name])  # 'auto', or the map's own refusal
    params.pop(param.name)
    return param.name


@dataclass(frozen=True)
class FrozenEstimator:
    """A validated random-feature estimator: build it with :func:`rfkernels.estimator`.

    Attributes
    ----------
    spec : rfkernels.estimators.Estimator
        The validated choices (kind, ensemble, norms, target kernel,
        parameters, m, d) the layers below take.
    auto : str or None
        The name of a map parameter given as ``'auto'``, fitted by :meth:`fit`.
    """

    spec: Estimator
    auto: Optional[str] = None

    # -- what it is ---------------------------------------------------------

    kind = property(lambda self: self.spec.kind.name)
    ensemble = property(lambda self: self.spec.ensemble.name)
    norms = property(lambda self: self.spec.norms.name)
    kernel = property(lambda self: self.spec.kernel.name)
    m = property(lambda self: self.spec.m)
    d = property(lambda self: self.spec.d)

    @property
    def supports(self):
        """What it supports, each a capability with its reason where absent (``exact_mse``,
        ``lemma2``, ``theorem2``, ``reduced``, ``scalar_law``, ``tilted``, ``gpu_kernel``)."""
        return self.spec.supports

    @property
    def needs_fit(self):
        """True until :meth:`fit` where the kind (or an ``'auto'`` parameter) is fitted on data."""
        return bool(self.auto) or bool(self.spec.needs_fit)

    def describe(self):
        """The choices as a dict (names and sizes), as results record them."""
        return self.spec.describe()

    def __repr__(self):
        shown = {k: v for k, v in self.describe().items() if v is not None}
        return f"FrozenEstimator({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    def at(self, *, m=None, d=None):
        """The same estimator at ``m`` projections in dimension ``d``."""
        return replace(self, spec=self.spec.with_size(m=m, d=d))

    # -- fitting ------------------------------------------------------------

    def fit(self, Q, K):
        """The estimator fitted on queries ``Q`` (n, d) and keys ``K`` (n', d); a new value.

        For the data-fitted kinds (``'saderf'``, ``'aderf'``, ``'sderf'``) and
        a map parameter given as ``'auto'`` (OPRF's ``A``); any other
        estimator refuses (there is nothing to fit).
        """
        if not self.needs_fit:
            what = "is fitted already" if self.spec.kind.population else "has nothing to fit on data"
            raise ValueError(f"kind={self.kind!r} {what} (fit is for the data-fitted kinds and "
                             "A='auto', once)")
        q, k = check_matrix(Q, "Q"), check_matrix(K, "K")
        if self.d is not None and q.shape[1] != self.d:
            raise ValueError(f"Q has d = {q.shape[1]} but the estimator was built with d = {self.d}")
        spec = self.spec.with_size(d=q.shape[1])
        if self.auto:
            c = spec.scale
            value = fit_map_param(self.kind, "auto", c * q, c * k)
            spec = _spec_of(self.kind, ensemble=self.ensemble, norms=self.norms,
                            kernel=self.kernel, m=spec.m, d=spec.d,
                            **spec.kernel_values(), **{self.auto: value})
        else:
            spec = fit_population(spec, None, None, (q, k))
        return FrozenEstimator(spec)

    def _fitted(self, what):
        if self.auto:
            per_pair = "" if what == "draw" else f" (or leave {self.auto} out for each pair's optimum)"
            raise ValueError(f"{self.auto}='auto' is fitted on data: call est.fit(Q, K) before "
                             f"{what}{per_pair}")

    # -- theory and Monte Carlo -----------------------------------------------

    def _size(self, m):
        m = self.m if m is None else m
        if m is None:
            raise ValueError("m is unknown: build the estimator with m= or pass m=")
        return m

    def _check_inputs(self, x, population):
        """The inputs' d against the estimator's; a data-fitted kind fitted or given its population."""
        given = np.unique(np.asarray(x.d)) if isinstance(x, Geometry) else (
            np.shape(x)[-1:] if np.ndim(x) else ())
        wrong = [int(v) for v in given if v != self.d]
        if self.d is not None and wrong:
            raise ValueError(f"x has d = {wrong[0]} but the estimator was built with d = {self.d}")
        if self.spec.needs_fit and population is None:
            raise ValueError(f"kind={self.kind!r} is fitted on data: call est.fit(Q, K) first, or "
                             "pass population=(queries, keys)")

    def mse(self, x, y=None, *, m=None, log=False, population=None, vectors=None):
        """The exact MSE at the pair(s) ``(x, y)`` (arrays ``(..., d)``) or at a ``Geometry`` ``x``.

        :func:`rfkernels.theory.exact_mse` of this estimator: ``m`` defaults
        to the estimator's (an array of m broadcasts), ``log=True`` gives
        the natural log (finite beyond float64), ``population`` fits a
        data-fitted kind not fitted yet, ``vectors`` the pairs of a Geometry
        ``x`` (the kinds whose MSE depends on the vectors need them). Refuses
        with the reason (``supports.exact_mse``) where there is no closed form.
        """
        self._fitted("mse")
        self._check_inputs(x, population)
        m = self._size(m)
        return exact_mse(x, y, m, self._spec_for(m), log=log, population=population,
                         vectors=vectors)

    def _spec_for(self, m):
        """The spec the theory and Monte Carlo take (m given per call: the spec's is left out)."""
        return replace(self.spec, m=None) if np.ndim(m) else self.spec.with_size(m=m)

    @fill()
    def monte_carlo(self, x, y=None, *, trials, m=None, seed=0, backend="numpy", method="reduced",
                    chunk=None, progress=None, proposal="auto", population=None, vectors=None,
                    mse_exact=_mc.mse.COMPUTE):
        """Monte Carlo MSE beside the exact one: :func:`rfkernels.analysis.monte_carlo_mse` of this estimator.

        ``x, y`` one pair (d,), a batch (n, d) or ``x`` one pair's Geometry
        (with ``vectors=`` for the literal method); the same numbers as
        ``monte_carlo_mse`` with the same arguments.

        Parameters
        ----------
        x, y : array_like of shape (d,) or (n, d), or a Geometry and None
            One pair, a batch of pairs, or one pair's geometry.
        %(trials)s
        m : int, optional
            Projections; default the estimator's.
        %(seed)s
        %(backend)s
        %(method)s
        %(chunk)s
        %(progress)s
        %(proposal)s
        population : tuple of array_like, optional
            ``(queries, keys)`` on which a data-fitted kind not fitted yet is fitted.
        vectors : tuple of array_like, optional
            With a Geometry ``x``: the pair it describes (the literal method needs it).
        mse_exact : float or None, optional
            With a Geometry ``x``: the exact MSE already known (None: no closed
            form), so that it is not computed again.

        Returns
        -------
        MonteCarloResult or MonteCarloBatch
            ``mse`` and its ``stderr`` and ``ci95``, ``mse_exact`` (None where
            there is no closed form), ``z`` (their difference in standard
            errors), ``bias``, and the tail diagnostic: read ``stderr`` and
            ``z`` only where ``tail_ok``. A batch holds one result per pair.
        """
        self._fitted("monte_carlo")
        self._check_inputs(x, population)
        m = self._size(m)
        return _mc.monte_carlo_mse(x, y, m, self.spec.with_size(m=m), trials=trials, seed=seed,
                                   backend=backend, method=method, chunk=chunk, progress=progress,
                                   proposal=proposal, population=population, vectors=vectors,
                                   mse_exact=mse_exact)

    def trial_estimates(self, x, y, *, trials, m=None, seed=0, backend="numpy", method="reduced",
                        start=0, population=None):
        """The per-trial estimates :meth:`monte_carlo` averages over (plain proposal), one pair."""
        self._fitted("trial_estimates")
        self._check_inputs(x, population)
        m = self._size(m)
        return _mc.trial_estimates(x, y, m, self.spec.with_size(m=m), trials=trials, seed=seed,
                                   backend=backend, method=method, start=start,
                                   population=population)

    # -- one draw ---------------------------------------------------------------

    def draw(self, seed=None):
        """One draw of the estimator's randomness: a :class:`FrozenFeatureMap`.

        The projections are ``draw_kind_projections(m, d, kind, ensemble=...,
        norms=..., seed=seed)`` (``draw_projections``, then the hybrid's
        angular rows); a kind with phases (``'offset'``) draws them next from
        the same generator. ``seed`` is any seed ``draw_projections`` takes:
        a Generator is drawn from as given (advancing it, and recorded as
        such), anything else through a SeedSequence recorded in the map.
        Needs m and d, and a fitted estimator where the kind is fitted on data.
        """
        self._fitted("draw")
        if self.m is None or self.d is None:
            raise ValueError("draw needs m and d: build the estimator with m= and d= (or est.at(m=, d=))")
        kind, keywords = self.spec.map_arguments()
        if isinstance(seed, np.random.Generator):  # drawn from as given, as draw_projections does
            rng, record = seed, {"entropy": None, "spawn_key": []}
        else:
            seq = seed_sequence(seed)
            rng = check_seed(seq)
            record = {"entropy": str(seq.entropy), "spawn_key": list(seq.spawn_key)}
        W = draw_kind_projections(self.m, self.d, self.spec.kind.name, ensemble=self.ensemble,
                                  norms=self.norms, seed=rng)
        phases = draw_phases(self.m, seed=rng) if self.spec.kind.random_phase else None
        return FrozenFeatureMap(self.spec, kind, W, phases, keywords, record)


@dataclass(frozen=True, eq=False)
class FrozenFeatureMap:
    """A drawn random-feature map: projections, phases and parameters, fixed.

    Made by :meth:`FrozenEstimator.draw`. ``features``, ``estimate`` and
    ``attention`` are :func:`rfkernels.feature_map` and
    :func:`rfkernels.favor_attention` with these arrays; :meth:`to_dict`
    and :meth:`save` export them for use in another framework.
    """

    spec: Estimator
    map_kind: str
    W: np.ndarray
    phases: Optional[np.ndarray]
    keywords: dict
    seed: dict

    def __repr__(self):
        return (f"FrozenFeatureMap(kind={self.map_kind!r}, ensemble={self.spec.ensemble.name!r}, "
                f"norms={self.spec.norms.name!r}, m={self.spec.kind.base_rows(self.W.shape[0])}, "
                f"d={self.W.shape[1]}, "
                f"seed={self.seed['entropy']})")

    def _target(self):
        return {"kernel": self.spec.kernel.name, **self.spec.kernel_values()}

    def features(self, X, role="query"):
        """The features of the rows of X (n, d): ``(n, r)``; ``role`` 'query' or 'key' for two-map kinds."""
        return feature_map(X, self.W, self.map_kind, phase=self.phases, role=role,
                           **self._target(), **self.keywords)

    def estimate(self, X, Y):
        """The estimate of the kernel at every pair of rows: ``features(X) @ features(Y, 'key').T``."""
        return self.features(X, "query") @ self.features(Y, "key").T

    def attention(self, Q, K, V, *, causal=False):
        """Random-feature attention with this draw: :func:`rfkernels.favor_attention`'s ``AttentionResult``.

        ``.output`` has shape (L, d_v). The kernel is :math:`\\exp(q^\\top k)`
        with no temperature: pass ``Q * d**-0.25`` and ``K * d**-0.25`` for a
        Transformer's :math:`\\exp(q^\\top k/\\sqrt d)`.
        """
        if self.spec.kernel_params is not None:
            raise ValueError(f"attention is of the softmax kernel; this map estimates the "
                             f"{self.spec.kernel.name} kernel")
        if self.phases is not None:
            raise ValueError(f"attention does not take kind={self.spec.kind.name!r}: "
                             f"{self.spec.kind.feature_map.attention_reason}")
        return favor_attention(Q, K, V, self.W, self.map_kind, causal=causal, **self.keywords)

    def to_dict(self):
        """The draw as plain values: the choices, the seed and the arrays (NumPy)."""
        out = {**self.spec.describe(), "map_kind": self.map_kind, "seed": self.seed,
               "W": np.asarray(self.W)}
        if self.phases is not None:
            out["phases"] = np.asarray(self.phases)
        out.update({k: (np.asarray(v) if np.ndim(v) else float(v)) for k, v in self.keywords.items()})
        return out

    def save(self, path):
        """Write the draw to an ``.npz`` file: its arrays, and its choices as JSON in ``meta``."""
        d = self.to_dict()
        arrays = {k: v for k, v in d.items() if isinstance(v, np.ndarray)}
        meta = {k: v for k, v in d.items() if k not in arrays}
        np.savez(path, meta=np.array(json.dumps(meta, allow_nan=False)), **arrays)

    @classmethod
    def load(cls, path):
        """The draw written by :meth:`save`; its estimator is rebuilt from the map's kind and parameters."""
        path = str(path)
        if not path.endswith(".npz"):  # np.savez appends it
            path += ".npz"
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"]))
            arrays = {k: f[k] for k in f.files if k != "meta"}
        W, phases = arrays.pop("W"), arrays.pop("phases", None)
        keywords = {k: meta[k] for k in ("A",) if k in meta}
        keywords.update(arrays)  # A, B_query, B_key as arrays
        targets = {n: meta[n] for n in ("gamma",) if n in meta}
        spec = _spec_of(meta["map_kind"], ensemble=meta["ensemble"], norms=meta["norms"],
                        kernel=meta["kernel"], m=meta["m"], d=meta["d"], **targets, **keywords)
        return cls(spec, meta["map_kind"], W, phases, keywords, meta["seed"])
