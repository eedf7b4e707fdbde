"""The grid and run configuration of a sweep: validation, TOML files and the lazy points."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rfkernels import engine
from rfkernels.backends import BACKENDS
from rfkernels.estimators import estimator, registry
from rfkernels.estimators.kernels import check_gamma

from ..points import DEFAULT_KERNEL, GRID_AXES, check_norm_axes

#: Keys of the ``[run]`` table and their defaults.
RUN_DEFAULTS = {
    "trials": 100_000,
    "seed": 0,
    "backend": "numpy",
    "method": "reduced",
    "chunk": None,
    "theory_only": False,
    "proposal": "auto",
}
_AXIS_DEFAULTS = {"kind": ["positive"], "ensemble": ["iid"], "norms": ["chi"],
                  "kernel": [DEFAULT_KERNEL]}
_REQUIRED = ("d", "m", "angle")
#: Text axes (their values are names: the registry's, or the backends).
CHOICE_AXES = ("kind", "ensemble", "norms", "kernel", "backend")


#: What each table of a grid file holds, for the errors that name it.
_WHAT = {"grid": "axes to values, e.g. {'d': [4], 'm': [2, 4], 'angle': [0.5]}",
         "run": f"run keys ({', '.join(RUN_DEFAULTS)}) to values"}


class SweepError(ValueError):
    """A sweep cannot start: bad grid, or results that must not be touched."""


def _short(value, limit=60):
    """``repr(value)``, cut to ``limit`` characters (for one-line errors)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def axis_choices(column):
    """The valid values of a text axis: the registry's names (kinds registered later included)."""
    return BACKENDS if column == "backend" else registry.names(column)


@dataclass(frozen=True)
class SweepSpec:
    """A validated grid and run configuration.

    Use :meth:`from_dict` or :meth:`from_toml`; both check every key before
    any work and name the offending key in their errors.
    """

    grid: dict
    run: dict = field(default_factory=dict)

    # -- construction -------------------------------------------------------

    @classmethod
    def from_toml(cls, path, overrides=None):
        """Read ``[grid]`` and ``[run]`` tables from a TOML file (then apply ``overrides``).

        A UTF-8 byte-order mark at the start of the file is skipped.
        """
        data = _read_toml(path)
        stray = [k for k, v in data.items() if not isinstance(v, dict)]
        if stray:
            keys = f"key {stray[0]} is" if len(stray) == 1 else f"keys {', '.join(stray)} are"
            raise SweepError(f"{path}: {keys} outside any table (above the first [table] "
                             f"header); {_where_keys_go(stray)}")
        unknown = set(data) - {"grid", "run"}
        if unknown:
            raise SweepError(f"{path}: unknown table(s) {sorted(unknown)}; expected [grid] and [run]")
        grid, run = dict(data.get("grid", {})), dict(data.get("run", {}))
        if overrides:
            grid.update(overrides.get("grid", {}))
            run.update(overrides.get("run", {}))
        return cls.from_dict(grid, run)

    @classmethod
    def from_dict(cls, grid, run=None):
        """Validate ``grid`` (axis -> value or values) and ``run`` (:data:`RUN_DEFAULTS` keys)."""
        for name, table in (("grid", grid), ("run", {} if run is None else run)):
            if not isinstance(table, Mapping):
                raise SweepError(f"{name}: expected a table (a mapping) of {_WHAT[name]}; got "
                                 f"{type(table).__name__} {_short(table)}")
        run = dict(run or {})
        grid = dict(grid)
        unknown = set(grid) - set(GRID_AXES)
        if unknown:
            key = min(unknown)
            raise SweepError(f"grid.{key}: unknown key; valid keys are {', '.join(GRID_AXES)}")
        unknown = set(run) - set(RUN_DEFAULTS)
        if unknown:
            key = min(unknown)
            raise SweepError(f"run.{key}: unknown key; valid keys are {', '.join(RUN_DEFAULTS)}")
        out = {}
        for axis in GRID_AXES:
            if axis not in grid:
                continue
            values = grid[axis]
            if not isinstance(values, (list, tuple)):
                values = [values]
            if len(values) == 0:
                raise SweepError(f"grid.{axis}: empty axis")
            checked = [check_axis_value(axis, v) for v in values]
            # a repeated value counts once, where it first appears (as --m 2,2 on the command line)
            distinct = {}
            for v in checked:
                distinct.setdefault(repr(v), v)
            out[axis] = list(distinct.values())
        for axis in _REQUIRED:
            if axis not in out:
                raise SweepError(f"grid.{axis}: missing (required axes: {', '.join(_REQUIRED)})")
        try:
            check_norm_axes(out, "grid.norm_sum")
        except ValueError as exc:
            raise SweepError(str(exc)) from None
        if "norm_sum" not in out:
            out.setdefault("norm_x", [1.0])
            out.setdefault("norm_y", [1.0])
        for axis, default in _AXIS_DEFAULTS.items():
            out.setdefault(axis, list(default))
        full_run = dict(RUN_DEFAULTS)
        full_run.update(run)
        full_run = _check_run(full_run)
        if "backend" not in out:
            out["backend"] = [full_run["backend"]]
        _check_combinations(out, full_run)
        return cls(out, full_run)

    # -- points -------------------------------------------------------------

    def points(self):
        """The grid points, in declared order (the last axis varies fastest).

        A read-only sequence of dicts made on demand: ``len`` costs nothing
        and a million-point grid is never held as a million dicts.
        """
        return GridPoints(self.grid)

    def fingerprint(self):
        """Hash of everything that determines the table's numbers.

        The ``kernel`` axis is left out where it is the default
        ``["softmax"]`` (and ``gamma`` is absent there): a grid of the
        softmax kernel keeps the fingerprint it had before the kernel axes
        existed, so ``--resume`` continues a sweep begun then.
        """
        relevant = {k: v for k, v in self.run.items()}
        grid = {k: v for k, v in self.grid.items() if not (k == "kernel" and v == [DEFAULT_KERNEL])}
        canon = json.dumps({"grid": grid, "run": relevant}, sort_keys=True)
        return hashlib.sha256(canon.encode()).hexdigest()[:20]

    def to_dict(self):
        return {"grid": self.grid, "run": self.run}


