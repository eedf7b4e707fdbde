"""Theory against Monte Carlo, one geometry at a time, and the bias audit.

:func:`evaluate_point` is the single place where one grid point (a geometry,
an estimator, an ensemble, a number of projections) becomes one row of
numbers: Monte Carlo MSE with its error bars and tail diagnostic beside
Lemma 2, the Theorem 2 bound and the exact MSE. :func:`compare` tabulates it
over lists of geometries, kinds and ensembles and says which theoretical
statements held; sweeps (:mod:`rfkernels.analysis.sweep`) call the same
function for every point of a grid.
"""

from __future__ import annotations

import itertools
import math
import numbers
import time

import numpy as np

from rfkernels import engine, theory
from rfkernels.backends import check_backend
from rfkernels.estimators import Estimator, check_ensemble, check_kind, check_norms, estimator, registry
from rfkernels.validation import (
    check_bool,
    check_choice,
    check_finite,
    check_int,
    seed_sequence,
)
from rfkernels.workers import map_in_order

from .points import (
    DEFAULT_KERNEL,
    canonical_point,
    check_norm_axes,
    independent_rows,
    point_geometry,
    output_dimension,
    point_kernel,
    point_seed,
    point_vectors,
)

#: The column :func:`evaluate_point` derives from the point's estimator (its
#: kind and m): the feature map's outputs, scikit-learn's ``n_components``.
ESTIMATOR_COLUMNS = ("output_dimension",)

#: Columns :func:`evaluate_point` adds to the point's own variables and
#: :data:`ESTIMATOR_COLUMNS`, in order.
RESULT_COLUMNS = (
    "trials",
    "mse_mc",
    "stderr",
    "ci_low",
    "ci_high",
    "bias",
    "bias_stderr",
    "mse_exact",
    "mse_lemma2",
    "theorem2_bound",
    "z",
    "k_hat",
    "max_share",
    "tail_ok",
    "proposal",
    "ess",
    "note",
    "seconds",
)

#: |z| above which Monte Carlo and theory are declared inconsistent.
Z_THRESHOLD = 4.0


def theory_columns(geom, m, kind, ensemble=None, norms=None, *, kernel=DEFAULT_KERNEL,
                   gamma=None, vectors=None):
    """mse_exact, mse_lemma2, theorem2_bound and a note, for arrays of points.

    ``kind`` is a kind's name (with ``ensemble``, ``norms``, ``kernel`` and
    ``gamma``) or an :class:`rfkernels.estimators.Estimator` (validated; its
    capabilities decide which statements exist). ``geom`` is the geometry of
    the pairs as given: for the Gaussian kernel the exact MSE and Lemma 2
    are those of its estimate (:func:`rfkernels.theory.exact_mse` and
    :func:`rfkernels.theory.lemma2_of` rescale), and there is no Theorem 2
    bound (:func:`theorem2_reason`).

    Returns a dict of arrays. NaN marks "no such statement" (Lemma 2 and
    Theorem 2 are chi-norm results about the paper's kinds, Theorem 2 needs
    m <= d and positive features, the unfixed-QR and SORF ensembles have no
    closed form, OPRF and simplex have one for chi norms only; OPRF uses
    each point's optimal A*) and also a value
    beyond float64, which ``note`` then reports with its natural log — a
    table never holds a silent inf. ``vectors``: the pair(s) ``(x, y)`` of
    ``geom``, for a kind whose MSE depends on the vectors themselves
    (:attr:`rfkernels.estimators.Kind.theory_needs_vectors`).
    """
    if isinstance(kind, Estimator) and (ensemble, norms, kernel, gamma) != (
            None, None, DEFAULT_KERNEL, None):
        raise ValueError("kind is an Estimator: its ensemble, norms, kernel and gamma are its own; "
                         "leave them out")
    est = kind if isinstance(kind, Estimator) else estimator(
        kind, ensemble=ensemble, norms=norms, kernel=kernel, gamma=gamma)
    shape = np.broadcast_shapes(np.shape(geom.s), np.shape(m))
    logs = {name: np.full(shape, np.nan) for name in ("mse_exact", "mse_lemma2", "theorem2_bound")}
    out_of_range = np.zeros(shape, dtype=bool)
    if est.supports.exact_mse:
        try:
            logs["mse_exact"][...] = theory.exact_mse(geom, None, m, est, log=True, vectors=vectors)
        except OverflowError:  # a point beyond the simplex quadrature's range: the others still count
            g_all = theory.Geometry(*(np.broadcast_to(a, shape) for a in geom))
            m_all = np.broadcast_to(m, shape)
            for i in np.ndindex(shape):
                try:
                    logs["mse_exact"][i] = theory.exact_mse(
                        theory.Geometry(*(a[i] for a in g_all)), None, m_all[i], est, log=True)
                except OverflowError:
                    out_of_range[i] = True
    if est.supports.lemma2:
        logs["mse_lemma2"][...] = theory.lemma2_of(geom, m, est)
        if theorem2_reason(est) is None:  # positive, orthogonal, chi, softmax; m <= d below
            m_arr = np.broadcast_to(m, shape)
            ok = m_arr <= np.broadcast_to(geom.d, shape)
            if np.any(ok):
                sub = theory.Geometry(*(np.broadcast_to(a, shape)[ok] for a in geom))
                logs["theorem2_bound"][ok] = theory.theorem2_bound_from_geometry(sub, m_arr[ok], log=True)
    out = {}
    note = np.full(shape, "", dtype=object)
    for name, lv in logs.items():
        over = lv > _LOG_MAX
        out[name] = np.exp(np.where(over, np.nan, lv))
        for i in zip(*np.nonzero(over)) if over.ndim else ([()] if over else []):
            note[i] = (note[i] + "; " if note[i] else "") + f"{name} beyond float64: log = {lv[i]:.6g}"
    for i in zip(*np.nonzero(out_of_range)) if out_of_range.ndim else ([()] if out_of_range else []):
        note[i] = (note[i] + "; " if note[i] else "") + "mse_exact beyond the range of its quadrature"
    out["note"] = note
    return out


