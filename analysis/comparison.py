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

import math
import time

import numpy as np

from rfkernels import theory
from rfkernels._validation import check_choice, check_int, check_kind, check_norms

#: Columns :func:`evaluate_point` adds to the point's own variables, in order.
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
    "seconds",
)

#: |z| above which Monte Carlo and theory are declared inconsistent.
Z_THRESHOLD = 4.0


def point_norms(point):
    """``(|x|, |y|)`` of a point: ``norm_x``, ``norm_y``, or both from ``norm_sum``."""
    if point.get("norm_sum") is not None:
        n = norms_from_sum(point["norm_sum"], point["angle"])
        return n, n
    return point["norm_x"], point["norm_y"]


def norms_from_sum(norm_sum, angle):
    """|x| = |y| giving |x + y| = ``norm_sum`` at ``angle``: ``norm_sum / (2 cos(θ/2))``."""
    c = math.cos(angle / 2.0)
    if c <= 0.0:
        raise ValueError("norm_sum needs angle < pi (|x + y| = 0 at angle pi)")
    return norm_sum / (2.0 * c)


def point_geometry(point):
    """The :class:`rfkernels.theory.Geometry` of a point's ``d``, norms and ``angle``."""
    return theory.geometry_from_angle(point["d"], *point_norms(point), point["angle"])


def point_vectors(point):
    """x, y (shape (d,)) realising a point's geometry."""
    return theory.pair(point["d"], *point_norms(point), point["angle"])


def theory_columns(geom, m, kind, ensemble, norms):
    """mse_exact, mse_lemma2, theorem2_bound for arrays of points (None/NaN where none applies).

    Returns a dict of float arrays; NaN marks "no such statement" (Lemma 2
    and Theorem 2 are chi-norm results, Theorem 2 needs m <= d and positive
    features, the unfixed-QR ensemble has no closed form). Values beyond
    float64 are +inf only if they overflow, which the caller reports.
    """
    shape = np.broadcast_shapes(np.shape(geom.s), np.shape(m))
    nan = np.full(shape, np.nan)
    out = {"mse_exact": nan.copy(), "mse_lemma2": nan.copy(), "theorem2_bound": nan.copy()}
    with np.errstate(over="ignore"):
        if ensemble in theory.THEORY_ENSEMBLES:
            out["mse_exact"] = np.exp(
                theory.exact_mse_from_geometry(geom, m, kind, ensemble=ensemble, norms=norms, log=True)
            ) * np.ones(shape)
        if norms == "chi":
            out["mse_lemma2"] = np.exp(
                theory.lemma2_mse_from_geometry(geom, m, kind, log=True)
            ) * np.ones(shape)
            if kind == "positive" and ensemble == "orthogonal":
                m_arr = np.broadcast_to(m, shape)
                ok = m_arr <= np.broadcast_to(geom.d, shape)
                if np.any(ok):
                    sub = theory.Geometry(*(np.broadcast_to(a, shape)[ok] for a in geom))
                    bound = out["theorem2_bound"]
                    bound[ok] = np.exp(theory.theorem2_bound_from_geometry(sub, m_arr[ok], log=True))
    return out


def evaluate_point(point, *, trials, seed, backend="numpy", method="reduced", chunk=None,
                   theory_only=False):
    """One row: the point's variables, Monte Carlo and theory side by side.

    Parameters
    ----------
    point : dict
        ``kind``, ``ensemble``, ``norms``, ``d``, ``m``, ``angle`` and
        ``norm_x``/``norm_y`` or ``norm_sum``.
    trials, seed, backend, method, chunk
        Passed to :func:`rfkernels.analysis.monte_carlo.monte_carlo_mse`;
        ``seed`` may be a :class:`numpy.random.SeedSequence`.
    theory_only : bool
        Skip Monte Carlo (its columns are NaN, ``trials`` is 0).

    Returns
    -------
    dict
        ``point`` followed by :data:`RESULT_COLUMNS`. ``z`` is
        (mse_mc - mse_exact) / stderr; ``tail_ok`` says whether the Monte Carlo
        standard error can be trusted (see the tail diagnostic).
    """
    start = time.perf_counter()
    geom = point_geometry(point)
    th = theory_columns(geom, point["m"], point["kind"], point["ensemble"], point["norms"])
    row = dict(point)
    nan = float("nan")
    row.update({k: nan for k in RESULT_COLUMNS})
    row.update({k: float(v) for k, v in th.items()})
    row["trials"] = 0
    row["tail_ok"] = ""
    if not theory_only:
        from .monte_carlo import monte_carlo_mse

        x, y = point_vectors(point)
        res = monte_carlo_mse(
            x, y, point["m"], point["kind"], ensemble=point["ensemble"], norms=point["norms"],
            trials=trials, seed=seed, backend=backend, method=method, chunk=chunk,
        )
        row.update(_mc_columns(res, row["mse_exact"]))
    row["seconds"] = time.perf_counter() - start
    return row