class GridPoints(Sequence):
    """The points of a grid in declared order, made one at a time (see :meth:`SweepSpec.points`)."""

    def __init__(self, grid):
        self._axes = [a for a in GRID_AXES if a in grid]
        self._values = [list(grid[a]) for a in self._axes]
        self._len = math.prod(len(v) for v in self._values)

    def __len__(self):
        return self._len

    def _point(self, combo):
        p = dict.fromkeys(GRID_AXES)
        p.update(zip(self._axes, combo))
        if p["gamma"] is not None and not takes_gamma(p["kernel"]):
            p["gamma"] = None  # a softmax point of a grid that mixes kernels has no gamma
        return p

    def __iter__(self):
        return (self._point(c) for c in itertools.product(*self._values))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        i = int(i)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"grid point {i} out of range (the grid has {self._len})")
        combo = []
        for values in reversed(self._values):
            i, k = divmod(i, len(values))
            combo.append(values[k])
        return self._point(reversed(combo))


def takes_gamma(kernel):
    """Whether the target kernel ``kernel`` (a registered name) has the parameter gamma."""
    return "gamma" in registry.entry("kernel", kernel).param_names


def _check_gamma_axis(g):
    """The gamma axis goes with the kernels that take it: required by them, refused without them.

    A grid that mixes the softmax kernel (no gamma) with the Gaussian one
    takes one gamma: its softmax points have gamma null, so several gammas
    would repeat each of them.
    """
    with_gamma = [k for k in g["kernel"] if takes_gamma(k)]
    without = [k for k in g["kernel"] if not takes_gamma(k)]
    if "gamma" not in g:
        if with_gamma:
            raise SweepError(f"grid.gamma: missing; kernel {with_gamma[0]!r} needs gamma > 0 "
                             "(K(x, y) = exp(-gamma |x - y|^2)), e.g. gamma = [0.5] (--gamma 0.5)")
        return
    if not with_gamma:
        raise SweepError("grid.gamma: only the Gaussian kernel has gamma; add 'gaussian' to "
                         f"grid.kernel (now {g['kernel']}) or leave gamma out")
    if without and len(g["gamma"]) > 1:
        raise SweepError(f"grid.gamma: a grid with kernel {without[0]!r} and "
                         f"{with_gamma[0]!r} takes one gamma (the {without[0]} points have none, "
                         f"so each would repeat); got {g['gamma']}: sweep several gammas in a "
                         f"grid of kernel = [{with_gamma[0]!r}]")


def _check_combinations(g, run):
    """Rules that tie axes and run keys together (checked once the grid is complete)."""
    _check_gamma_axis(g)
    for kind in g["kind"]:
        if registry.entry("kind", kind).theory_needs_vectors:
            raise SweepError(f"grid.kind: {kind!r} is no function of the pair's geometry (its MSE "
                             "depends on x and y themselves, as DERF's and the hybrid's do, or on a "
                             "population, as the data-fitted kinds' do): sweeps take geometries; use "
                             "theory.exact_mse or monte_carlo_mse on the vectors")
    for law, ensemble in itertools.product(g["norms"], g["ensemble"]):
        refused = registry.entry("norms", law).refusal(ensemble)
        if refused is not None:  # a grid is the product of its axes: every pair must exist
            raise SweepError(f"grid: {refused}; sweep these norms in a grid of the ensembles "
                             "they take")
    if 1 in g["d"] and any(a not in (0.0, math.pi) for a in g["angle"]):
        raise SweepError("grid.angle: with d = 1 the angle must be 0 or pi")
    if "norm_sum" in g and math.pi in g["angle"]:
        raise SweepError("grid.angle: pi is not allowed with norm_sum (|x + y| = 0 there)")
    # 'tilted' where nothing can be tilted is a mistake; in a grid that mixes kinds the
    # trig points run plain (evaluate_point), and their rows say so
    if run["proposal"] == "tilted" and not run["theory_only"]:
        if run["method"] != "reduced":
            raise SweepError("run.proposal: 'tilted' needs run.method = 'reduced' (the literal "
                             "method samples the plain law only)")
        if not any(estimator(k).supports.tilted for k in g["kind"]):
            raise SweepError("run.proposal: 'tilted' cannot apply to trig features (bounded "
                             "estimates, no heavy tail); use 'auto' or 'plain'")
    if run["theory_only"]:
        for ensemble in g["ensemble"]:
            if registry.entry("ensemble", ensemble).theory_reason is not None:
                closed = [e.name for e in registry.entries("ensemble") if e.theory_reason is None]
                raise SweepError(
                    f"grid.ensemble: {ensemble!r} has no closed form; a theory-only sweep "
                    f"accepts {', '.join(map(repr, closed))}"
                )
    elif run["method"] == "reduced":
        for kind, ensemble in itertools.product(g["kind"], g["ensemble"]):
            try:
                engine.check_reduced(kind, ensemble)
            except ValueError as exc:
                raise SweepError(f"grid: {exc} (set run.method = 'literal')") from None


