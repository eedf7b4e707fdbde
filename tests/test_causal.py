"""Causal (prefix-sum) random-feature attention, diagnosed: the reference, the theory, positions."""

import csv
import json
import math

import numpy as np
import pytest

import rfkernels
from rfkernels import draw_kind_projections, draw_projections, favor_attention, feature_map, softmax_attention
from rfkernels.analysis import diagnose, synthetic_qkv
from rfkernels.analysis.attention_theory import attention_mse_first_order
from rfkernels.analysis.diagnosis import diagnose_kinds
from rfkernels.analysis.diagnosis.positions import (bucket_edges, prefix_uniform,
                                                    stratified_rows)
from rfkernels.commands.cli import main
from rfkernels.estimators import estimator, registry


def _head(L=24, d=4, sd=0.5, seed=0):
    rng = np.random.default_rng(seed)
    return (sd * rng.standard_normal((L, d)), sd * rng.standard_normal((L, d)),
            rng.standard_normal((L, 3)))


def _features(kind, q, k, w):
    """The kind's query and key features at W (a data-fitted kind fitted on q and k)."""
    entry = registry.entry("kind", kind)
    if entry.feature_map.two_roles:
        est = estimator(kind, d=q.shape[1]).fitted_on(q, k)
        value = est.kind.resolve(est.params, None)
        return (est.kind.feature_map.features(q, w, value, "query", np),
                est.kind.feature_map.features(k, w, value, "key", np))
    values = {} if entry.fit is None else entry.fit(q, k)
    return feature_map(q, w, kind, **values), feature_map(k, w, kind, **values, role="key")


