"""``rfkernels rank``: which estimator for my budget? Every registered estimator's exact MSE, ranked.

One pair from ``--d``, ``--norm-x``, ``--norm-y``, ``--angle`` (as ``rfkernels
mse`` takes it) or a population of query/key pairs from ``--pairs FILE.npz``
(arrays ``X`` and ``Y``, (n, d) each), a budget ``--r`` of feature-map
outputs: :func:`rfkernels.rank_estimators`, as a table or strict JSON.
"""

from __future__ import annotations

import math
import zipfile

from .cli import command
from ._options import add_kernel_options, angle_in_range, int_range, int_value, name_value, norm_value
from ._output import dumps

#: The single-pair options and their defaults (None on the parser: --pairs excludes them).
_PAIR_DEFAULTS = {"d": 16, "norm_x": 1.0, "norm_y": 1.0, "angle": 1.0}


def _add_rank(p):
    p.epilog = ("One pair (--d, --norm-x, --norm-y, --angle) or a population (--pairs FILE.npz\n"
                "holding arrays X and Y of shape (n, d): the MSE is the mean over the pairs\n"
                "X[i], Y[i]; data-fitted kinds are fitted on them). --r counts feature-map\n"
                "outputs: trig and hyperbolic features spend 2 per projection, the others 1.\n"
                "Counts may be written 1e6; angles pi, pi/2, 3pi/4 as well as 1.5.\n"
                "In --json a value that does not exist is null, with its reason in\n"
                "\"null_reasons\".")
    p.add_argument("--r", type=int_range(1), default=64,
                   help="feature budget: feature-map outputs, not projections")
    p.add_argument("--d", type=int_value, default=None, help="dimension (default: 16)")
    p.add_argument("--norm-x", type=norm_value, default=None, help="|x| (default: 1)")
    p.add_argument("--norm-y", type=norm_value, default=None, help="|y| (default: 1)")
    p.add_argument("--angle", type=angle_in_range, default=None,
                   help="angle between x and y, radians in [0, pi] (1.5, pi/2, 3pi/4, ...) "
                        "(default: 1)")
    p.add_argument("--pairs", type=name_value("file name"), default=None, metavar="FILE.npz",
                   help="a population of query/key pairs: an .npz holding arrays X and Y, (n, d) "
                        "each (instead of --d, --norm-x, --norm-y, --angle)")
    add_kernel_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")


#: Copies of the pairs' entries a ranking holds at once (the arrays as stored and as float64,
#: x + y and x - y), for the memory check before any work.
_PAIR_COPIES = 4


def _npy_header(zf, member):
    """``(shape, dtype)`` of the .npy ``member`` of the zip ``zf`` from its header (None if unread)."""
    from numpy.lib import format as npy

    with zf.open(member) as fh:
        version = npy.read_magic(fh)
        read = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
        if read is None:  # a newer format: np.load reads it and the checks after loading apply
            return None
        shape, _, dtype = read(fh)
    return shape, dtype


