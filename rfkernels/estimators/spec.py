"""An estimator as a frozen, validated value (SciPy's frozen distributions are the model).

:func:`estimator` checks a choice of target kernel, kind (with its
parameters), ensemble, norm law and, where known, m and d once, and returns
an :class:`Estimator`. The layers below the public entry points take it and
check nothing again; what they need to know (is there an exact MSE, does
Lemma 2 or Theorem 2 apply, can the reduced engine sample it, can it be
tilted, does the GPU kernel take it) are the attributes of its
:attr:`Estimator.supports`, each a :class:`Capability` that carries its
reason when absent.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from ..validation import check_int
from . import registry


@dataclass(frozen=True)
class Capability:
    """Whether an estimator has something, and why not if it has not.

    True in a boolean context when available; ``reason`` is None then.
    :meth:`require` raises ``ValueError(reason)`` when it is absent.
    """

    reason: Optional[str] = None

    def __bool__(self):
        return self.reason is None

    def __str__(self):
        return "supported" if self.reason is None else f"not supported: {self.reason}"

    def require(self):
        """Return self if available; else raise ValueError with the reason."""
        if self.reason is not None:
            raise ValueError(self.reason)
        return self


AVAILABLE = Capability()

#: Largest m the GPU kernel takes (its per-thread scratch; rfkernels.engine.cuda.MAX_M).
GPU_MAX_M = 1024


@dataclass(frozen=True)
class Estimator:
    """A validated estimator: target kernel, kind and parameters, ensemble, norm law, m, d.

    Build it with :func:`estimator`; every field is already checked. ``m``
    and ``d`` are None where the caller is vectorised over them (theory).

    Attributes
    ----------
    kind : rfkernels.estimators.registry.Kind
    ensemble : rfkernels.estimators.registry.Ensemble
    norms : rfkernels.estimators.registry.NormLaw
    kernel : rfkernels.estimators.registry.TargetKernel
    params : object
        The kind's parameter object (:attr:`Kind.check_params`), None for
        kinds without parameters.
    m, d : int or None
    kernel_params : object
        The target kernel's parameter object (:attr:`TargetKernel.check_params`;
        ``gamma`` of the Gaussian kernel), None for softmax.
    """

    kind: registry.Kind
    ensemble: registry.Ensemble
    norms: registry.NormLaw
    kernel: registry.TargetKernel
    params: object = None
    m: Optional[int] = None
    d: Optional[int] = None
    kernel_params: object = None

    # -- capabilities -------------------------------------------------------

    @property
    def supports(self):
        """What it supports (:class:`Supports`: ``exact_mse``, ``lemma2``, ``theorem2``, ``reduced``,
        ``scalar_law``, ``tilted``, ``gpu_kernel``), each with its reason where absent."""
        return Supports(self)

    # -- derived values -----------------------------------------------------

    @property
    def feature_dimension(self):
        """Outputs of the feature map (None while m is unknown)."""
        return None if self.m is None else self.kind.features_per_projection * self.m

    #: The output dimension (scikit-learn's ``n_components``): :attr:`feature_dimension`.
    output_dimension = feature_dimension

    @property
    def scale(self):
        """``c``: the target kernel is a softmax estimator's at ``(c x, c y)`` (1 for softmax)."""
        return float(self.kernel.scale(self.kernel_params))

    def with_size(self, m=None, d=None):
        """The same estimator at ``m`` projections in dimension ``d`` (only the sizes are checked)."""
        m, d = check_sizes(self.ensemble, self.m if m is None else m, self.d if d is None else d)
        _check_params_d(self.params, d)
        return replace(self, m=m, d=d)

    def for_pair(self, value):
        """The same estimator with the kind's parameters fixed to one pair's ``value`` (:attr:`Kind.resolve`)."""
        return replace(self, params=self.kind.fixed_params(value)) if self.kind.param_names else self

    @property
    def needs_fit(self):
        """A data-fitted kind (:attr:`Kind.population`) not fitted yet."""
        return self.kind.population and not getattr(self.params, "fitted", False)

    def fitted_on(self, x, y):
        """The same estimator with the kind fitted on queries ``x`` (n, d) and keys ``y`` (n', d).

        Only for a data-fitted kind (:attr:`Kind.population`); the inputs are
        finite float64 arrays, checked by the caller. The fit refuses a single
        pair (its optimum is degenerate there).
        """
        params = self.kind.fitted_params(self.kind.fit(x, y))
        return replace(self, params=params).with_size(d=x.shape[1])

    def map_arguments(self):
        """``(kind, keywords)`` of the literal feature map this estimator draws.

        ``feature_map(X, W, kind, **keywords)`` is its map: a kind with two
        maps (the DERF family) gives its family's given kind with the fitted
        or given ``A``, ``B_query``, ``B_key``; a kind whose map takes one
        parameter gives it by name. Raises ValueError with the reason where
        there is no one map: a kind without a literal map, a data-fitted kind
        not fitted yet, or a map parameter left to each pair (OPRF's ``A*``).
        """
        fmap = self.kind.require_map()
        if fmap.two_roles:
            if self.needs_fit:
                raise ValueError(f"kind={self.kind.name!r} is fitted on data: call fit(Q, K) first")
            if fmap.given_kind is None:
                raise ValueError(fmap.no_keywords_reason)
            return fmap.given_kind, fmap.keywords(self.kind.resolve(self.params, None))
        if fmap.param is None:
            return self.kind.name, {}
        value = getattr(self.params, fmap.param.name, None)
        if value is None or np.ndim(value):
            raise ValueError(f"kind={self.kind.name!r} draws a map with one {fmap.param.name}: give "
                             f"{fmap.param.name}=<float>, or {fmap.param.name}='auto' and fit(Q, K) "
                             "(left out, each pair has its own optimum, which no one map has)")
        return self.kind.name, {fmap.param.name: float(value)}

    def describe(self):
        """A dict of the choices (names and sizes), as results and JSON record them."""
        out = {"kernel": self.kernel.name, "kind": self.kind.name,
               "ensemble": self.ensemble.name, "norms": self.norms.name,
               "m": self.m, "d": self.d, "output_dimension": self.feature_dimension}
        out.update(self.kernel_values())
        return out

    def kernel_values(self):
        """The target kernel's parameters by name (``{"gamma": ...}`` for the Gaussian kernel)."""
        return {name: getattr(self.kernel_params, name) for name in self.kernel.param_names}