def theorem2_reason(est):
    """Why Theorem 2 says nothing about the estimator ``est`` (m aside); None where it may.

    Its capability (:attr:`rfkernels.estimators.Estimator.supports.theorem2`), which
    holds for the softmax kernel only: the bound is a statement about the
    estimate of exp(x.y), not of the Gaussian kernel.
    """
    return est.supports.theorem2.reason


#: Natural log of the largest float64.
_LOG_MAX = float(np.log(np.finfo(np.float64).max))


#: Keys every point of :func:`evaluate_point` needs, besides its norms (and, with
#: ``kernel="gaussian"``, ``gamma``; a point without ``kernel`` is a softmax point).
POINT_KEYS = ("kind", "ensemble", "norms", "d", "m", "angle")


def check_point_keys(point):
    """Refuse a point that is not a mapping or lacks a key :func:`evaluate_point` reads.

    The point needs :data:`POINT_KEYS` and either ``norm_x`` and ``norm_y`` or
    ``norm_sum`` (a key set to None counts as absent); one-line ValueError
    naming the missing keys and the expected ones.
    """
    if not hasattr(point, "keys") or not hasattr(point, "get"):
        raise TypeError(f"point must be a dict of the point's variables; got {type(point).__name__}")
    missing = [k for k in POINT_KEYS if point.get(k) is None]
    if point.get("norm_sum") is None:
        missing += [k for k in ("norm_x", "norm_y") if point.get(k) is None]
    if missing:
        raise ValueError(f"point is missing {', '.join(missing)}; a point needs "
                         f"{', '.join(POINT_KEYS)} and norm_x, norm_y (or norm_sum)")
    return point


