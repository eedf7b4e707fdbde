"""The conformance suite: one battery of checks run on every registered estimator (issue 35).

scikit-learn's ``check_estimator`` is the model. :func:`check_estimator_entry`
runs on every registered kind x ensemble x norm law the registry allows,
and :func:`check_kind_entry` on every kind once; the tests' toy kind
(``tests/_toy_kind.py``, registered from its one module for this module's
tests) is checked like the built-in ones. A new estimator that passes them
works in every layer:

- its map (:func:`rfkernels.feature_map`, :func:`rfkernels.estimate`,
  :func:`rfkernels.log_estimate`; a two-map kind's query and key maps) is the
  kind's own estimator: at one W, the estimate equals ``C * mean_i terms_i``
  of the kind's engine terms (deterministic, so a layer that fell through
  to another kind's map fails), the log form agrees, and features, estimate
  and log estimate are one kernel;
- Monte Carlo, literal (the maps) and reduced (the engine, NumPy), agrees
  with the exact MSE where it exists (|z| < 4 on a tame pair), else literal
  with reduced; the literal estimate is unbiased over draws;
- attention (:func:`rfkernels.favor_attention` against the quadratic
  computation with the same features), the scikit-learn transformer,
  ``diagnose`` and ``rfkernels mse`` (``main(argv)`` in process) take the
  kind, or refuse it in one line with the entry's own reason.
"""

import importlib
import json
import math
import os
import sys

import numpy as np
import pytest

import rfkernels
from rfkernels import draw_kind_projections, draw_phases, estimate, feature_map, log_estimate, theory
from rfkernels.analysis import diagnose, monte_carlo_mse
from rfkernels.commands.cli import main
from rfkernels.estimators import estimator, registry
from rfkernels.presets import preset

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
KIND_NAMES = tuple(dict.fromkeys(registry.names("kind") + (TOY,)))


def _combinations():
    """Every kind x ensemble x norm law the registry allows (in d = D)."""
    return [(k, e.name, n.name) for k in KIND_NAMES for e in registry.entries("ensemble")
            for n in registry.entries("norms") if n.refusal(e.name) is None and e.min_d <= D]


COMBINATIONS = _combinations()


def _pair():
    """A tame pair (|x + y|^2 < 1): every estimator's squared error has a light tail."""
    return theory.pair(D, 0.4, 0.3, 1.2)


def _population(seed=0):
    rng = np.random.default_rng(seed)
    return 0.3 * rng.normal(size=(40, D)), 0.3 * rng.normal(size=(40, D))


def _params(kind):
    """The kind's example parameters (:attr:`Kind.example`), or none."""
    entry = registry.entry("kind", kind)
    return {} if entry.example is None else entry.example(D)


def _estimator(kind, ensemble="iid", norms="chi"):
    """The kind as an :class:`Estimator`: with its example parameters, or fitted on a population."""
    entry = registry.entry("kind", kind)
    if entry.population:
        params = estimator(kind, d=D).fitted_on(*_population()).params
        return estimator(kind, ensemble=ensemble, norms=norms, m=M, d=D, params=params)
    return estimator(kind, ensemble=ensemble, norms=norms, m=M, d=D, **_params(kind))


def _one_line(err):
    assert "\n" not in str(err.value), str(err.value)


# ---------------------------------------------------------------------------
# The checks
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


def _two_map_estimate(est, x, y, w):
    """A two-map kind's estimate at W through its own query and key maps (and their logs agree)."""
    fmap, p = est.kind.feature_map, est.kind.resolve(est.params, None)
    fx, fy = fmap.features(x[None], w, p, "query", np), fmap.features(y[None], w, p, "key", np)
    for f, z, role in ((fx, x, "query"), (fy, y, "key")):
        logs = fmap.log_features(z[None], w, p, role, np)
        np.testing.assert_allclose(np.exp(logs) / math.sqrt(w.shape[0]), f, rtol=1e-12)
    return float(fx[0] @ fy[0])