def _deprecated_capability(name):
    def get(self):
        warnings.warn(f"Estimator.{name} is deprecated; use Estimator.supports.{name}",
                      DeprecationWarning, stacklevel=2)
        return getattr(self.supports, name)

    get.__doc__ = f"Deprecated alias of ``supports.{name}`` (CHANGELOG.md)."
    return property(get)


def _params_reason(spec, what):
    if spec.kind.params_reason is None:
        return None
    return spec.kind.params_reason(spec.params, spec.ensemble, what)


@dataclass(frozen=True)
class Supports:
    """What an :class:`Estimator` supports: each attribute a :class:`Capability` with its reason.

    ``est.supports.exact_mse`` is true where a closed form exists and
    otherwise carries why not; ``.require()`` raises that reason.
    """

    spec: "Estimator"

    @property
    def exact_mse(self):
        """A closed-form exact MSE (:func:`rfkernels.theory.exact_mse`)."""
        reason = self.spec.ensemble.theory_reason
        if reason is None and self.spec.kind.log_mse is None:
            reason = f"no closed form for kind={self.spec.kind.name!r} (Monte Carlo only)"
        if reason is None:
            reason = self.spec.kind.theory_reason(self.spec.ensemble, self.spec.norms)
        if reason is None:
            reason = _params_reason(self.spec, "theory")
        return Capability(reason)

    @property
    def lemma2(self):
        """Lemma 2 (the paper's iid MSE) applies: a paper kind with chi norms."""
        if self.spec.kind.lemma2 is None:
            return Capability(f"Lemma 2 is the Performer paper's statement for "
                              f"{', '.join(k.name for k in registry.entries('kind') if k.lemma2)}; "
                              f"not {self.spec.kind.name}")
        if not self.spec.norms.independent_chi:
            return Capability("Lemma 2 holds for independent chi norms only")
        return AVAILABLE

    @property
    def theorem2(self):
        """Theorem 2's bound applies: positive features, one orthogonal block (m <= d), chi norms, softmax.

        Anywhere else a bound shown beside a result would be a statement about
        another estimator; the reason names each condition not met.
        """
        unmet = []
        if self.spec.kind.name != "positive":
            unmet.append(f"kind is {self.spec.kind.name!r}")
        if self.spec.ensemble.name != "orthogonal":
            unmet.append(f"ensemble is {self.spec.ensemble.name!r}")
        if not self.spec.norms.independent_chi:
            unmet.append(f"norms are {self.spec.norms.name!r}")
        if self.spec.m is not None and self.spec.d is not None and self.spec.m > self.spec.d:
            unmet.append(f"m = {self.spec.m} > d = {self.spec.d}")
        if self.spec.kernel.name != "softmax":
            unmet.append(f"kernel is {self.spec.kernel.name!r}")
        if not unmet:
            return AVAILABLE
        return Capability("Theorem 2 bounds positive features, orthogonal ensemble, chi norms, "
                          f"m <= d of the softmax kernel only; here {', '.join(unmet)}")

    @property
    def reduced(self):
        """The reduced Monte Carlo engine samples it (``method='reduced'``)."""
        return Capability(self.spec.ensemble.reduced_reason) if self.spec.ensemble.reduced_reason else self.scalar_law

    @property
    def scalar_law(self):
        """Each term depends on its row through the scalar projection (and norm) only.

        False for a DERF with a non-isotropic A (its tilt reads the row's
        direction): no reduced sampler, no tilt, no tail reach.
        """
        return Capability(_params_reason(self.spec, "reduced"))

    @property
    def tilted(self):
        """The tilted importance-sampling proposal applies (reduced engine, unbounded terms)."""
        if self.spec.kind.tilt_reason is not None:
            return Capability(self.spec.kind.tilt_reason)
        if self.spec.norms.tilt_reason is not None:
            return Capability(self.spec.norms.tilt_reason)
        return self.reduced

    @property
    def gpu_kernel(self):
        """The numba-cuda kernel takes it (reduced engine, m <= GPU_MAX_M)."""
        if not self.reduced:
            return self.reduced
        if self.spec.m is not None and self.spec.m > GPU_MAX_M:
            return Capability(f"the GPU kernel takes m <= {GPU_MAX_M}; got m={self.spec.m}")
        return AVAILABLE

    #: The capabilities' names, in the order they are listed.
    NAMES = ("exact_mse", "lemma2", "theorem2", "reduced", "scalar_law", "tilted", "gpu_kernel")

    def __repr__(self):
        return "Supports(" + ", ".join(f"{n}={bool(getattr(self, n))}" for n in self.NAMES) + ")"

    def as_dict(self):
        """``{name: None or reason}`` for every capability (None: supported)."""
        return {name: getattr(self, name).reason for name in self.NAMES}