@pytest.mark.parametrize("kind", diagnose_kinds())
def test_prefix_sums_are_the_masked_quadratic_computation_on_the_same_w(kind):
    q, k, v = _head()
    w = draw_kind_projections(16, 4, kind, ensemble="orthogonal", seed=1)
    entry = registry.entry("kind", kind)
    values = {} if entry.fit is None or entry.population else entry.fit(q, k)
    res = favor_attention(q, k, v, w, kind, causal=True, nonpositive="divide", **values)
    pq, pk = _features(kind, q, k, w)
    weights = np.tril(pq @ pk.T)
    want = (weights @ v) / weights.sum(axis=1)[:, None]
    np.testing.assert_allclose(res.output, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
def test_the_first_row_sees_one_key_and_returns_its_value(kind):
    q, k, v = _head(sd=2.0)
    w = draw_projections(8, 4, seed=3)
    out = favor_attention(q, k, v, w, kind, causal=True).output
    np.testing.assert_allclose(out[0], v[0], rtol=1e-14)
    np.testing.assert_allclose(softmax_attention(q, k, v, causal=True)[0], v[0], rtol=1e-15)


@pytest.mark.parametrize("kind", ["positive", "hyperbolic", "trig"])
def test_the_causal_theory_is_each_rows_own_prefix(kind):
    q, k, v = _head(L=14)
    causal = attention_mse_first_order(q, k, v, 8, kind, causal=True, normalisers=True)
    for i in range(14):
        one = attention_mse_first_order(q[i:i + 1], k[:i + 1], v[:i + 1], 8, kind).per_row[0]
        assert causal.per_row[i] == pytest.approx(one, rel=1e-12, abs=1e-300)
    assert causal.per_row[0] == 0.0 and causal.causal
    sub = attention_mse_first_order(q, k, v, 8, kind, causal=True, rows=[3, 9])
    np.testing.assert_allclose(sub.per_row, causal.per_row[[3, 9]], rtol=1e-12)
    assert sub.stderr is None and list(sub.rows) == [3, 9]


def test_causal_theory_refuses_unequal_lengths_and_bad_rows():
    q, k, v = _head()
    with pytest.raises(ValueError, match="L = L_k"):
        attention_mse_first_order(q[:5], k, v, 4, "positive", causal=True)
    with pytest.raises(ValueError, match="rows must be distinct query rows"):
        attention_mse_first_order(q, k, v, 4, "positive", rows=[30])
    with pytest.raises(ValueError, match="rows or queries"):
        attention_mse_first_order(q, k, v, 4, "positive", rows=[1], queries=2)


def test_monte_carlo_agrees_with_the_causal_first_order_theory_where_it_is_valid():
    q, k, v = _head(L=32, d=4, sd=0.25, seed=4)
    m, draws = 1024, 300  # at m = 256 the MSE's tail is heavy enough to read 14% low (z = -4.2)
    theory = attention_mse_first_order(q, k, v, m, "positive", causal=True, normalisers=True)
    assert math.sqrt(theory.normaliser_rel_var) < 0.1  # first order valid here
    exact = softmax_attention(q, k, v, causal=True)
    errs = np.array([np.mean((favor_attention(q, k, v, draw_projections(m, 4, seed=100 + t),
                                              "positive", causal=True).output - exact) ** 2)
                     for t in range(draws)])
    z = (errs.mean() - theory.mse) / (errs.std(ddof=1) / math.sqrt(draws))
    assert abs(z) < 4, (errs.mean(), theory.mse, z)


def test_rows_are_stratified_by_position_and_uniform_is_the_prefix_mean():
    edges = bucket_edges(1000)
    assert list(edges) == list(range(0, 1001, 100))
    rows = stratified_rows(1000, 50, np.random.default_rng(0))
    assert rows.size == 50 and np.all(np.diff(rows) > 0)
    assert np.all(np.bincount(rows // 100, minlength=10) == 5)
    assert list(stratified_rows(7, 50, np.random.default_rng(0))) == list(range(7))
    assert list(bucket_edges(4)) == [0, 1, 2, 3, 4]
    v = np.arange(8.0).reshape(4, 2)
    np.testing.assert_allclose(prefix_uniform(v), [[0, 1], [1, 2], [2, 3], [3, 4]])


@pytest.fixture(scope="module")
def causal_run():
    q, k, v = synthetic_qkv(L=60, d=8, heads=2)
    return q, k, v, diagnose(q, k, v, m=[8, 32], kinds=["positive", "trig"],
                             ensembles=["iid", "orthogonal"], draws=4, queries=30, pairs=10_000,
                             first_order_queries=10, floor=True, causal=True, seed=0, workers=1)


def test_diagnose_causal_reports_every_decile_per_head_and_pooled(causal_run):
    q, k, v, res = causal_run
    assert res.meta["causal"] and res.meta["attention"].startswith("causal")
    pos = res.positions
    per_cell = {}
    for row in pos:
        per_cell.setdefault((row["head"], row["kind"], row["ensemble"], row["m"]), []).append(row)
    assert len(per_cell) == 3 * 2 * 2 * 2  # heads 0, 1 and "all"
    for rows in per_cell.values():
        assert [r["bucket"] for r in rows] == list(range(10))
        assert rows[0]["keys_min"] == 1 and rows[-1]["keys_max"] == 60
    first = [r for r in pos if r["head"] == "all" and r["kind"] == "positive"
             and r["ensemble"] == "iid" and r["m"] == 32]
    assert all(r["first_order_mse"] is not None and r["relative_mse"] > 0 for r in first)
    assert all(r["first_order_reason"] for r in pos if r["ensemble"] == "orthogonal")
    advice = res.advice["positions"]
    assert {(a["kind"], a["ensemble"]) for a in advice} == {(k_, e) for k_ in ("positive", "trig")
                                                            for e in ("iid", "orthogonal")}
    assert all({"first 10%", "rest"} <= set(a) for a in advice)
    json.dumps(res.to_dict(), allow_nan=False)
    assert "## Error against position (causal attention)" in res.to_markdown()
    # the exact reference, the uniform baseline and the kernel-level pairs are causal
    head = res.heads[0]
    s = 8 ** -0.25
    exact = softmax_attention(s * q[0], s * k[0], v[0], causal=True)
    assert head["exact_mean_square"] == pytest.approx(float(np.mean(exact ** 2)), rel=1e-12)
    assert head["uniform_mse"] == pytest.approx(
        float(np.mean((exact - prefix_uniform(v[0])) ** 2)), rel=1e-12)
    assert head["pairs"] == 60 * 61 // 2 and head["all_pairs"]


def test_the_bidirectional_diagnosis_is_unchanged_by_the_causal_mode():
    q, k, v = synthetic_qkv(L=40, d=8, heads=1)
    kw = dict(m=[8], kinds=["positive"], ensembles=["iid"], draws=3, seed=0, workers=1)
    a, b = diagnose(q, k, v, **kw), diagnose(q, k, v, causal=False, **kw)
    assert a.rows == b.rows and a.positions == [] and not a.meta["causal"]


@pytest.mark.parametrize("kw, message", [
    (dict(presets=["xformers"]), "reproduce bidirectional attention only"),
    (dict(dtypes=["float32"]), "causal=True runs in float64 only"),
])
def test_diagnose_causal_refuses_what_it_does_not_cover(kw, message):
    q, k, v = synthetic_qkv(L=20, d=4, heads=1)
    with pytest.raises(ValueError, match=message):
        diagnose(q, k, v, m=[4], kinds=["positive"], causal=True, **kw)
    with pytest.raises(ValueError, match="L = L_k"):
        diagnose(q[..., :10, :], k, v, m=[4], kinds=["positive"], causal=True)


def test_the_command_writes_the_positions_and_says_causal(tmp_path, capsys):
    q, k, v = synthetic_qkv(L=30, d=4, heads=1)
    path = tmp_path / "qkv.npz"
    np.savez(path, q=q[0], k=k[0], v=v[0])
    out = tmp_path / "out"
    code = main(["diagnose", str(path), "--out", str(out), "--m", "4,8", "--kind", "positive",
                 "--ensemble", "iid", "--draws", "2", "--causal", "--workers", "1"])
    assert code == 0, capsys.readouterr().err
    with open(out / "diagnosis_positions.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["bucket"] for r in rows} == {str(b) for b in range(10)}
    sidecar = json.loads((out / "diagnosis.json").read_text())
    assert "diagnosis_positions.csv" in sidecar["files"]
    assert "--causal" in sidecar["provenance"]["command_line"]
    # the folder is this command's: a second causal run may write into it
    assert main(["diagnose", str(path), "--out", str(out), "--m", "4", "--kind", "positive",
                 "--ensemble", "iid", "--draws", "2", "--causal", "--workers", "1"]) == 0


@pytest.mark.parametrize("kind", ["positive", "trig", "data-tilted"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_at_some_rows_is_those_rows_of_the_whole(kind, causal):
    q, k, v = _head(L=300, d=6, seed=5)
    w = draw_projections(24, 6, seed=2)
    rows = np.sort(np.random.default_rng(0).choice(300, 37, replace=False))
    full = favor_attention(q, k, v, w, kind, causal=causal, nonpositive="divide")
    part = favor_attention(q, k, v, w, kind, causal=causal, nonpositive="divide", rows=rows)
    np.testing.assert_allclose(part.output, full.output[rows], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(part.denominators, full.denominators[rows], rtol=1e-12)


@pytest.mark.parametrize("rows, message", [([3, 1], "distinct and ascending"),
                                           ([], "non-empty 1-D"), ([300], r"in \[0, 300\)"),
                                           (np.array([1.5]), "row indices")])
def test_bad_rows_are_refused_in_one_line(rows, message):
    q, k, v = _head(L=300, d=6)
    with pytest.raises(ValueError, match=message) as err:
        favor_attention(q, k, v, draw_projections(4, 6, seed=0), "positive", rows=rows)
    assert "\n" not in str(err.value)


def _library_features(x, w, eps, shift):
    """A library's positive features: max shifts, epsilon added (rfkernels.presets, module notes)."""
    u = x @ w.T
    h = 0.5 * np.sum(x * x, axis=1, keepdims=True)
    c = u.max(axis=1, keepdims=True) if shift is None else shift
    return (np.exp(u - h - c) + eps) / np.sqrt(w.shape[0])


@pytest.mark.parametrize("name", ["performer-pytorch", "google-research"])
def test_the_libraries_causal_paths_are_their_prefix_sums_with_their_epsilons(name):
    from rfkernels.presets import preset

    entry = preset(name)
    q, k, v = _head(L=200, d=8, seed=6)
    w = draw_projections(32, 8, ensemble="orthogonal-unfixed-qr", seed=1)
    res = favor_attention(q, k, v, w, "positive", causal=True, preset=name)
    pq = _library_features(q, w, entry.epsilon, None)
    pk = _library_features(k, w, entry.epsilon, float(np.max(k @ w.T)))  # the whole sequence's
    weights = np.tril(pq @ pk.T)
    den = weights.sum(axis=1) + entry.cumsum_epsilon * pq.sum(axis=1)
    if entry.guard:
        den = den + 2 * entry.epsilon * (np.abs(den) <= entry.epsilon)
    np.testing.assert_allclose(res.output, (weights @ v) / den[:, None], rtol=1e-12)
    assert np.all(res.stabiliser_share > 0) and np.all(res.stabiliser_share < 1)
    rows = np.array([0, 5, 77, 199])
    part = favor_attention(q, k, v, w, "positive", causal=True, preset=name, rows=rows)
    np.testing.assert_allclose(part.output, res.output[rows], rtol=1e-12)
    np.testing.assert_allclose(part.stabiliser_share, res.stabiliser_share[rows], rtol=1e-12)
    # the first row sees one key: google-research's epsilon is in both its features, so the
    # ratio is that key's value; performer-pytorch's cumsum epsilon is in the normaliser only
    moved = float(np.max(np.abs(res.output[0] - v[0])))
    assert (moved > 1e-6) if entry.cumsum_epsilon else moved < 1e-15


def test_a_preset_without_a_causal_path_refuses_it():
    q, k, v = _head()
    with pytest.raises(ValueError, match="only bidirectional attention is reproduced"):
        favor_attention(q, k, v, draw_projections(8, 4, seed=0), "positive", causal=True,
                        preset="xformers")


def test_diagnose_causal_runs_the_libraries_causal_paths():
    q, k, v = synthetic_qkv(L=64, d=8, heads=1)
    res = diagnose(q, k, v, m=[16], kinds=["positive"], ensembles=["orthogonal-unfixed-qr"],
                   presets=["rfkernels", "performer-pytorch", "google-research"], draws=3,
                   causal=True, seed=0, workers=1)
    share = {r["preset"]: r["stabiliser_share_mean"] for r in res.summary}
    assert share["rfkernels"] is None and 0 < share["google-research"] < share["performer-pytorch"]
    assert {r["preset"] for r in res.positions} == set(share)


def test_a_draw_that_fails_is_infinite_in_every_position_not_zero(monkeypatch):
    import rfkernels.analysis.diagnosis.study as study

    real, calls = study.view_attention, []

    def first_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise FloatingPointError("overflow")
        return real(*args, **kwargs)

    monkeypatch.setattr(study, "view_attention", first_fails)
    q, k, v = synthetic_qkv(L=40, d=4, heads=1)
    res = diagnose(q, k, v, m=[4], kinds=["positive"], ensembles=["iid"], draws=3, causal=True,
                   seed=0, workers=1)
    assert res.rows[0]["attention_mse"] == math.inf
    head = [r for r in res.positions if r["head"] == 0]
    assert all(r["attention_mse"] == math.inf and r["relative_mse"] is None for r in head)
