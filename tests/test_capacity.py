"""Memory capacity of linear attention (issue 13): the rank argument, crosstalk, the CLI."""

import json
import math

import numpy as np
import pytest
from rfkernels.analysis import capacity, parse_map
from rfkernels.analysis.capacity import (
    FeatureMapSpec,
    least_squares_error,
    signal_to_crosstalk,
    sum_rule_error,
)

from rfkernels import draw_projections, feature_map
from rfkernels.commands.cli import main


def _pool(seed, t, n, d_k, d_v, scale=1.0):
    """The keys and values of trial t, as the module docstring documents them."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0, t)))
    return rng.standard_normal((n, d_k)) * (scale / math.sqrt(d_k)), rng.standard_normal((n, d_v))


def test_seed_memory_example_signal_and_crosstalk():
    """Section 2.3: G = [[5, 4], [4, 5]]: readout (5, 4), signal-to-crosstalk 5/4."""
    phi = feature_map(np.array([[0.0, 1.0], [1.0, 0.0]]), None, "elu1")
    gram = phi @ phi.T
    np.testing.assert_array_equal(gram, [[5, 4], [4, 5]])
    assert signal_to_crosstalk(gram)[1] == pytest.approx(1.25, rel=1e-15)
    assert np.isinf(signal_to_crosstalk(gram)[0])  # one stored pair: no crosstalk
    v = np.eye(2)
    # rescaled readout S phi(k_i) / G_ii = v_i + (4/5) v_j: relative error 4/5
    assert sum_rule_error(gram, v, 2) == pytest.approx(0.8, rel=1e-15)
    # least squares stores both exactly: rank 2
    err, rank = least_squares_error(phi, v)
    assert rank == 2 and err < 1e-14


MAPS = ("elu1", "identity", "dpfp:1", "dpfp:2", "positive:12", "positive:20:iid", "hyperbolic:6")


def test_least_squares_fails_exactly_beyond_the_rank():
    d_k, seed = 8, 4
    n_values = list(range(1, 41))
    res = capacity(d_k, n_values, MAPS, trials=2, seed=seed)
    for a, spec in enumerate(parse_map(m) for m in MAPS):
        rows = [r for r in res.rows if r["map"] == spec.name]
        fail = res.failure(spec)
        for t in range(2):
            keys, _ = _pool(seed, t, 40, d_k, d_k)
            w = None
            if spec.m is not None:
                from rfkernels import ENSEMBLES, KINDS

                key = (1, t, KINDS.index(spec.kind), spec.m, ENSEMBLES.index(spec.ensemble))
                w = draw_projections(spec.m, d_k, ensemble=spec.ensemble,
                                     seed=np.random.SeedSequence(seed, spawn_key=key))
            phi = feature_map(keys, w, spec.kind, nu=spec.nu)
            ranks = [np.linalg.matrix_rank(phi[:n]) for n in n_values]
            first = next((n for n, r in zip(n_values, ranks) if n > r), None)
            assert fail["ls_fail"][t] == first, (spec.name, t)
            if t == 0 and first is not None:
                assert first == min(spec.d_dot(d_k), 40) + 1 or first <= spec.d_dot(d_k)
        # every row: exact (rounding level) at n <= rank, clearly wrong beyond
        for r in rows:
            if r["n"] <= r["ls_rank_mean"] - 1e-9:
                assert r["ls_error_max"] < 1e-12
        assert all(r["ls_rank_mean"] <= spec.d_dot(d_k) for r in rows)
    # the rank argument: n <= d_dot is stored exactly, d_dot + 1 is not
    assert res.failure("elu1")["ls_fail"] == [9, 9]
    assert res.failure("identity")["ls_fail"] == [9, 9]
    # DPFP features are sparse (each is 0 for 3/4 of the keys): with few keys a feature can be 0
    # for all of them, so the rank, and the failure, can come before d_dot (trial 1 here: 16)
    assert res.failure("dpfp:1")["ls_fail"] == [17, 16]
    assert res.failure("dpfp:2")["ls_fail"] == [33, 33]
    assert res.failure("positive:12")["ls_fail"] == [13, 13]
    assert res.failure("positive:20:iid")["ls_fail"] == [21, 21]
    assert res.failure("hyperbolic:6")["ls_fail"] == [13, 13]


def test_failure_points_at_d_k_64_match_d_dot():
    """The source's d_dot at d_k = 64 (64, 128, 256, 384; FAVOR+ m): least squares fails at d_dot + 1."""
    maps = ("elu1", "dpfp:1", "dpfp:2", "dpfp:3", "positive:64", "positive:128")
    res = capacity(64, [386], maps, trials=1, seed=0)
    got = {f["map"]: f["ls_fail"][0] for f in res.failures}
    assert got == {"elu1": 65, "dpfp:1": 129, "dpfp:2": 257, "dpfp:3": 385,
                   "positive:64:orthogonal": 65, "positive:128:orthogonal": 129}
    # the sum rule fails far earlier with random keys: ELU+1 features share a large mean
    assert res.failure("elu1")["sum_fail"][0] <= 4
    assert all(f["sum_fail"][0] < f["d_dot"] for f in res.failures)