for _name in Supports.NAMES:  # the old attribute names, deprecated (CHANGELOG.md)
    setattr(Estimator, _name, _deprecated_capability(_name))


def refuse_parameter(name, value, kind, kernel="softmax"):
    """Raise the one error for a parameter ``name`` given to a ``kind`` (and ``kernel``) that does not take it."""
    owners = [f"kind={k.name!r}" for k in registry.entries("kind") if name in k.param_names]
    owners += [f"kernel={t.name!r}" for t in registry.entries("kernel") if name in t.param_names]
    if not owners:
        raise ValueError(f"{name} is not a parameter of any kind or kernel; got {name}="
                         f"{value!r} with kind={kind!r}")
    owner = " or ".join(owners)
    if getattr(value, "ndim", 0):  # an array: its shape, not its entries
        value = f"<array of shape {value.shape}>"
    given = f"kernel={kernel!r}" if any(o.startswith("kernel=") for o in owners) else f"kind={kind!r}"
    shown = value if isinstance(value, str) and value.startswith("<array") else repr(value)
    raise ValueError(f"{name} is the parameter of {owner} only; got {name}={shown} with {given}")


def estimator(kind, *, ensemble="iid", norms="chi", kernel="softmax", m=None, d=None,
              batch=False, params=None, **values):
    """The validated :class:`Estimator` of these choices: the one place they are checked.

    Parameters
    ----------
    kind, ensemble, norms, kernel : str
        Registered names (:func:`rfkernels.estimators.registry.names`); an
        unknown name raises ValueError listing the valid ones.
    m, d : int, optional
        Projections (>= 1) and dimension (>= the ensemble's minimum).
    batch : bool
        Allow array-valued kind parameters (the theory's broadcasting).
    params : object, optional
        An already validated parameter object of this kind (from another
        :class:`Estimator`); excludes keyword parameters.
    **values
        The kind's parameters by name (``A=`` for oprf) and the kernel's
        (``gamma=`` for gaussian). A parameter given as None is left out;
        one that belongs to another kind or kernel is refused.
    """
    k = registry.entry("kind", kind)
    e = registry.entry("ensemble", ensemble)
    n = registry.entry("norms", norms)
    t = registry.entry("kernel", kernel)
    refused = n.refusal(e.name)
    if refused is not None:
        raise ValueError(refused)
    given = {name: v for name, v in values.items() if v is not None}
    for name, v in given.items():
        if name not in k.param_names and name not in t.param_names:
            refuse_parameter(name, v, k.name, t.name)
    kernel_params = t.check_params({n_: v for n_, v in given.items() if n_ in t.param_names})
    if params is None:
        params = k.check_params({n_: v for n_, v in given.items() if n_ in k.param_names},
                                batch=batch)
        target = None if k.dispatch is None else k.dispatch(params)
        if target is not None:  # its d is checked first: the other kind's parameters have none
            _check_params_d(params, None if d is None else check_int(d, "d"))  # the parameters of another kind (DERF at OPRF's): that kind
            k = registry.entry("kind", target[0])
            params = k.check_params(target[1], batch=batch)
    m, d = check_sizes(e, m, d)
    _check_params_d(params, d)
    return Estimator(k, e, n, t, params, m, d, kernel_params)