def evaluate_point(point, *, trials, seed, backend="numpy", method="reduced", chunk=None,
                   theory_only=False, proposal="auto"):
    """One row: the point's variables, Monte Carlo and theory side by side.

    Parameters
    ----------
    point : dict
        ``kind``, ``ensemble``, ``norms``, ``d``, ``m``, ``angle`` and
        ``norm_x``/``norm_y`` or ``norm_sum`` (:func:`check_point_keys`);
        optionally ``kernel`` (default ``"softmax"``) and, for
        ``"gaussian"``, ``gamma`` (``K = exp(-gamma |x - y|^2)``; the geometry
        is that of the pair as given).
    trials, seed, backend, method, chunk
        Passed to :func:`rfkernels.analysis.monte_carlo.monte_carlo_mse`;
        ``seed`` may be a :class:`numpy.random.SeedSequence`.
    theory_only : bool
        Skip Monte Carlo (its columns are NaN, ``trials`` is 0).
    proposal : {'auto', 'plain', 'tilted'}, default 'auto'
        The Monte Carlo proposal (:func:`rfkernels.analysis.monte_carlo.monte_carlo_mse`);
        a point where ``'tilted'`` cannot apply (trig features, the literal
        method) is run plain. The row's ``proposal`` says which law was used
        (empty without Monte Carlo) and ``ess`` the weights' effective
        sample size.

    Returns
    -------
    dict
        ``point`` followed by :data:`ESTIMATOR_COLUMNS` and :data:`RESULT_COLUMNS`
        (the MSEs are those of the estimate of the point's kernel). ``z`` is
        (mse_mc - mse_exact) / stderr; ``tail_ok`` says whether the Monte Carlo
        standard error can be trusted (see the tail diagnostic).
    """
    check_point_keys(point)
    theory_only = check_bool(theory_only, "theory_only")
    check_choice(proposal, "proposal", engine.PROPOSALS)
    start = time.perf_counter()
    geom = point_geometry(point)
    kernel, gamma = point_kernel(point)
    est = estimator(point["kind"], ensemble=point["ensemble"], norms=point["norms"],  # once per row
                    kernel=kernel, gamma=gamma)
    th = theory_columns(geom, point["m"], est,  # the pair itself for a kind whose theory reads it
                        vectors=point_vectors(point) if est.kind.theory_needs_vectors else None)
    row = dict(point)
    row["output_dimension"] = output_dimension(point["kind"], point["m"])
    nan = float("nan")
    row.update({k: nan for k in RESULT_COLUMNS})
    row.update({k: float(v) for k, v in th.items() if k != "note"})
    notes = [str(th["note"][()])] if th["note"][()] else []
    row["trials"] = 0
    row["tail_ok"] = ""
    row["proposal"] = ""
    if not theory_only and not np.isfinite(row["mse_exact"]) and th["note"][()]:
        notes.append("Monte Carlo not run: the exact MSE is out of range (see above)")
    elif not theory_only:
        from .monte_carlo import monte_carlo_mse

        exact = row["mse_exact"] if math.isfinite(row["mse_exact"]) else None
        vectors = point_vectors(point) if method == "literal" else None
        try:
            res = monte_carlo_mse(
                geom, None, point["m"], est, trials=trials, seed=seed, backend=backend, method=method,
                chunk=chunk, vectors=vectors, mse_exact=exact,
                proposal=_applicable(proposal, est, method))
        except FloatingPointError as exc:  # this point's MSE is beyond float64: say so, go on
            notes.append(f"Monte Carlo not run: {exc}")
        else:
            row.update(_mc_columns(res))
    row["note"] = "; ".join(notes)
    row["seconds"] = time.perf_counter() - start
    return row


def _applicable(proposal, est, method):
    """``proposal``, with ``'tilted'`` as ``'plain'`` where nothing can be tilted (trig, literal)."""
    if proposal == "tilted" and (not est.supports.tilted or method != "reduced"):
        return "plain"
    return proposal


def _mc_columns(res):
    """The Monte Carlo columns of a row from a Monte Carlo result (its z is the row's z)."""
    low, high = res.ci95
    return {
        "trials": int(res.trials),
        "mse_mc": float(res.mse),
        "stderr": float(res.stderr),
        "ci_low": float(low),
        "ci_high": float(high),
        "bias": float(res.bias),
        "bias_stderr": float(res.bias_stderr),
        "z": float("nan") if res.z is None else float(res.z),
        "k_hat": float(res.tail.k_hat),
        "max_share": float(res.tail.max_share),
        "tail_ok": bool(res.tail_ok),
        "proposal": res.proposal,
        "ess": float(res.ess),
    }