def check_literal_map(kind, ensemble, norms):
    """The kind's map at one W is its own estimator: the engine's terms, one kernel, log agrees."""
    entry = registry.entry("kind", kind)
    x, y = _pair()
    w = draw_kind_projections(M, D, kind, ensemble=ensemble, norms=norms, seed=5)
    if entry.feature_map is None:  # no map: every literal entry refuses with the entry's reason
        with pytest.raises(ValueError, match="feature map") as err:
            estimate(x, y, w, kind)
        _one_line(err)
        return
    est = _estimator(kind)
    if entry.feature_map.two_roles:
        with pytest.raises(ValueError, match="a query map and a key map") as err:
            estimate(x, y, w, kind)
        _one_line(err)
        if est.kind is entry:  # (a given DERF at FAVOR+'s or OPRF's parameters is that kind)
            got = _two_map_estimate(est, x, y, w)
            if not entry.population:  # the public map with the given parameters: the same numbers
                pub = (feature_map(x, w, kind, **_params(kind), role="query")
                       @ feature_map(y, w, kind, **_params(kind), role="key"))
                assert float(pub) == pytest.approx(got, rel=1e-13)
            if est.supports.scalar_law:
                assert got == pytest.approx(_engine_estimate(est, x, y, w, None), rel=1e-10)
            else:
                assert got > 0.0 and math.isfinite(got)
        return
    params = _params(kind)
    phase = draw_phases(M, seed=6) if entry.random_phase else None
    extra = {"phase": phase} if phase is not None else {}
    got = estimate(x, y, w, kind, **params, **extra)
    if est.supports.scalar_law:
        assert got == pytest.approx(_engine_estimate(est, x, y, w, phase), rel=1e-10, abs=1e-14)
    else:  # no scalar law (the hybrid): its map is checked against its own estimator in its tests
        assert math.isfinite(got) and not est.supports.reduced
    phi_x = feature_map(x, w, kind, **params, **extra)
    phi_y = feature_map(y, w, kind, **params, **extra, role="key")
    assert phi_x.shape == (entry.features_per_projection * M,)
    assert float(phi_x @ phi_y) == pytest.approx(got, rel=1e-12, abs=1e-15)
    sign, logabs = log_estimate(x, y, w, kind, **params, **extra)
    assert sign * math.exp(logabs) == pytest.approx(got, rel=1e-10, abs=1e-15)
    assert entry.nonnegative == entry.feature_map.nonnegative
    if entry.nonnegative:
        assert np.all(phi_x >= 0)
        s = feature_map(x[None], w, kind, sum_normalize=True, **params)
        np.testing.assert_allclose(s[0], phi_x / phi_x.sum(), rtol=1e-12)
    else:
        with pytest.raises(ValueError, match="sum_normalize needs non-negative features"):
            feature_map(x[None], w, kind, sum_normalize=True, **params, **extra)


def check_monte_carlo(kind, ensemble, norms):
    """Literal and reduced Monte Carlo agree with the exact MSE (or with each other), |z| < 4."""
    x, y = _pair()
    entry = registry.entry("kind", kind)
    est = _estimator(kind, ensemble, norms)
    methods = ["reduced"] if est.supports.reduced else []
    if est.kind.feature_map is not None:
        methods.append("literal")
    if not methods:
        with pytest.raises(ValueError) as err:
            monte_carlo_mse(x, y, M, est, trials=100, method="reduced")
        _one_line(err)
        return
    results = {meth: monte_carlo_mse(x, y, M, est, trials=4000 if meth == "literal" else 20_000,
                                     seed=11, method=meth, proposal="plain")
               for meth in methods}
    for r in results.values():
        assert np.isfinite(r.mse) and r.stderr > 0
    if est.supports.exact_mse:
        for meth, r in results.items():
            assert r.mse_exact is not None and abs(r.z) < 4, (meth, r.mse, r.mse_exact, r.z)
    elif len(results) == 2:
        a, b = results["reduced"], results["literal"]
        z = (a.mse - b.mse) / math.hypot(a.stderr, b.stderr)
        assert abs(z) < 4, (a.mse, b.mse)
    else:  # one method and no theory: the bias is the estimate's, its mean is measured
        (r,) = results.values()
        assert r.mse_exact is None and entry.feature_map is not None