def test_signal_to_crosstalk_is_the_gram_ratio_and_the_sum_rule_readout():
    d_k, seed = 6, 2
    res = capacity(d_k, [2, 5, 30], ("dpfp:2", "positive:16"), trials=1, seed=seed)
    keys, values = _pool(seed, 0, 30, d_k, d_k)
    phi = feature_map(keys, None, "dpfp", nu=2)
    for r in (r for r in res.rows if r["map"] == "dpfp:2"):
        g = phi[: r["n"]] @ phi[: r["n"]].T
        diag = np.diag(g)
        off = g - np.diag(diag)
        per_key = diag / np.sqrt(np.sum(off**2, axis=1))
        assert r["scr_mean"] == pytest.approx(np.median(per_key), rel=1e-12)
        readout = (g @ values[: r["n"]]) / diag[:, None]
        want = np.linalg.norm(readout - values[: r["n"]]) / np.linalg.norm(values[: r["n"]])
        assert r["sum_error_mean"] == pytest.approx(want, rel=1e-12)
    scr = signal_to_crosstalk(phi @ phi.T)
    below = np.flatnonzero(scr[1:] < 1)
    assert res.failure("dpfp:2")["sum_fail"][0] == (below[0] + 2 if below.size else None)


def test_favor_sum_rule_tends_to_the_softmax_kernel_whatever_m():
    """As m grows G -> exp(K K^T): the sum-rule SCR is the kernel's, not a function of m."""
    d_k, seed, n = 16, 1, 64
    keys, _ = _pool(seed, 0, n, d_k, d_k)
    sm = np.exp(keys @ keys.T)
    want = signal_to_crosstalk(sm)[[7, 31, 63]]
    res = capacity(d_k, [8, 32, 64], ("positive:512", "positive:8192"), trials=1, seed=seed,
                   find_failures=False)
    # the estimate's relative error is about 1/sqrt(m): measured deviations 9-24% at m = 512,
    # 3-8% at m = 8192 (seeds 1-3)
    for name, rel in (("positive:512:orthogonal", 0.4), ("positive:8192:orthogonal", 0.15)):
        got = [r["scr_mean"] for r in res.rows if r["map"] == name]
        np.testing.assert_allclose(got, want, rtol=rel)


def test_parse_map_grammar():
    assert parse_map("elu1") == FeatureMapSpec("elu1")
    assert parse_map("dpfp:3") == FeatureMapSpec("dpfp", nu=3)
    assert parse_map("positive:128") == FeatureMapSpec("positive", m=128, ensemble="orthogonal")
    assert parse_map("positive:128:iid").label == "FAVOR+ m=128 iid"
    assert parse_map("dpfp:2").label == "DPFP-2" and parse_map("dpfp:2").d_dot(64) == 256
    for bad, match in (("dpfp", "unknown feature map"), ("dpfp:x", "nu must be an integer"),
                       ("positive", "unknown feature map"), ("positive:0", "m must be >= 1"),
                       ("positive:4:haar", "ensemble must be one of"), ("relu", "unknown")):
        with pytest.raises(ValueError, match=match):
            parse_map(bad)
    with pytest.raises(ValueError, match="must not repeat"):
        capacity(8, [4], ("dpfp:1", "dpfp:1"))
    with pytest.raises(ValueError, match="nu must be between 1 and 2d - 1 = 15"):
        capacity(8, [4], ("dpfp:16",))
    with pytest.raises(ValueError, match="fail_tol"):
        capacity(8, [4], ("elu1",), fail_tol=2.0)


def _strict(text):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_cli_capacity_table_json_and_errors(capsys):
    assert main(["capacity", "--d-k", "8", "--n", "1,8,9,40", "--map", "elu1,dpfp:1",
                 "--map", "positive:12", "--trials", "2"]) == 0
    out = capsys.readouterr().out
    assert "least squares" in out and "DPFP-1" in out and "FAVOR+ m=12" in out
    assert main(["capacity", "--d-k", "8", "--n", "1,8,20", "--map", "elu1,dpfp:2",
                 "--trials", "1", "--json"]) == 0
    data = _strict(capsys.readouterr().out)
    fails = {f["map"]: f for f in data["failures"]}
    assert fails["elu1"]["ls_fail"] == [9]
    assert fails["dpfp:2"]["ls_fail"] == [None]  # d_dot = 32: no failure up to n = 20
    assert "did not fail for n up to 20" in fails["dpfp:2"]["null_reasons"]["ls_fail[0]"]
    row = data["rows"][0]
    assert row["n"] == 1 and row["scr_mean"] is None and "no crosstalk" in row["null_reasons"]["scr_mean"]
    for argv, match in ((["--map", "dpfp:99"], "nu must be between"),
                        (["--map", "nope"], "unknown feature map 'nope'"),
                        (["--key-scale", "inf"], "key_scale must be a positive finite number"),
                        (["--trials", "0"], "trials")):
        assert main(["capacity", "--d-k", "8", "--n", "4", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and match in err and "Traceback" not in err


def test_capacity_figure_data_shows_the_rank_limit():
    from rfkernels.figures import figure_module

    data = figure_module("capacity").compute(quick=True, seed=0)
    fails = {f["map"]: f for f in data["failures"]}
    assert fails["elu1"]["ls_fail_median"] == 17  # d_k = 16 in the quick run
    assert fails["positive:32:orthogonal"]["ls_fail_median"] == 33
    assert fails["softmax"]["ls_fail_median"] is None and fails["softmax"]["d_dot"] is None