def statements(row):
    """Which theoretical statements held at a row: a dict of True/False/None.

    - ``exact_le_bound``: exact orthogonal MSE <= Theorem 2 bound;
    - ``iid_eq_lemma2``: exact iid MSE equals Lemma 2 (relative 1e-10);
    - ``mc_consistent``: ``|z| < 4`` between Monte Carlo and the exact MSE —
      ``None`` (inconclusive) where the tail diagnostic says the standard
      error cannot be trusted or there is no exact value.
    """
    out = {"exact_le_bound": None, "iid_eq_lemma2": None, "mc_consistent": None}
    exact, bound, lemma = row["mse_exact"], row["theorem2_bound"], row["mse_lemma2"]
    if math.isfinite(bound) and math.isfinite(exact):
        out["exact_le_bound"] = exact <= bound * (1 + 1e-12)
    if independent_rows(row["ensemble"]) and math.isfinite(lemma) and math.isfinite(exact):
        out["iid_eq_lemma2"] = abs(exact - lemma) <= 1e-10 * max(abs(lemma), 1e-300)
    if math.isfinite(row["z"]) and row["tail_ok"] is True:
        out["mc_consistent"] = abs(row["z"]) < Z_THRESHOLD
    return out


#: Keys of a geometry dict of :func:`compare`.
GEOMETRY_KEYS = ("d", "angle", "norm_x", "norm_y", "norm_sum")
_GEOMETRY_TUPLE = "(d, norm_x, norm_y, angle)"


def _one_or_many(values, name, check):
    """A list of checked values from one value (a scalar or a string) or an iterable of them."""
    if isinstance(values, (str, bytes, numbers.Number, np.generic)) or (
        isinstance(values, np.ndarray) and values.ndim == 0
    ):
        values = [values]
    try:
        values = list(values)
    except TypeError:
        raise TypeError(f"{name} must be one value or a sequence of them; got {values!r}") from None
    if not values:
        raise ValueError(f"{name} must hold at least one value; got an empty sequence")
    return [check(v) for v in values]


def _check_root_seed(seed):
    """A root seed of :func:`rfkernels.analysis.points.point_seed` (see ``seed_sequence``)."""
    return seed_sequence(seed, root=True)


def _geometry_list(geometries):
    """The geometries as a list; one dict or one ``(d, norm_x, norm_y, angle)`` tuple is one geometry."""
    if isinstance(geometries, dict):
        return [geometries]
    if isinstance(geometries, (str, bytes)) or not hasattr(geometries, "__iter__"):
        raise TypeError(
            f"geometries must be a dict, a tuple {_GEOMETRY_TUPLE} or a list of them; "
            f"got {geometries!r}"
        )
    out = list(geometries)
    if out and all(isinstance(v, (numbers.Number, np.generic)) for v in out):
        return [tuple(out)]  # one tuple of numbers: a single geometry
    if not out:
        raise ValueError("geometries must hold at least one geometry; got an empty sequence")
    return out


def _geometry_point(g, i):
    """The canonical point of geometry number ``i`` (a dict or a tuple), every key checked."""
    where = f"geometries[{i}]"
    if isinstance(g, dict):
        unknown = sorted(set(g) - set(GEOMETRY_KEYS), key=str)
        if unknown:
            raise ValueError(f"{where}: unknown key {unknown[0]!r}; valid keys are "
                             f"{', '.join(GEOMETRY_KEYS)}")
        for key in ("d", "angle"):
            if key not in g:
                raise ValueError(
                    f"{where}: missing key {key!r}; a geometry needs 'd', 'angle' and "
                    "either 'norm_sum' or 'norm_x'/'norm_y' (each defaults to 1.0)")
        g = dict(g)
    elif isinstance(g, (tuple, list)):
        if len(g) != 4:
            raise ValueError(f"{where}: a tuple geometry is {_GEOMETRY_TUPLE}; got {len(g)} "
                             f"value(s): {g!r}")
        g = dict(zip(("d", "norm_x", "norm_y", "angle"), g))
    else:
        raise TypeError(f"{where}: a geometry is a dict or a tuple {_GEOMETRY_TUPLE}; got {g!r}")
    check_norm_axes(g, where)
    if g.get("norm_sum") is None:  # as in sweeps: unit norms unless given
        g.setdefault("norm_x", 1.0)
        g.setdefault("norm_y", 1.0)
    point = {"d": check_int(g["d"], f"{where}['d']")}
    for key in ("angle", "norm_x", "norm_y", "norm_sum"):
        value = g.get(key)
        if value is not None:
            arr = check_finite(value, f"{where}[{key!r}]")
            if arr.ndim != 0:
                raise ValueError(f"{where}[{key!r}] must be one number; got {value!r}")
            value = float(arr)
        point[key] = value
    return canonical_point(point)