#: The choices :func:`estimator` defaults to, which an entry point given an :class:`Estimator` must leave out.
LEFT_OUT = {name: inspect.signature(estimator).parameters[name].default
            for name in ("ensemble", "norms", "kernel")}


def as_estimator(kind, *, ensemble=LEFT_OUT["ensemble"], norms=LEFT_OUT["norms"],
                 kernel=LEFT_OUT["kernel"], m=None, d=None,
                 batch=False, **values):
    """``kind`` itself when it is an :class:`Estimator`, else :func:`estimator` of the choices.

    The one rule of the entry points that take either a kind's name with
    its choices or a validated Estimator: an Estimator carries its own
    ensemble, norms, kernel and parameters, so those must be left out
    (ValueError naming them otherwise); ``m`` is the caller's (it replaces
    the Estimator's), ``d`` must agree with the Estimator's where both are known.
    """
    if not isinstance(kind, Estimator):
        return estimator(kind, ensemble=ensemble, norms=norms, kernel=kernel, m=m, d=d,
                         batch=batch, **values)
    chosen = {"ensemble": ensemble, "norms": norms, "kernel": kernel}
    given = [name for name, default in LEFT_OUT.items() if chosen[name] != default]
    given += [name for name, v in values.items() if v is not None]
    if given:
        own = ", ".join([*LEFT_OUT, *values])
        raise ValueError(f"kind is an Estimator: its {own} are its own; leave out "
                         f"{', '.join(given)}")
    if d is not None and kind.d is not None and d != kind.d:
        raise ValueError(f"the inputs have d = {d} but the Estimator has d = {kind.d}")
    return kind if m is None and d is None else kind.with_size(m=m, d=d)


def _check_params_d(params, d):
    own = getattr(params, "d", None)
    if d is not None and own is not None and own != d:
        raise ValueError(f"the kind's parameters are (d, d) = ({own}, {own}) arrays but the "
                         f"inputs have d = {d}")


def check_sizes(ensemble, m, d):
    """``m >= 1`` and ``d >= ensemble.min_d`` (an :class:`Ensemble`) as ints; None stays None."""
    if m is not None:
        m = check_int(m, "m")
    if d is not None:
        d = check_int(d, "d")
        if d < ensemble.min_d:
            raise ValueError(f"ensemble={ensemble.name!r} needs d >= {ensemble.min_d}"
                             f"{ensemble.min_d_note}; got d={d}")
    return m, d