def check_estimator_entry(kind, ensemble, norms):
    """The battery on one kind x ensemble x norm law."""
    check_literal_map(kind, ensemble, norms)
    check_monte_carlo(kind, ensemble, norms)


def _attention_inputs(seed=2):
    rng = np.random.default_rng(seed)
    return (0.4 * rng.normal(size=(12, D)), 0.4 * rng.normal(size=(10, D)),
            rng.normal(size=(10, 3)))


def check_unbiased(kind):
    """Over independent draws of W, the literal estimate's mean is the kernel (|z| < 4)."""
    entry = registry.entry("kind", kind)
    if entry.feature_map is None:
        return
    x, y = _pair()
    est = _estimator(kind)
    draws, values = 600, []
    for t in range(draws):
        w = draw_kind_projections(M, D, kind, ensemble="orthogonal", norms="chi", seed=1000 + t)
        if entry.feature_map.two_roles and est.kind is entry:
            values.append(_two_map_estimate(est, x, y, w))
        else:
            phase = draw_phases(M, seed=t) if est.kind.random_phase else None
            extra = {"phase": phase} if phase is not None else {}
            values.append(float(estimate(x, y, w, est.kind.name, **_params(est.kind.name), **extra)))
    values = np.asarray(values)
    z = (values.mean() - math.exp(x @ y)) / (values.std(ddof=1) / math.sqrt(draws))
    assert abs(z) < 4, (kind, values.mean(), math.exp(x @ y))


def check_attention(kind):
    """favor_attention is the quadratic computation with the kind's features, or refuses with the reason."""
    entry = registry.entry("kind", kind)
    q, k, v = _attention_inputs()
    w = draw_kind_projections(M, D, kind, ensemble="orthogonal", seed=3)
    reason = preset("rfkernels").refusal(entry)
    if reason is not None:
        with pytest.raises(ValueError) as err:
            rfkernels.favor_attention(q, k, v, w, kind)
        _one_line(err)
        assert reason in str(err.value) or str(err.value) in reason
        return
    if entry.feature_map.two_roles:  # fitted on Q and K, or given: the two maps' features
        res = rfkernels.favor_attention(q, k, v, w, kind, **_params(kind))
        est = estimator(kind, d=D, **_params(kind))
        est = est.fitted_on(q, k) if est.needs_fit else est
        if est.kind is not entry or not est.supports.scalar_law:
            assert np.all(np.isfinite(res.output))
            return
        p = est.params.derf
        pq = entry.feature_map.features(q, w, p, "query", np)
        pk = entry.feature_map.features(k, w, p, "key", np)
    else:
        res = rfkernels.favor_attention(q, k, v, w, kind, **_params(kind))
        pq = feature_map(q, w, kind, **_params(kind))
        pk = feature_map(k, w, kind, **_params(kind), role="key")
    weights = pq @ pk.T
    want = (weights @ v) / weights.sum(axis=1)[:, None]
    np.testing.assert_allclose(res.output, want, rtol=1e-9, atol=1e-12)


def check_transformer(kind):
    """RandomFeatures is feature_map with projections drawn once, or refuses the kind in one line."""
    entry = registry.entry("kind", kind)
    x = np.random.default_rng(4).normal(size=(6, D)) * 0.3
    one_map = kind in rfkernels.features.mapped_kinds()  # one map serving queries and keys
    fitted = kind in rfkernels.features.fitted_map_kinds()  # one fitted map for every row
    params = _params(kind) if one_map else {}
    tr = rfkernels.RandomFeatures(kind=kind, n_components=2 * M, ensemble="orthogonal",
                                  random_state=0, **params)
    if fitted:
        phi = tr.fit_transform(x)
        assert tr.fitted_params_.fitted
        spec = estimator(kind, ensemble="orthogonal", d=D, params=tr.fitted_params_)
        np.testing.assert_array_equal(phi, rfkernels.features.fitted_features(x, tr.projections_,
                                                                              spec))
        np.testing.assert_allclose(tr.kernel(x), phi @ phi.T, rtol=1e-12)
        return
    if not one_map:
        with pytest.raises(ValueError, match=kind) as err:
            tr.fit(x)
        _one_line(err)
        return
    phi = tr.fit_transform(x)
    extra = {"phase": tr.random_offset_} if entry.random_phase else {}
    np.testing.assert_array_equal(phi, feature_map(x, tr.projections_, kind, A=tr.A_, **extra))