_BOM = b"\xef\xbb\xbf"


def _read_toml(path):
    """The tables of a TOML file (a UTF-8 byte-order mark skipped); one-line SweepErrors."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise SweepError(f"cannot read grid file {path}: {exc.strerror or exc}") from None
    skip = len(_BOM) if raw.startswith(_BOM) else 0
    try:
        text = raw[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = exc.start + skip
        raise SweepError(f"grid file {path} is not valid TOML: it is not UTF-8 text "
                         f"(byte {at} is {raw[at:at + 1]!r})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SweepError(f"grid file {path} is not valid TOML: {exc}") from None


def _where_keys_go(keys):
    """Where keys found outside a table belong, for the error that names them."""
    if "grid" in keys or "run" in keys:
        return "grid and run must be tables: a [grid] or [run] header line, then its keys"
    homes = [f"{k} under [grid]" if k in GRID_AXES else f"{k} under [run]" for k in keys
             if k in GRID_AXES or k in RUN_DEFAULTS]
    if not homes:
        return "every key belongs in the [grid] or the [run] table"
    return "put " + ", ".join(homes)


def check_axis_value(axis, v):
    """``v`` as a value of grid axis ``axis`` (int, float or name); SweepError naming the key."""
    if axis in CHOICE_AXES:
        choices = axis_choices(axis)
        if v not in choices:
            raise SweepError(f"grid.{axis}: {v!r} is not one of {', '.join(choices)}")
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise SweepError(f"grid.{axis}: values must be numbers; got {v!r}")
    if axis == "gamma":  # the one check of gamma, the core's
        try:
            return check_gamma(v)
        except (TypeError, ValueError) as exc:
            raise SweepError(f"grid.gamma: {exc}") from None
    if not math.isfinite(float(v)):
        raise SweepError(f"grid.{axis}: values must be finite; got {v!r}")
    if axis in ("d", "m"):
        if float(v) != int(v) or not 1 <= int(v) <= 2**31:
            raise SweepError(f"grid.{axis}: values must be integers in [1, 2**31]; got {v!r}")
        return int(v)
    v = float(v)
    if axis == "angle" and not 0.0 <= v <= math.pi:
        raise SweepError(f"grid.angle: values must lie in [0, pi] radians; got {v!r}")
    if axis in ("norm_x", "norm_y", "norm_sum") and v < 0:
        raise SweepError(f"grid.{axis}: values must be >= 0; got {v!r}")
    return v


def _check_run(run):
    t = run["trials"]
    if isinstance(t, float) and t.is_integer():
        t = int(t)
    if isinstance(t, bool) or not isinstance(t, int) or t < 2:
        raise SweepError(f"run.trials: must be an integer >= 2; got {run['trials']!r}")
    from rfkernels.engine import MAX_TRIALS

    if t > MAX_TRIALS:
        raise SweepError(f"run.trials: at most {MAX_TRIALS} per point; got {t}")
    run["trials"] = t
    seed = run["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SweepError(f"run.seed: must be a non-negative integer; got {seed!r}")
    if run["backend"] not in BACKENDS:
        raise SweepError(f"run.backend: {run['backend']!r} is not one of {', '.join(BACKENDS)}")
    if run["method"] not in ("reduced", "literal"):
        raise SweepError(f"run.method: {run['method']!r} is not one of reduced, literal")
    if run["chunk"] is not None and (not isinstance(run["chunk"], int) or run["chunk"] < 1):
        raise SweepError(f"run.chunk: must be a positive integer; got {run['chunk']!r}")
    if not isinstance(run["theory_only"], bool):
        raise SweepError(f"run.theory_only: must be true or false; got {run['theory_only']!r}")
    if not isinstance(run["proposal"], str) or run["proposal"] not in engine.PROPOSALS:
        raise SweepError(f"run.proposal: {run['proposal']!r} is not one of "
                         f"{', '.join(engine.PROPOSALS)}")
    return run
