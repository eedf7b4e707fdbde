r"""The estimator registry: its axes, each entry one module.

- **kinds** (the feature map users call, :mod:`rfkernels.estimators.maps`;
  its normalisation, its terms on every backend, its exact theory, its
  parameter object and whether it can be tilted),
- **ensembles** (the projection law: blocks, the cosine between two rows of
  a block, which samplers exist) and **norm laws** (how the row norms are
  drawn: chi or fixed),
- **target kernels** (softmax, and the Gaussian kernel as its rescaling),
- **representations** (:math:`K(x, y) = E_{\omega}[\varphi(x, \omega)\cdot\varphi(y, \omega)]`
  as a kind's features write it, whose sampling policy :mod:`rfkernels.floor`
  optimises; :mod:`rfkernels.estimators.representations`),
- **presets** (attention's numerics: the exact stabilised estimator and the
  public implementations' arithmetic; :mod:`rfkernels.presets`).

An entry registers itself when its module is imported
(:func:`register`); :mod:`rfkernels.estimators` imports the built-in ones.
Every layer asks the registry for the names it accepts (:func:`names`) and
for an entry (:func:`entry`), so a new entry needs no edit elsewhere.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from ..validation import check_choice

#: The registry's axes (``"preset"``: attention's numerics,
#: :class:`rfkernels.presets.Preset`, registered by :mod:`rfkernels.presets`).
AXES = ("kind", "ensemble", "norms", "kernel", "preset", "representation")

_ENTRIES = {axis: {} for axis in AXES}

#: Seed indices of entries registered without one start here (a CRC-32 of the
#: name above it), so they never meet a built-in entry's frozen index.
PLUGIN_SEED_BASE = 1 << 16


def register(axis, entry):
    """Add ``entry`` (with a ``name``) to ``axis``; returns it (usable as a decorator's tail).

    Names are unique per axis; registering a name again replaces nothing and raises.
    """
    if axis not in _ENTRIES:
        raise ValueError(f"axis must be one of {', '.join(map(repr, AXES))}; got {axis!r}")
    name = entry.name
    if name in _ENTRIES[axis]:
        raise ValueError(f"a {axis} named {name!r} is registered already")
    if getattr(entry, "seed_index", 0) is None:  # a plugin's: stable, and apart from the built-ins'
        entry = replace(entry, seed_index=PLUGIN_SEED_BASE + zlib.crc32(name.encode()) % PLUGIN_SEED_BASE)
    index = getattr(entry, "seed_index", None)
    taken = [e.name for e in _ENTRIES[axis].values() if index is not None
             and getattr(e, "seed_index", None) == index]
    if taken:
        raise ValueError(f"a {axis} with seed_index={index} is registered already ({taken[0]!r}); "
                         "seed indices name a study's random streams and must differ")
    _ENTRIES[axis][name] = entry
    return entry


def unregister(axis, name):
    """Remove an entry (tests that register a toy kind clean up with this)."""
    _ENTRIES[axis].pop(name, None)


def names(axis):
    """The registered names of ``axis``, in registration order."""
    return tuple(_ENTRIES[axis])


def entry(axis, name):
    """The entry ``name`` of ``axis``; ValueError listing the valid names otherwise."""
    table = _ENTRIES[axis]
    if not isinstance(name, str) or name not in table:
        label = "norms" if axis == "norms" else axis
        valid = ", ".join(repr(c) for c in table)
        raise ValueError(f"{label} must be one of {valid}; got {name!r}")
    return table[name]


def check_kind(kind):
    """A registered kind's name, else ValueError listing them."""
    return entry("kind", kind).name


def check_ensemble(ensemble, choices=None):
    """A registered ensemble's name (or one of ``choices``), else ValueError listing them."""
    if choices is not None:
        return check_choice(ensemble, "ensemble", choices)
    return entry("ensemble", ensemble).name


def check_norms(norms, choices=None):
    """A registered norm law's name (or one of ``choices``), else ValueError listing them."""
    if choices is not None:
        return check_choice(norms, "norms", choices)
    return entry("norms", norms).name


def entries(axis):
    """The registered entries of ``axis``, in registration order."""
    return tuple(_ENTRIES[axis].values())


# ---------------------------------------------------------------------------
# The entries
# ---------------------------------------------------------------------------


def _no_params(values, *, batch):
    return None


@dataclass(frozen=True)
class Kind:
    """A feature map and everything every layer needs to know about it.

    Attributes
    ----------
    name, summary : str
    features_per_projection : int
        Outputs per projection (1: positive, oprf; 2: trig, hyperbolic).
    on_sum : bool
        The terms depend on ``w . (x + y)`` (True) or on ``w . (x - y)`` (trig).
    paper : bool
        One of the Performer paper's three kinds (Lemma 2 speaks of them).
    nonnegative : bool
        Features are >= 0 (sum normalisation is defined).
    terms : callable
        ``terms(p, w2, length, consts, xp)``: the normalised terms of a
        trial, (m, n) from the scalar projections ``p`` (and the squared row
        lengths ``w2`` where ``needs_squared_norms``), vectorised.
    scalar_terms : callable
        The same, in place, as a :func:`rfkernels.numerics.scalar.scalar` source:
        ``scalar_terms(length, slope, curvature, offset, m, d, chi, p, q)``
        (the Numba and CUDA kernels inline it).
    fixed_params : callable
        ``fixed_params(value) -> params``: the parameter object holding one
        pair's resolved value (so that theory and the engine agree on it).
    resolve : callable
        ``resolve(params, geom) -> value``: the kind's parameters of one pair
        (OPRF: the float A, ``A*`` of the pair where A is 'auto'); None for
        kinds without parameters.
    constants : callable
        ``constants(value, length, d) -> (slope, curvature, offset)``, the
        floats ``scalar_terms`` and ``terms`` take, computed once per pair
        from ``resolve``'s value.
    log_mse : callable or None
        ``log_mse(geom, m, est, vectors)``: the natural log of the exact MSE of
        the estimator ``est`` (a validated :class:`rfkernels.estimators.Estimator`)
        at a :class:`rfkernels.theory.Geometry` and an int array ``m``;
        ``vectors`` is ``(x, y)`` (batch shape + (d,)) where the caller has
        them, else None.
    theory_needs_vectors : bool
        ``log_mse`` needs ``vectors`` (an MSE that depends on x and y
        themselves, not only on the geometry's invariants).
    theory_reason : callable
        ``theory_reason(ensemble, norms) -> str or None``: why ``log_mse``
        has no value for those entries (None: it has one).
    lemma2 : callable or None
        ``lemma2(geom, m)``: the log of Lemma 2's MSE (paper kinds only).
    tilt_reason : str or None
        Why the tilted proposal does not apply (None: it does).
    tilt_slope : callable
        ``tilt_slope(value) -> (B, A)`` of ``resolve``'s value: the term is ``exp(B a p + 2A|w|^2 + ...)``.
    symmetric_tilt : bool
        The terms are large on both sides (hyperbolic): the tilt moves either way.
    needs_squared_norms : bool
        The terms read the rows' squared lengths (oprf).
    param_names : tuple of str
        Keyword parameters of the kind (``("A",)`` for oprf).
    check_params : callable
        ``check_params(values, batch=...) -> params``: the kind's validated,
        frozen parameter object from ``{name: value}`` (``batch=True``: the
        theory's arrays are allowed).
    fit : callable or None
        ``fit(x, y) -> {name: value}``: the kind's parameters fitted on a
        population of queries ``x`` (n, d) and keys ``y`` (n', d) (finite
        float64, checked by the caller), for attention, where one value is
        shared by every pair (OPRF: ``A*`` of the mean ``|x + y|^2/d``).
        None: the kind has no data-fitted parameters. Every layer that fits
        a kind on data (``A="auto"``, ``rfkernels diagnose``) calls this.
    fitted_params : callable or None
        ``fitted_params(values) -> params``: the parameter object of the
        values ``fit`` returned, for a :attr:`population` kind
        (:meth:`rfkernels.estimators.Estimator.fitted_on`); the object's
        ``fitted`` is True.
    held_out_fit : bool
        A diagnosis fits the kind on half of a head's query rows and measures
        it on the other half (cross-fitting): its fit adapts to the very rows
        it would be measured on (the data-tilted policy is made of the
        head's pairs). False: fitted on the whole head.
    random_phase : bool
        Each projection's term also carries an independent random phase:
        the normalised term is ``terms(...) + cos(2 pi U_i)``, U_i uniform
        (the offset map ``sqrt(2) cos(w.x + b)``: given w, ``w.(x + y) + 2b``
        is a uniform phase). The engine draws U_i from its own counter
        stream and adds the cosine after the kind's terms (a runtime flag of
        the kernels, which are otherwise those of the kind's ``scalar_terms``).
    population : bool
        The parameters are fitted on a population of queries and keys, never
        given (the DERF kinds ``saderf``, ``aderf``, ``sderf``): entry points
        fit them with ``fit`` on the data they are given
        (:meth:`rfkernels.estimators.Estimator.fitted_on`).
    pair_transform : callable or None
        ``pair_transform(value, x, y) -> (x', y')``: the pair at which the
        kind's terms are those of the engine's normalisation (DERF with an
        isotropic A: OPRF at (B_1 x, B_2 y) / sqrt(1 - 4a)); the engine
        samples the pair ``(x', y')``. None: the pair itself.
    representation : str or None
        The :class:`Representation` the kind samples (independent draws from
        one Gaussian policy); None where it has none registered (the
        floor of :mod:`rfkernels.floor` then refuses it).
    representation_pairs : callable or None
        ``representation_pairs(value, x, y) -> (x~, y~)``: the pairs of
        that representation (the DERF family's transformed pairs); None: the
        pairs themselves.
    params_reason : callable or None
        ``params_reason(params, ensemble, what) -> str or None``: why these
        parameters have no exact theory (``what='theory'``) or no reduced
        sampler (``'reduced'``), beyond the ensemble's and norm law's reasons.
    diagnose_reason : str or None
        Why ``rfkernels diagnose`` does not take the kind (SDERF: a dense A,
        whose fitted matrices it does not report); None: it does.
    dispatch : callable or None
        ``dispatch(params) -> (kind, {name: value}) or None``: parameters at
        which the kind *is* another registered kind (DERF at FAVOR+'s or
        OPRF's); :func:`rfkernels.estimators.estimator` returns that kind, so
        the same bits follow.
    seed_index : int or None
        The kind's place in studies' spawn keys (capacity, the FAVOR study,
        attention), frozen so that a number never moves when kinds are added;
        None: one is derived from the name when the kind is registered.
    feature_map : object or None
        The literal feature map users call (:mod:`rfkernels.estimators.maps`:
        an ``ExponentialMap`` or a ``SignedMap``): :func:`rfkernels.feature_map`,
        :func:`rfkernels.estimate`, :func:`rfkernels.log_estimate`, sum
        normalisation, attention and its presets all compute with it. None:
        the kind has no map of its own (``feature_map_reason`` says why).
    feature_map_reason : str
        Why there is no ``feature_map`` (the error the literal entries raise
        for the kind; a default sentence where empty).
    first_order : tuple or None
        The first-order attention theory's ``E[g_j g_j']`` of one
        projection (:mod:`rfkernels.analysis.attention_theory`, MATH.md) as
        terms ``(on_logits, sign, qq_sign, log_weight)``: each is
        ``exp(qq_sign |q|^2 + log_weight)`` times the quadratic form of the
        key matrix ``exp(sign k_j . k_j')`` in the weights
        ``exp(2 q . k_j + h_j)`` (``on_logits``) or ``exp(h_j)``,
        ``h_j = |k_j|^2/2``. None: no closed form (the theory refuses the kind).
    example : callable or None
        ``example(d) -> {name: value}``: one valid set of the kind's given
        parameters in dimension d (documentation, and the conformance suite
        every registered kind passes); None: it takes none, or is fitted on
        data (``population``).
    code : int or None
        The integer the engine's kernels also accept for the kind (the
        built-in four: positive 0, hyperbolic 1, trig 2, oprf 3); None: by
        name or entry only.
    extra_rows : int
        Rows the map reads after the ensemble's m projections: iid N(0, I),
        independent of them, drawn after them from the same generator
        (:func:`rfkernels.projections.draw_kind_projections`); W then has
        ``m + extra_rows`` rows (the hybrid's angular projections: 8).
    """

    name: str
    summary: str
    features_per_projection: int
    on_sum: bool
    paper: bool
    nonnegative: bool
    terms: Callable
    scalar_terms: Callable
    log_mse: Optional[Callable]
    theory_reason: Callable
    resolve: Callable = field(default=lambda params, geom: None)
    fixed_params: Callable = field(default=lambda value: None)
    constants: Callable = field(default=lambda value, length, d: (float(length), 0.0, 0.0))
    theory_needs_vectors: bool = False
    lemma2: Optional[Callable] = None
    tilt_reason: Optional[str] = None
    tilt_slope: Callable = field(default=lambda value: (1.0, 0.0))
    symmetric_tilt: bool = False
    needs_squared_norms: bool = False
    param_names: tuple = ()
    check_params: Callable = _no_params
    fit: Optional[Callable] = None
    fitted_params: Optional[Callable] = None
    held_out_fit: bool = False
    random_phase: bool = False
    population: bool = False
    pair_transform: Optional[Callable] = None
    representation: Optional[str] = None
    representation_pairs: Optional[Callable] = None
    params_reason: Optional[Callable] = None
    diagnose_reason: Optional[str] = None
    dispatch: Optional[Callable] = None
    seed_index: Optional[int] = None
    feature_map: Optional[object] = None
    feature_map_reason: str = ""
    first_order: Optional[tuple] = None
    example: Optional[Callable] = None
    code: Optional[int] = None
    extra_rows: int = 0

    def base_rows(self, rows):
        """The projections m of a W with ``rows`` rows (``rows`` less :attr:`extra_rows`); ValueError
        where W has no row beyond the extra ones."""
        if rows <= self.extra_rows:
            raise ValueError(f"kind={self.name!r} reads W of shape (m + {self.extra_rows}, d): m >= 1 "
                             f"projections, then {self.extra_rows} independent iid rows "
                             f"(rfkernels.draw_kind_projections); got {rows} rows")
        return rows - self.extra_rows

    def require_map(self):
        """The kind's :attr:`feature_map`; ValueError with its reason where it has none."""
        if self.feature_map is None:
            raise ValueError(self.feature_map_reason
                             or f"kind={self.name!r} has no literal feature map registered "
                                "(its terms serve the reduced Monte Carlo engine only)")
        return self.feature_map


@dataclass(frozen=True)
class Ensemble:
    """A projection ensemble: how rows are coupled.

    Attributes
    ----------
    name, summary : str
    blocked : bool
        Rows come in independent blocks of ``d`` (the last one partial).
    cosine : callable or None
        ``cosine(d)``: the cosine between two rows' directions in a block (the
        pair law's coupling; 0 orthogonal, -1/(d-1) simplex); None for iid.
    min_d : int
        Smallest dimension the ensemble exists in (``min_d_note`` says why).
    code : int or None
        The reduced law's code: the kernels' ``ensemble`` argument and the key
        of the vectorised law (:func:`rfkernels.engine.laws.reduced_law`);
        None: no reduced sampler.
    reduced_reason, theory_reason : str or None
        Why there is no reduced sampler / no closed form (None: there is).
    seed_index : int or None
        The ensemble's place in studies' spawn keys (frozen, as :attr:`Kind.seed_index`).
    independent : bool
        Every row is drawn independently of the others (iid): the law that
        one projection's moments, alone, give the MSE of (Lemma 2, the
        first-order attention theory).
    sample : callable or None
        ``sample(m, d, norms, rng) -> W``: the whole (m, d) float64 matrix
        (:func:`rfkernels.draw_projections`) from the NumPy Generator ``rng``,
        with the row lengths of the :class:`NormLaw` ``norms`` (one whose
        :meth:`NormLaw.refusal` accepts this ensemble; most samplers call its
        ``with_lengths``). None: no whole-matrix sampler (refused).
    matrix_bytes : callable
        ``matrix_bytes(m, d) -> int``: the peak bytes ``sample`` allocates (an
        upper estimate, checked before anything is drawn;
        :func:`rfkernels.projections.projection_bytes`). Default: the (m, d)
        rows and two copies.
    reference : bool
        A reference code's construction, reproduced with its bias (the
        Performer code's unfixed QR, xformers' feature maps): for analysis and
        the presets; not offered where users choose frequencies
        (:class:`rfkernels.RandomFourierFeatures`).
    quadrature_theory : bool
        The exact MSE of kinds on ``x - y`` (:attr:`Kind.on_sum` False) is a
        numerical quadrature per pair (simplex blocks): callers evaluating
        many pairs interpolate it.
    block_rows : callable
        ``block_rows(d)``: the rows of one block in dimension d (d; SORF's
        power of two D >= d).
    """

    name: str
    summary: str
    blocked: bool
    cosine: Optional[Callable]
    min_d: int = 1
    min_d_note: str = ""
    code: Optional[int] = None
    reduced_reason: Optional[str] = None
    theory_reason: Optional[str] = None
    seed_index: Optional[int] = None
    independent: bool = False
    sample: Optional[Callable] = None
    matrix_bytes: Callable = field(default=lambda m, d: 8 * 3 * int(m) * int(d))
    reference: bool = False
    quadrature_theory: bool = False
    block_rows: Callable = field(default=lambda d: d)


@dataclass(frozen=True)
class NormLaw:
    """How the row norms are drawn.

    Attributes
    ----------
    name, summary : str
    chi : bool
        Every row marginally N(0, I_d) (chi(d) norms; the kernels' flag);
        False: every row of length ``sqrt(d)`` exactly (fixed norms), as the
        kernels, the reduced laws and the tilted proposal read it.
    coupled : bool
        The rows' norms are coupled in pairs within a block (antithetic
        norms): chi(d) marginals, but not independent; the kernels' second flag
        (the reduced laws draw them from the quantile table of
        :mod:`rfkernels.numerics.chi_quantile`).
    with_lengths : callable or None
        ``with_lengths(rows, d, rng, unit=True) -> W``: the law's whole-matrix
        sampler (:func:`rfkernels.draw_projections`): the (m, d) ``rows``
        (the projections' directions: unit rows, or any rows where ``unit``
        is False) given the law's lengths, drawn from the NumPy Generator
        ``rng`` after the directions. None: no whole-matrix sampler (refused).
    ensembles : tuple of str or None
        The ensembles whose blocks it pairs (None: every ensemble).
    ensemble_reason : str
        Why the other ensembles refuse it (with ``ensembles``).
    tilt_reason : str or None
        Why the tilted proposal refuses it (None: it does not).
    """

    name: str
    summary: str
    chi: bool
    coupled: bool = False
    ensembles: Optional[tuple] = None
    ensemble_reason: str = ""
    tilt_reason: Optional[str] = None
    with_lengths: Optional[Callable] = None

    @property
    def independent_chi(self):
        """Independent chi(d) norms: the law Lemma 2, Theorem 2 and the chi-norm closed forms assume."""
        return self.chi and not self.coupled

    def refusal(self, ensemble):
        """The error message for ``ensemble`` (a name) if this law does not apply to it, else None."""
        if self.ensembles is None or ensemble in self.ensembles:
            return None
        return (f"norms={self.name!r} needs ensemble in {', '.join(repr(e) for e in self.ensembles)}; "
                f"got ensemble={ensemble!r}: {self.ensemble_reason}")


@dataclass(frozen=True)
class TargetKernel:
    """The kernel the features estimate, as a rescaling of the softmax kernel.

    The target is ``exp(log_factor(half_sq')) * exp(x'.y')`` with
    ``x' = c x``, ``y' = c y``, ``c = scale(params)`` and ``half_sq' =
    (|x'|^2 + |y'|^2)/2``: the softmax estimators at ``(x', y')``, times
    the factor, estimate it, so relative errors are those of the softmax
    estimator at the scaled pair and the MSE is multiplied by
    ``exp(2 log_factor)``.

    Attributes
    ----------
    name, summary : str
    scale : callable
        ``scale(params) -> c`` (a float > 0).
    log_factor : callable
        ``log_factor(half_sq')``: the log of target / SM at the scaled pair
        (0 for softmax; ``-half_sq'`` for the Gaussian kernel), vectorised;
        it also splits per row (``-|x'|^2/2`` for a row's features).
    check_params : callable
        ``check_params({name: value}) -> params``: the validated, frozen
        parameter object (None for softmax).
    param_names : tuple of str
        Keyword parameters of the kernel (``("gamma",)`` for gaussian).
    """

    name: str
    summary: str
    scale: Callable = field(default=lambda params: 1.0)
    log_factor: Callable = field(default=lambda half_sq: 0.0)
    check_params: Callable = field(default=lambda values: None)
    param_names: tuple = ()


@dataclass(frozen=True)
class Representation:
    r"""A representation of the softmax kernel: :math:`e^{x\cdot y} = E_{\omega\sim N(0, I)}
    \sum_c \varphi_c(x, \omega)\varphi_c(y, \omega)` (MATH.md, "The variance floor").

    A kind with independent draws from one Gaussian policy is this
    representation under that policy (:attr:`Kind.representation`); its
    floor (:mod:`rfkernels.floor`) bounds every such kind from below.

    Attributes
    ----------
    name, summary : str
    features_per_draw : int
        Output features per draw of :math:`\omega` (the floor is reported per
        output feature: times this).
    components : callable
        ``components(proj, half_sq) -> [(log|phi_c|, sign_c or None), ...]``:
        each component of the map at projections ``proj`` (:math:`\omega\cdot x`)
        and ``half_sq`` (:math:`|x|^2/2`, broadcast), vectorised.
    tilt_signs : tuple of float or None
        For a nonnegative representation, :math:`g_p\,\Omega` is the
        density of the mean over these signs s of :math:`N(s u_p, I)`,
        :math:`u_p = x_p + y_p` (so the mixture of tilts is exact); None
        where :math:`g` changes sign (the floor samples :math:`\Omega`).
    """

    name: str
    summary: str
    features_per_draw: int
    components: Callable
    tilt_signs: Optional[tuple] = None