def check_diagnose(kind):
    """diagnose runs the kind (finite errors per draw) or refuses it with the entry's reason."""
    entry = registry.entry("kind", kind)
    q, k, v = _attention_inputs(5)
    kw = dict(m=[4], kinds=[kind], ensembles=["orthogonal"], draws=4, queries=4, pairs=16,
              first_order_queries=4, seed=0, workers=1)
    reason = entry.diagnose_reason or preset("rfkernels").refusal(entry)
    if reason is not None:
        with pytest.raises(ValueError) as err:
            diagnose(q, k, v, **kw)
        _one_line(err)
        return
    rows = diagnose(q, k, v, **kw).rows
    assert {r["kind"] for r in rows} == {kind}
    assert all(math.isfinite(r["attention_mse"]) and r["attention_mse"] >= 0 for r in rows)


def check_command_line(kind, capsys):
    """``rfkernels mse --kind KIND`` runs (|z| < 4 against theory) or exits 2 with the reason, one line."""
    x, y = _pair()
    argv = ["mse", "--kind", kind, "--d", str(D), "--m", str(M), "--norm-x", "0.4", "--norm-y",
            "0.3", "--trials", "4000", "--backend", "numpy", "--proposal", "plain", "--json",
            "--no-progress"]
    try:  # what the command line can build with no parameters: the kind alone, and one pair
        est = estimator(kind, d=D)
        if est.needs_fit:
            est.fitted_on(x[None], y[None])
        reason = None if est.supports.reduced else est.supports.reduced.reason  # the default method
    except ValueError as exc:
        reason = str(exc)
    code = main(argv)
    out, err = capsys.readouterr()
    if reason is None:
        assert code == 0, err
        found = json.loads(out)
        assert found["kind"] == kind
        assert found["z"] is None or abs(found["z"]) < 4
        assert (found["z"] is None) == (not est.with_size(m=M).supports.exact_mse)
    else:
        assert code == 2 and "Traceback" not in err and err.strip().count("\n") == 0, err
        # the first refusal met: the fit's, or (the default method) the reduced engine's
        try:
            reduced = estimator(kind, d=D).supports.reduced.reason
        except ValueError:  # the kind needs parameters the command line does not give
            reduced = None
        assert reason[:40] in err or (reduced is not None and reduced[:40] in err), err


def check_kind_entry(kind, capsys):
    """The battery on one kind: unbiasedness, attention, the transformer, diagnose, the command line."""
    check_unbiased(kind)
    check_attention(kind)
    check_transformer(kind)
    check_diagnose(kind)
    check_command_line(kind, capsys)


# ---------------------------------------------------------------------------
# Every registered estimator, and the toy kind
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind,ensemble,norms", COMBINATIONS)
def test_estimator_entry(kind, ensemble, norms):
    check_estimator_entry(kind, ensemble, norms)


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_kind_entry(kind, capsys):
    check_kind_entry(kind, capsys)


def test_the_battery_catches_a_kind_that_falls_through():
    """A kind whose literal map is another kind's (FAVOR+'s) fails the first check."""
    from dataclasses import replace

    toy = registry.entry("kind", TOY)
    registry.unregister("kind", TOY)
    registry.register("kind", replace(toy, feature_map=registry.entry("kind", "positive").feature_map))
    try:
        with pytest.raises(AssertionError):
            check_literal_map(TOY, "iid", "chi")
    finally:
        registry.unregister("kind", TOY)
        registry.register("kind", toy)