def compare(geometries, kinds=("positive",), ensembles=("iid", "orthogonal"), m=(8,), *,
            norms="chi", trials=100_000, seed=0, backend="numpy", method="reduced",
            proposal="auto", kernel=DEFAULT_KERNEL, gamma=None):
    """Theory against Monte Carlo over geometries × kinds × ensembles × m.

    Parameters
    ----------
    geometries : dict, tuple or a list of them
        Each ``{"d":, "angle":, "norm_x":, "norm_y":}`` or
        ``{"d":, "angle":, "norm_sum":}`` (equal norms), or a tuple
        ``(d, norm_x, norm_y, angle)``; one dict or tuple is one geometry.
        ``d`` and ``angle`` are required; ``norm_x`` and ``norm_y`` default
        to 1.0 as in sweeps; ``norm_sum`` with ``norm_x`` or ``norm_y`` is
        over-specified and refused, as in sweeps.
    kinds, ensembles, m : str/int or sequences of them
        Estimators, projection ensembles and numbers of projections; a single
        value means a one-element list.
    norms, trials, seed, backend, method
        As for :func:`rfkernels.analysis.monte_carlo.monte_carlo_mse`. Each
        row gets its own seed, derived from ``seed`` and the row's identity.
        A kind with parameters runs at each point's own value (OPRF: its
        optimal A*); an ensemble without a reduced sampler
        (:attr:`rfkernels.estimators.Estimator.supports.reduced`) needs
        ``method='literal'`` (checked first), and one without a closed form
        has no exact MSE (Monte Carlo only).
    proposal : {'auto', 'plain', 'tilted'}, default 'auto'
        The Monte Carlo proposal of every row (:func:`evaluate_point`: trig
        rows run plain); ``'tilted'`` with ``method='literal'`` or with trig
        as the only kind is refused before any work.
    kernel, gamma
        The target kernel of every row: ``"softmax"`` (exp(x.y), no gamma)
        or ``"gaussian"`` with ``gamma`` > 0 (``exp(-gamma |x - y|^2)``, of the
        geometries as given).

    Raises
    ------
    ValueError, TypeError
        Before any work: a geometry with a missing or unknown key, an
        over-specified one, or a bad value (named as ``geometries[i]['key']``);
        bad kinds, ensembles, m, norms, trials, seed, backend, method, proposal, kernel
        or gamma.

    Returns
    -------
    list of dict
        One row per combination: :func:`evaluate_point`'s columns plus the
        :func:`statements` (``exact_le_bound``, ``iid_eq_lemma2``,
        ``mc_consistent``).
    """
    check_norms(norms)
    trials = check_int(trials, "trials", minimum=2)
    seed = _check_root_seed(seed)
    check_backend(backend)
    check_choice(method, "method", ("reduced", "literal"))
    kinds = _one_or_many(kinds, "kinds", check_kind)
    ensembles = _one_or_many(ensembles, "ensembles", check_ensemble)
    ms = _one_or_many(m, "m", lambda v: check_int(v, "m"))
    check_choice(proposal, "proposal", engine.PROPOSALS)
    # kernel and gamma checked; the rows of the default kernel have neither key (as before)
    target = estimator(kinds[0], kernel=kernel, gamma=gamma).describe()
    target = {} if kernel == DEFAULT_KERNEL else {"kernel": kernel, "gamma": target.get("gamma")}
    if proposal == "tilted" and (method != "reduced" or not any(estimator(k).supports.tilted for k in kinds)):
        raise ValueError("proposal='tilted' needs method='reduced' and a kind other than trig "
                         "(trig estimates are bounded: nothing to tilt); use 'auto' or 'plain'")
    if method == "reduced":
        for kind, ensemble in itertools.product(kinds, ensembles):
            engine.check_reduced(kind, ensemble)
    # every point is built and its geometry checked before any Monte Carlo runs
    points = []
    for i, g in enumerate(_geometry_list(geometries)):
        base = _geometry_point(g, i)
        point_geometry(base)
        for kind, ensemble, mm in itertools.product(kinds, ensembles, ms):
            points.append({"kind": kind, "ensemble": ensemble, "norms": norms, **target,
                           "d": base["d"],
                           "m": mm, "angle": base["angle"], "norm_x": base["norm_x"],
                           "norm_y": base["norm_y"], "norm_sum": base["norm_sum"]})
    rows = []
    for point in points:
        row = evaluate_point(point, trials=trials, seed=point_seed(seed, point), backend=backend,
                             method=method, proposal=proposal)
        row.update(statements(row))
        rows.append(row)
    return rows


