"""The conformance suite: one battery of checks run on every registered estimator (issue 35).

scikit-learn's ``check_estimator`` is the model: :func:`check_estimator_entry`
runs on every registered kind x ensemble x norm law the registry allows
(the tests' toy kind included, registered from its one module,
``tests/_toy_kind.py``), and :func:`check_kind_entry` on every kind once. A
new estimator that passes them works in every layer:

- the literal map (:func:`rfkernels.feature_map`, :func:`rfkernels.estimate`,
  :func:`rfkernels.log_estimate`) computes the kind's own estimator: at one
  W, the estimate equals ``C * mean_i terms_i`` of the kind's engine terms
  (deterministic, so a layer that fell through to another kind's map fails),
  the log form agrees with it, and features, estimate and log estimate are
  one kernel;
- Monte Carlo over draws, literal (feature maps) and reduced (the engine,
  NumPy), against exact theory where it exists (|z| < 4 on a tame pair),
  else literal against reduced; unbiasedness of the literal estimate where
  the law is;
- attention (:func:`rfkernels.favor_attention` against the quadratic
  computation with the same features), the scikit-learn transformer,
  ``diagnose`` and the command line (``main(argv)`` in process) take the
  kind or refuse it with one line naming the reason.
"""

import importlib
import json
import math
import os
import sys

import numpy as np
import pytest

import rfkernels
from rfkernels import draw_phases, draw_projections, estimate, feature_map, log_estimate, theory
from rfkernels.analysis import monte_carlo_mse
from rfkernels.estimators import estimator, registry

HERE = os.path.dirname(__file__)

#: The tests' toy kind: registered from its one module for this module's tests only
#: (a module fixture), and parametrised like the built-in kinds.
TOY = "toy"


@pytest.fixture(scope="module", autouse=True)
def _toy_registered():
    sys.path.insert(0, HERE)
    try:
        module = importlib.import_module("_toy_kind")
        if TOY not in registry.names("kind"):  # imported before, and unregistered since
            importlib.reload(module)
        yield
    finally:
        registry.unregister("kind", TOY)
        sys.path.remove(HERE)


D, M = 4, 4


#: Every registered kind, and the toy kind (not registered while tests are collected).
KIND_NAMES = registry.names("kind") + (TOY,)


def _combinations():
    """Every kind x ensemble x norm law the registry allows (in d = D)."""
    return [(k, e.name, n.name) for k in KIND_NAMES for e in registry.entries("ensemble")
            for n in registry.entries("norms") if n.refusal(e.name) is None and e.min_d <= D]


COMBINATIONS = _combinations()


def _pair():
    """A tame pair (|x + y|^2 < 1): every estimator's squared error has a light tail."""
    return theory.pair(D, 0.4, 0.3, 1.2)


def _params(kind):
    """The kind's example parameters (:attr:`Kind.example`), or none."""
    entry = registry.entry("kind", kind)
    return {} if entry.example is None else entry.example(D)


def _population(seed=0):
    rng = np.random.default_rng(seed)
    return 0.3 * rng.normal(size=(40, D)), 0.3 * rng.normal(size=(40, D))


def _fitted(kind, d=D, seed=0):
    """A data-fitted kind's :class:`Estimator`, fitted on a small population."""
    return estimator(kind, d=d).fitted_on(*_population(seed))


# ---------------------------------------------------------------------------
# The literal map computes the kind's own estimator
# ---------------------------------------------------------------------------


def _engine_estimate(est, x, y, w, phase):
    """``C * mean_i terms_i``: the estimate the engine's terms give at the projections ``w``."""
    entry = est.kind
    value = entry.resolve(est.params, theory.geometry(x, y))
    if entry.pair_transform is not None:  # the pair at which the kind's terms are the engine's
        x, y = entry.pair_transform(value, x, y)
    v = x + y if entry.on_sum else x - y
    length = float(np.linalg.norm(v))
    log_scale = float(x @ y) if entry.on_sum else 0.5 * float(x @ x + y @ y)
    p = (w @ v / length)[:, None]
    w2 = np.sum(w * w, axis=1)[:, None]
    consts = entry.constants(value, length, x.shape[0])
    terms = entry.terms(p, w2, length, consts, np)[:, 0]
    if entry.random_phase:  # the phase term, given w: cos(w.(x + y) + 2b)
        terms = terms + np.cos(w @ (x + y) + 2.0 * phase)
    return math.exp(log_scale) * float(np.mean(terms))


def _literal_ok(kind):
    entry = registry.entry("kind", kind)
    return entry.feature_map is not None and entry.pair_transform is None