def load_pairs(path):
    """Arrays ``X`` and ``Y`` of an ``.npz`` file; one-line errors naming the file and the array.

    The headers are read first: an array of Python objects, one not of shape
    (n, d) or pairs that would not fit in memory are refused before either
    array is read; then both must be finite real numbers of one shape.
    """
    import numpy as np

    from ..validation import check_memory, check_vectors

    with open(path, "rb") as fh:  # OSError (missing, a folder) names the file
        magic = fh.read(6)
    if magic == b"\x93NUMPY":
        raise ValueError(f"{path}: a .npy file; expected an .npz holding arrays X and Y")
    if not magic.startswith(b"PK"):
        raise ValueError(f"{path}: not a NumPy .npz file (not a zip archive)")
    arrays = {}
    try:
        with zipfile.ZipFile(path) as zf:
            members = {n[:-4] if n.endswith(".npy") else n: n for n in zf.namelist()}
            missing = [n for n in ("X", "Y") if n not in members]
            if missing:
                raise ValueError(f"{path}: no array named {missing[0]!r} (arrays found: "
                                 f"{', '.join(sorted(members)) or 'none'}); expected arrays X "
                                 "and Y of shape (n, d)")
            headers = {}
            for name in ("X", "Y"):
                try:
                    headers[name] = _npy_header(zf, members[name])
                except ValueError as exc:
                    raise ValueError(f"{path}: array {name} is not a NumPy array "
                                     f"({' '.join(str(exc).split())})") from None
            for name, header in headers.items():
                if header is not None:
                    _check_header(path, name, *header)
            if all(h is not None for h in headers.values()):
                nbytes = sum(_PAIR_COPIES * max(dtype.itemsize, 8) * math.prod(shape)
                             for shape, dtype in headers.values())
                check_memory(nbytes, f"ranking the pairs of {path} (array X of shape "
                                     f"{headers['X'][0]}, Y of shape {headers['Y'][0]})",
                             reduce="the pairs in --pairs")
        with np.load(path, allow_pickle=False) as data:
            for name in ("X", "Y"):
                try:
                    arrays[name] = data[name]
                except ValueError as exc:  # a truncated array, or objects in a newer format
                    raise ValueError(f"{path}: array {name} cannot be read as numbers "
                                     f"({' '.join(str(exc).split())})") from None
    except (zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{path}: not a NumPy .npz file ({exc})") from None
    for name, v in arrays.items():
        _check_header(path, name, v.shape, v.dtype)
        arrays[name] = check_vectors(v, f"{path}: array {name}")
    X, Y = arrays["X"], arrays["Y"]
    if X.shape != Y.shape:
        raise ValueError(f"{path}: arrays X and Y must have the same shape (n, d), pairs X[i], "
                         f"Y[i]; got {X.shape} and {Y.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{path}: arrays X and Y must hold at least one pair; got shape {X.shape}")
    return X, Y


def _check_header(path, name, shape, dtype):
    """An array of ``--pairs`` holds numbers (not Python objects) in shape (n, d)."""
    if dtype.hasobject:
        raise ValueError(f"{path}: array {name} holds Python objects (dtype {dtype}); expected "
                         "real numbers")
    if len(shape) != 2:
        raise ValueError(f"{path}: array {name} must have shape (n, d); got {tuple(shape)}")


#: The largest norm of --norm-x and --norm-y whose |x + y|^2 is a float64.
_MAX_NORM_SUM = 1.3e154


def _inputs(args):
    """``(x, y)`` of the run: the population of ``--pairs`` or the pair of the geometry options."""
    from .. import theory
    from ..validation import check_memory

    given = [k for k in _PAIR_DEFAULTS if getattr(args, k) is not None]
    if args.pairs is not None:
        if given:
            flags = ", ".join("--" + k.replace("_", "-") for k in given)
            raise ValueError(f"--pairs excludes {flags}: a population or one pair, not both")
        return load_pairs(args.pairs)
    values = {k: (v if getattr(args, k) is None else getattr(args, k))
              for k, v in _PAIR_DEFAULTS.items()}
    d = values["d"]
    if d < 1:
        raise ValueError(f"--d must be an integer >= 1; got {d}")
    check_memory(_PAIR_COPIES * 8 * d, f"rank at --d {d} (vectors x, y, x + y and x - y of {d} "
                                       "entries each)", reduce="--d")
    if values["norm_x"] + values["norm_y"] > _MAX_NORM_SUM:
        raise ValueError(f"--norm-x {values['norm_x']:g} and --norm-y {values['norm_y']:g}: "
                         f"|x + y|^2 overflows float64 (norms beyond about {_MAX_NORM_SUM:.2g}); "
                         "reduce --norm-x and --norm-y")
    return theory.pair(d, values["norm_x"], values["norm_y"], values["angle"])


def _mse_text(row):
    if row.mse is not None:
        return f"{row.mse:10.4e}"
    if row.log_mse is not None:
        return f"e^{row.log_mse:.5g}"
    return f"{0.0:10.4e}"  # exactly 0 (log_mse is -inf)


def _ratio_text(row):
    return f"{row.ratio:10.4g}" if row.ratio is not None else f"{'n/a':>10}"


def _relative_text(row):
    """sqrt(MSE)/K in percent (3 digits), or n/a where the row has none."""
    if row.relative_rmse is None:
        return f"{'n/a':>9}"
    return f"{100 * row.relative_rmse:.3g}%"


#: How close to 1 (100%) a relative RMSE is for the table to say the estimate is about 0.
_ABOUT_ZERO = 0.01


def _ranges(ranks):
    """``[1, 2, 3, 5]`` as ``"1-3, 5"``."""
    parts, start = [], None
    for i, rank in enumerate(ranks):
        if start is None:
            start = rank
        if i + 1 == len(ranks) or ranks[i + 1] != rank + 1:
            parts.append(str(rank) if rank == start else f"{start}-{rank}")
            start = None
    return ", ".join(parts)


def _wrapped(items, width):
    """``items`` joined by ", " in lines of about ``width`` characters, never splitting an item."""
    lines, line = [], ""
    for item in items:
        if line and len(line) + 2 + len(item) > width:
            lines.append(line + ",")
            line = item
        else:
            line = f"{line}, {item}" if line else item
    return lines + [line]


def print_table(ranking, out=print):
    """The ranking as a readable table: the ranked rows, then the unranked with their reasons."""
    target = ("SM = exp(x.y)" if ranking.kernel == "softmax"
              else f"K = exp(-gamma |x - y|^2), gamma = {ranking.gamma:g}")
    what = ("one pair" if ranking.n_pairs == 1 and ranking.inputs != "population"
            else f"the mean over {ranking.n_pairs} pairs")
    base = "/".join(ranking.baseline)
    out(f"Exact MSE of every registered estimator of {target} at r = {ranking.r} outputs, "
        f"d = {ranking.d}, {what}")
    k = "SM" if ranking.kernel == "softmax" else "K"
    out(f"(ratio: to FAVOR+ iid, {base}, at the same r; rel RMSE: sqrt(MSE)/{k}"
        + (f", sqrt(mean MSE / mean {k}^2) over the pairs)" if ranking.n_pairs > 1 else ")"))
    out("")
    floors = ranking.inputs == "population"
    if floors:
        out("(floor: the least mean MSE at r of any policy of independent, unbiased draws of the "
            "kind's representation, rfkernels.floor;")
        out(" coupled draws (orthogonal, simplex, antithetic) and biased fixed norms can go below it)")
    width = max([len(row.name) for row in ranking.rows] + [9])
    out(f"{'rank':>4}  {'estimator':<{width}}  {'m':>6}  {'MSE':>10}  {'ratio':>10}  "
        f"{'rel RMSE':>9}" + (f"  {'floor':>10}" if floors else ""))
    for row in ranking.ranked:
        floor = "" if not floors else "  " + (f"{row.floor_mse:10.4e}" if row.floor_mse is not None
                                              else f"{'n/a':>10}")
        out(f"{row.rank:>4}  {row.name:<{width}}  {row.m:>6}  {_mse_text(row):>10}  "
            f"{_ratio_text(row)}  {_relative_text(row):>9}{floor}")
    rel = [(row.rank, row.relative_rmse) for row in ranking.ranked if row.relative_rmse is not None]
    zero = [rank for rank, v in rel if abs(v - 1.0) <= _ABOUT_ZERO]
    worse = [rank for rank, v in rel if v > 1.0 + _ABOUT_ZERO]
    if zero:
        out(f"rel RMSE 100% (rank {_ranges(zero)}): the estimate is about 0, its MSE about "
            f"{k}^2; a low MSE here does not make it a useful estimator")
    if worse:
        out(f"rel RMSE above 100% (rank {_ranges(worse)}): a larger error than the estimate 0")
    unranked = ranking.unranked
    if unranked:
        out("")
        out(f"No exact MSE here ({len(unranked)} estimators, by reason):")
        by_reason = {}
        for row in unranked:
            mc = "" if row.mc_mse is None else (
                f", Monte Carlo MSE {row.mc_mse:.4g} ± {row.mc_stderr:.2g}"
                + (" (unresolved: heavy tail)" if row.mc_stderr >= 0.5 * row.mc_mse else "")
                + ("" if row.floor_mse is None else f", floor {row.floor_mse:.4g}"))
            by_reason.setdefault(row.reason, []).append(f"{row.name} (m={row.m}{mc})")
        for reason, names in by_reason.items():
            out(f"- {reason}:")
            for line in _wrapped(names, 90):
                out(f"    {line}")
    if ranking.refused:
        out("")
        out(f"{len(ranking.refused)} registered combinations are not estimators (the estimator "
            "refuses them; --json lists them with the reason).")


@command("rank", "Which estimator for my budget: every estimator's exact MSE at r outputs, ranked")(
    _add_rank)
def _run_rank(args):
    from ..ranking import rank_estimators

    x, y = _inputs(args)
    ranking = rank_estimators(x, y, r=args.r, kernel=args.kernel, gamma=args.gamma)
    if args.json:
        out = ranking.to_dict()
        out["pairs"] = args.pairs
        if args.pairs is None:
            out.update({k: (v if getattr(args, k) is None else getattr(args, k))
                        for k, v in _PAIR_DEFAULTS.items() if k != "d"})
            out.setdefault("null_reasons", {})["pairs"] = "one pair from the geometry options"
        print(dumps(out, indent=1))
        return 0
    print_table(ranking)
    return 0