def bias_audit(d=16, m=16, *, norm_u=1.0, directions=None, trials=20_000, seed=0,
               ensembles=("orthogonal", "orthogonal-unfixed-qr")):
    """Relative bias of the positive estimator per direction of u = x + y.

    Draws the full projection matrix each trial (the literal path users run)
    with chi norms, for each ensemble and each direction, and compares the
    mean estimate with SM. ``ensemble="sorf"`` (structured orthogonal rows,
    biased for finite d: ``docs/beyond.rst``, "Bias of sorf") is drawn in its
    own blocks of D rows, D the power of two >= d.

    Parameters
    ----------
    d, m : int
        Dimension and number of projections.
    norm_u : float
        ``|x + y|``; ``x = y = u/2``.
    directions : array_like (n, d), optional
        Directions of u; default: e_1, e_2, e_d, (1, ..., 1)/sqrt(d) and one
        fixed random direction.
    trials : int
        Trials per (ensemble, direction).
    ensembles : str or sequence of str
        Registered ensembles (``rfkernels.estimators.names("ensemble")``) to audit.

    Returns
    -------
    list of dict
        ``ensemble``, ``direction`` (label), ``relative_bias``, ``stderr``
        (of the relative bias), ``z`` and ``biased`` (``|z| > 4``).
    """
    from rfkernels import draw_projections, feature_map

    d = check_int(d, "d")
    m = check_int(m, "m")
    trials = check_int(trials, "trials", minimum=2)
    seed = _check_root_seed(seed)
    ensembles = _one_or_many(ensembles, "ensembles", check_ensemble)
    norm_u = check_finite(norm_u, "norm_u")
    if norm_u.ndim != 0 or norm_u < 0:
        raise ValueError(f"norm_u must be one number >= 0; got {norm_u!r}")
    norm_u = float(norm_u)
    if directions is None:
        rand = np.random.default_rng(12345).standard_normal(d)
        named = {"e_1": np.eye(d)[0], "e_2": np.eye(d)[min(1, d - 1)], f"e_{d}": np.eye(d)[-1],
                 "ones": np.ones(d), "random": rand}
    else:
        directions = np.atleast_2d(check_finite(directions, "directions"))
        if directions.ndim != 2 or directions.shape[1] != d:
            raise ValueError(f"directions must have shape (n, d={d}); got {directions.shape}")
        if np.any(np.linalg.norm(directions, axis=1) == 0):
            raise ValueError("directions must be nonzero vectors (each is normalised)")
        named = {f"dir_{i}": v for i, v in enumerate(directions)}
    points = [(ensemble, label, v) for ensemble in ensembles for label, v in named.items()]

    def audit(point):
        ensemble, label, v = point
        size = registry.entry("ensemble", ensemble).block_rows(d)  # d, or sorf's power of two D >= d
        blocks = -(-m // size)  # projections per trial, rounded up to whole blocks
        u = norm_u * v / np.linalg.norm(v)
        x = u / 2.0  # = y
        sm = float(np.exp(x @ x))
        seed_point = point_seed(seed, {"ensemble": ensemble, "direction": label, "d": d, "m": m})
        # Stacked independent blocks are the ensemble itself: the first m
        # rows of each trial's `blocks` blocks are one trial's projections.
        w = draw_projections(trials * blocks * size, d, ensemble=ensemble, seed=seed_point)
        w = w.reshape(trials, blocks * size, d)[:, :m, :].reshape(trials * m, d)
        total = w.shape[0]
        # per-row terms phi(x)_i phi(y)_i of the core's positive feature map (x = y: one map)
        phi = feature_map(x, w, "positive")
        del w
        terms = phi * phi * total
        est = terms.reshape(trials, m).mean(axis=1)
        rel = est / sm - 1.0
        se = rel.std(ddof=1) / math.sqrt(trials)
        z = rel.mean() / se
        return {"ensemble": ensemble, "direction": label, "d": d, "m": m,
                "norm_u": norm_u, "trials": trials, "relative_bias": float(rel.mean()),
                "stderr": float(se), "z": float(z), "biased": bool(abs(z) > Z_THRESHOLD)}

    # Every point draws from its own seed: on this process's threads, the same numbers in order.
    return map_in_order(audit, points, name="rfkernels-bias-audit")