def _two_map_estimate(kind, x, y, w):
    """A two-map kind's estimate: its query map's features against its key map's."""
    entry = registry.entry("kind", kind)
    kw = entry.fit(*_population()) if entry.population else _params(kind)
    mapped = next(k.name for k in registry.entries("kind")
                  if k.pair_transform is not None and not k.population)
    return float(feature_map(x, w, mapped, **kw, role="query")
                 @ feature_map(y, w, mapped, **kw, role="key"))


@pytest.mark.parametrize("kind,ensemble,norms", COMBINATIONS)
def test_literal_map_is_the_kinds_estimator(kind, ensemble, norms):
    """feature_map, estimate and log_estimate: the kind's own terms at one W, one kernel."""
    entry = registry.entry("kind", kind)
    x, y = _pair()
    w = draw_projections(M, D, ensemble=ensemble, norms=norms, seed=5)
    est = _fitted(kind) if entry.population else estimator(kind, d=D, **_params(kind))
    if entry.pair_transform is not None:  # two maps: estimate refuses, the maps compose
        with pytest.raises(ValueError) as err:
            estimate(x, y, w, kind)
        assert "\n" not in str(err.value)
        if est.scalar_law:
            want = _engine_estimate(est, x, y, w, None)
            assert _two_map_estimate(kind, x, y, w) == pytest.approx(want, rel=1e-10)
        return
    if entry.feature_map is None:
        with pytest.raises(ValueError) as err:
            estimate(x, y, w, kind, **_params(kind))
        assert "\n" not in str(err.value)
        return
    params = _params(kind)
    phase = draw_phases(M, seed=6) if entry.random_phase else None
    extra = {"phase": phase} if phase is not None else {}
    got = estimate(x, y, w, kind, **params, **extra)
    want = _engine_estimate(est, x, y, w, phase)
    assert got == pytest.approx(want, rel=1e-10, abs=1e-14)
    phi_x = feature_map(x, w, kind, **params, **extra)
    phi_y = feature_map(y, w, kind, **params, **extra)
    assert phi_x.shape == (entry.features_per_projection * M,)
    assert float(phi_x @ phi_y) == pytest.approx(got, rel=1e-12, abs=1e-15)
    sign, logabs = log_estimate(x, y, w, kind, **params, **extra)
    assert sign * math.exp(logabs) == pytest.approx(got, rel=1e-10, abs=1e-15)
    if entry.feature_map.nonnegative:
        assert np.all(phi_x >= 0)
        s = feature_map(x[None], w, kind, sum_normalize=True, **params)
        np.testing.assert_allclose(s[0], phi_x / phi_x.sum(), rtol=1e-12)
    else:
        with pytest.raises(ValueError, match="sum_normalize needs non-negative features"):
            feature_map(x[None], w, kind, sum_normalize=True, **params, **extra)


def _unbiased(ensemble, norms):
    """Rows marginally N(0, I_d): the registry's exact-theory ensembles with chi norms."""
    e, n = registry.entry("ensemble", ensemble), registry.entry("norms", norms)
    return n.chi and e.theory_reason is None


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_literal_estimate_is_unbiased(kind):
    """Over independent draws of W, the literal estimate's mean is the kernel (|z| < 4)."""
    x, y = _pair()
    entry = registry.entry("kind", kind)
    draws = 600
    values = np.empty(draws)
    for t in range(draws):
        w = draw_projections(M, D, ensemble="orthogonal", norms="chi", seed=1000 + t)
        values[t] = _one_estimate(kind, entry, x, y, w, t)
    z = (values.mean() - math.exp(x @ y)) / (values.std(ddof=1) / math.sqrt(draws))
    assert abs(z) < 4, (kind, values.mean(), math.exp(x @ y))


def _one_estimate(kind, entry, x, y, w, t):
    if entry.pair_transform is not None:
        return _two_map_estimate(kind, x, y, w)
    phase = draw_phases(M, seed=t) if entry.random_phase else None
    extra = {"phase": phase} if phase is not None else {}
    return float(estimate(x, y, w, kind, **_params(kind), **extra))