def _mc_columns(res, mse_exact):
    """The Monte Carlo columns of a row from a Monte Carlo result object."""
    low, high = res.ci95
    z = (res.mse - mse_exact) / res.stderr if (res.stderr > 0 and math.isfinite(mse_exact)) else float("nan")
    return {
        "trials": int(res.trials),
        "mse_mc": float(res.mse),
        "stderr": float(res.stderr),
        "ci_low": float(low),
        "ci_high": float(high),
        "bias": float(res.bias),
        "bias_stderr": float(res.bias_stderr),
        "z": float(z),
        "k_hat": float(res.tail.k_hat),
        "max_share": float(res.tail.max_share),
        "tail_ok": bool(res.tail_ok),
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
    if row["ensemble"] == "iid" and math.isfinite(lemma) and math.isfinite(exact):
        out["iid_eq_lemma2"] = abs(exact - lemma) <= 1e-10 * max(abs(lemma), 1e-300)
    if math.isfinite(row["z"]) and row["tail_ok"] is True:
        out["mc_consistent"] = abs(row["z"]) < Z_THRESHOLD
    return out


def compare(geometries, kinds=("positive",), ensembles=("iid", "orthogonal"), m=(8,), *,
            norms="chi", trials=100_000, seed=0, backend="numpy", method="reduced"):
    """Theory against Monte Carlo over geometries × kinds × ensembles × m.

    Parameters
    ----------
    geometries : iterable of dict or tuple
        Each ``{"d":, "angle":, "norm_x":, "norm_y":}`` (or ``norm_sum``) or a
        tuple ``(d, norm_x, norm_y, angle)``.
    kinds, ensembles, m : iterables
        Estimators, projection ensembles and numbers of projections.
    norms, trials, seed, backend, method
        As for :func:`rfkernels.analysis.monte_carlo.monte_carlo_mse`. Each
        row gets its own seed, derived from ``seed`` and the row's identity.

    Returns
    -------
    list of dict
        One row per combination: :func:`evaluate_point`'s columns plus the
        :func:`statements` (``exact_le_bound``, ``iid_eq_lemma2``,
        ``mc_consistent``).
    """
    from .sweep import point_seed

    check_norms(norms)
    trials = check_int(trials, "trials", minimum=2)
    rows = []
    for g in geometries:
        if not isinstance(g, dict):
            d, nx, ny, angle = g
            g = {"d": d, "norm_x": nx, "norm_y": ny, "angle": angle}
        for kind in kinds:
            check_kind(kind)
            for ensemble in ensembles:
                check_choice(ensemble, "ensemble", ("iid", "orthogonal", "orthogonal-unfixed-qr"))
                for mm in m:
                    point = {"kind": kind, "ensemble": ensemble, "norms": norms,
                             "d": int(g["d"]), "m": check_int(mm, "m"), "angle": float(g["angle"]),
                             "norm_x": g.get("norm_x"), "norm_y": g.get("norm_y"),
                             "norm_sum": g.get("norm_sum")}
                    row = evaluate_point(point, trials=trials, seed=point_seed(seed, point),
                                         backend=backend, method=method)
                    row.update(statements(row))
                    rows.append(row)
    return rows


def bias_audit(d=16, m=16, *, norm_u=1.0, directions=None, trials=20_000, seed=0,
               ensembles=("orthogonal", "orthogonal-unfixed-qr")):
    """Relative bias of the positive estimator per direction of u = x + y.

    Draws the full projection matrix each trial (the literal path users run)
    with chi norms, for each ensemble and each direction, and compares the
    mean estimate with SM.

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
    if directions is None:
        rand = np.random.default_rng(12345).standard_normal(d)
        named = {"e_1": np.eye(d)[0], "e_2": np.eye(d)[min(1, d - 1)], f"e_{d}": np.eye(d)[-1],
                 "ones": np.ones(d), "random": rand}
    else:
        directions = np.atleast_2d(np.asarray(directions, dtype=np.float64))
        if directions.shape[1] != d:
            raise ValueError(f"directions must have shape (n, d={d}); got {directions.shape}")
        named = {f"dir_{i}": v for i, v in enumerate(directions)}
    from .sweep import point_seed

    blocks = -(-m // d)  # projections per trial, rounded up to whole blocks
    rows = []
    for ensemble in ensembles:
        for label, v in named.items():
            u = norm_u * v / np.linalg.norm(v)
            x = y = u / 2.0
            sm = float(np.exp(x @ y))
            seed_point = point_seed(seed, {"ensemble": ensemble, "direction": label, "d": d, "m": m})
            # Stacked independent blocks are the ensemble itself: the first m
            # rows of each trial's `blocks` blocks are one trial's projections.
            w = draw_projections(trials * blocks * d, d, ensemble=ensemble, seed=seed_point)
            w = w.reshape(trials, blocks * d, d)[:, :m, :].reshape(trials * m, d)
            total = w.shape[0]
            # per-row terms phi(x)_i phi(y)_i of the core's positive feature map
            terms = feature_map(x, w, "positive") * feature_map(y, w, "positive") * total
            est = terms.reshape(trials, m).mean(axis=1)
            rel = est / sm - 1.0
            se = rel.std(ddof=1) / math.sqrt(trials)
            z = rel.mean() / se
            rows.append({"ensemble": ensemble, "direction": label, "d": d, "m": m,
                         "norm_u": norm_u, "trials": trials, "relative_bias": float(rel.mean()),
                         "stderr": float(se), "z": float(z), "biased": bool(abs(z) > Z_THRESHOLD)})
    return rows