# ---------------------------------------------------------------------------
# Monte Carlo, literal and reduced, against exact theory
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind,ensemble,norms", COMBINATIONS)
def test_monte_carlo_against_theory(kind, ensemble, norms):
    """Literal and reduced Monte Carlo agree with the exact MSE (or with each other), |z| < 4."""
    x, y = _pair()
    entry = registry.entry("kind", kind)
    est = _fitted(kind) if entry.population else estimator(kind, ensemble=ensemble, norms=norms,
                                                             m=M, d=D, **_params(kind))
    if entry.population:
        est = estimator(kind, ensemble=ensemble, norms=norms, m=M, d=D, params=est.params)
    methods = ["reduced"] if est.reduced else []
    if _literal_ok(est.kind.name):
        methods.append("literal")
    if not methods:
        with pytest.raises(ValueError):
            monte_carlo_mse(x, y, M, est, trials=100, method="reduced")
        return
    results = {meth: monte_carlo_mse(x, y, M, est, trials=4000 if meth == "literal" else 20_000,
                                     seed=11, method=meth, proposal="plain")
               for meth in methods}
    if est.exact_mse:
        for meth, r in results.items():
            assert r.mse_exact is not None and abs(r.z) < 4, (meth, r.mse, r.mse_exact, r.z)
    elif len(results) == 2:
        a, b = results["reduced"], results["literal"]
        z = (a.mse - b.mse) / math.hypot(a.stderr, b.stderr)
        assert abs(z) < 4, (a.mse, b.mse)
    else:
        (r,) = results.values()
        assert r.mse_exact is None and np.isfinite(r.mse) and r.stderr > 0


# ---------------------------------------------------------------------------
# Every entry point takes the kind, or refuses it with its reason
# ---------------------------------------------------------------------------


def _attention_inputs(seed=2):
    rng = np.random.default_rng(seed)
    return (0.4 * rng.normal(size=(12, D)), 0.4 * rng.normal(size=(10, D)),
            rng.normal(size=(10, 3)))


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_attention_takes_the_kind_or_says_why(kind):
    entry = registry.entry("kind", kind)
    q, k, v = _attention_inputs()
    w = draw_projections(M, D, ensemble="orthogonal", seed=3)
    reason = rfkernels.presets.preset("rfkernels").refusal(entry)
    if reason is not None:
        with pytest.raises(ValueError) as err:
            rfkernels.favor_attention(q, k, v, w, kind)
        assert "\n" not in str(err.value)
        return
    if entry.pair_transform is not None:  # two maps, fitted on Q and K
        out = rfkernels.favor_attention(q, k, v, w, kind, **_params(kind))
        assert np.all(np.isfinite(out.output))
        return
    params = _params(kind)
    res = rfkernels.favor_attention(q, k, v, w, kind, **params)
    pq, pk = feature_map(q, w, kind, **params), feature_map(k, w, kind, **params)
    weights = pq @ pk.T
    want = (weights @ v) / weights.sum(axis=1)[:, None]
    np.testing.assert_allclose(res.output, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_transformer_takes_the_kind_or_says_why(kind):
    entry = registry.entry("kind", kind)
    x = np.random.default_rng(4).normal(size=(6, D)) * 0.3
    params = _params(kind) if entry.feature_map is not None else {}
    tr = rfkernels.RandomFeatures(kind=kind, n_components=2 * M, ensemble="orthogonal",
                                  random_state=0, **params)
    if entry.feature_map is None:
        with pytest.raises(ValueError) as err:
            tr.fit(x)
        assert "\n" not in str(err.value)
        return
    phi = tr.fit_transform(x)
    extra = {"phase": tr.random_offset_} if entry.random_phase else {}
    np.testing.assert_array_equal(phi, feature_map(x, tr.projections_, kind, A=tr.A_, **extra))


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_diagnose_takes_the_kind_or_says_why(kind):
    from rfkernels.analysis import diagnose

    entry = registry.entry("kind", kind)
    q, k, v = _attention_inputs(5)
    kw = dict(m=[4], kinds=[kind], ensembles=["orthogonal"], draws=4, queries=4, pairs=16,
              first_order_queries=4, seed=0, workers=1)
    reason = entry.diagnose_reason or rfkernels.presets.preset("rfkernels").refusal(entry)
    if reason is not None:
        with pytest.raises(ValueError) as err:
            diagnose(q, k, v, **kw)
        assert "\n" not in str(err.value)
        return
    result = diagnose(q, k, v, **kw)
    rows = [r for r in result.rows if r["kind"] == kind]
    assert rows and all(r["kind"] == kind for r in rows)


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_command_line_takes_the_kind(kind, capsys):
    from rfkernels.commands.cli import main

    argv = ["mse", "--kind", kind, "--d", str(D), "--m", str(M), "--norm-x", "0.4", "--norm-y",
            "0.3", "--trials", "4000", "--backend", "numpy", "--proposal", "plain", "--json",
            "--no-progress"]
    code = main(argv)
    out, err = capsys.readouterr()
    if code == 0:
        found = json.loads(out)
        assert found["kind"] == kind
        if found.get("z") is not None:
            assert abs(found["z"]) < 4
    else:  # refused: one line on stderr, exit 2, no traceback
        assert code == 2 and "Traceback" not in err and err.strip().count("\n") == 0, err

