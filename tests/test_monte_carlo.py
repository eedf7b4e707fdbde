"""Tests of the Monte Carlo engine (rfkernels.analysis.monte_carlo).

Statistical checks use fixed seeds and |z| < 4 from standard errors, on
geometries with tame tails (|x + y|^2 or |x - y|^2 = 0.5, where the squared
errors have a finite variance; see MATH.md, "Monte Carlo error is
heavy-tailed"). Reproducibility checks are exact.
"""

import json
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest
from rfkernels.analysis import (
    MonteCarloBatch,
    monte_carlo_mse,
    pareto_k_hat,
    trial_estimates,
)
from scipy import stats

from rfkernels import engine, rng, theory
from rfkernels.backends import cupy_available
from rfkernels.commands.cli import main

KINDS = ("positive", "hyperbolic", "trig")
CASES = [(e, n) for e in ("iid", "orthogonal") for n in ("chi", "fixed")]
CASE_IDS = [f"{e}-{n}" for e, n in CASES]

# d = 8, |x| = |y| = 0.5 at a right angle: |x + y|^2 = |x - y|^2 = 0.5 (tame tails);
# m = 12 makes one full orthogonal block and one partial block of 4.
D, M = 8, 12
X, Y = theory.pair(D, 0.5, 0.5, np.pi / 2)


def _two_sample_z(a, b):
    return (a.mse - b.mse) / np.hypot(a.stderr, b.stderr)


# ---------------------------------------------------------------------------
# Statistics: reduced == literal, both == theory
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ensemble, norms", CASES, ids=CASE_IDS)
def test_reduced_agrees_with_literal_and_theory(kind, ensemble, norms):
    red = monte_carlo_mse(X, Y, M, kind, ensemble=ensemble, norms=norms, trials=200_000,
                          seed=11, backend="numba", proposal="plain")
    lit = monte_carlo_mse(X, Y, M, kind, ensemble=ensemble, norms=norms, trials=5_000,
                          seed=12, method="literal")
    assert red.tail_ok and lit.tail_ok
    assert abs(_two_sample_z(red, lit)) < 4
    exact = theory.exact_mse(X, Y, M, kind, ensemble=ensemble, norms=norms)
    assert red.mse_exact == pytest.approx(exact, rel=1e-14)
    assert abs(red.z) < 4 and abs(lit.z) < 4
    # the error bars are tight enough for these checks to mean something
    assert red.stderr < 0.01 * exact and lit.stderr < 0.05 * exact


@pytest.mark.parametrize("ensemble, norms", CASES, ids=CASE_IDS)
def test_numpy_backend_matches_theory_beyond_one_block(ensemble, norms):
    # m = 20 > 2d: two full blocks and a partial one, an odd number of normal pairs
    x, y = theory.pair(6, 0.6, 0.4, 2.0)
    r = monte_carlo_mse(x, y, 19, "positive", ensemble=ensemble, norms=norms, trials=60_000,
                        seed=5, proposal="plain")
    assert r.tail_ok and abs(r.z) < 4


def test_bias_zero_for_haar_nonzero_for_unfixed_qr():
    d = m = 16
    u = np.full(d, 1.0 / np.sqrt(d))  # |x + y| = 1 along (1, ..., 1)/sqrt(d)
    x = y = u / 2
    haar = monte_carlo_mse(x, y, m, "positive", ensemble="orthogonal", trials=3_000, seed=3,
                           method="literal")
    bad = monte_carlo_mse(x, y, m, "positive", ensemble="orthogonal-unfixed-qr", trials=3_000,
                          seed=3, method="literal")
    assert abs(haar.bias_z) < 4
    assert bad.bias_z < -8  # about -14% of SM (see draw_projections' notes)
    assert bad.mse_exact is None and bad.z is None
    # fixed norms are biased by design: E = Λ 0F1(; d/2; d|u|²/4) instead of SM
    fixed = monte_carlo_mse(X, Y, M, "positive", ensemble="orthogonal", norms="fixed",
                            trials=400_000, seed=4, backend="numba", proposal="plain")
    assert fixed.bias_z < -4


def test_unbiased_reduced_estimates():
    for kind in KINDS:
        r = monte_carlo_mse(X, Y, M, kind, ensemble="orthogonal", trials=200_000, seed=6,
                            backend="numba", proposal="plain")
        assert abs(r.bias_z) < 4
        assert r.mean_estimate == pytest.approx(r.sm, rel=0.01)


def test_scalar_projection_laws():
    key = rng.key_from_seed(17)
    t = engine.trial_counters(0, 20_000)
    d = 6
    # a full block of fixed-norm orthogonal rows: the p_i are sqrt(d) times all d
    # coordinates of one unit vector, so sum p_i^2 = d exactly
    p = engine.scalar_projections(key, t, d, d, ensemble="orthogonal", norms="fixed")
    np.testing.assert_allclose(np.sum(p * p, axis=0), d, rtol=1e-13)
    # chi norms: every p_i is N(0, 1); within a block uncorrelated, across trials independent
    for ensemble in ("iid", "orthogonal"):
        p = engine.scalar_projections(key, t, 9, d, ensemble=ensemble, norms="chi")
        assert p.shape == (9, t.size)
        for row in (0, 5, 6, 8):  # first block, its last row, the partial block
            assert stats.kstest(p[row], "norm").pvalue > 1e-4
        assert abs(np.corrcoef(p[0], p[1])[0, 1]) * np.sqrt(t.size) < 4
        if ensemble == "iid":  # independent, not merely uncorrelated
            assert abs(np.corrcoef(p[0] ** 2, p[1] ** 2)[0, 1]) * np.sqrt(t.size) < 4
    # orthogonal rows compete for the unit vector: their squares are negatively correlated
    p = engine.scalar_projections(key, t, d, d, ensemble="orthogonal", norms="fixed")
    assert np.corrcoef(p[0] ** 2, p[1] ** 2)[0, 1] < -0.1
    with pytest.raises(ValueError, match="ensemble must be one of 'iid', 'orthogonal'"):
        engine.scalar_projections(key, t, 4, 4, ensemble="orthogonal-unfixed-qr")
    with pytest.raises(ValueError, match=r"trial indices must be below 2\*\*40"):
        engine.trial_counters(2**40 - 1, 2)


# ---------------------------------------------------------------------------
# Reproducibility
# ---------------------------------------------------------------------------

SHAPES = [(5, 8), (13, 4), (7, 1), (16, 16)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ensemble, norms", CASES, ids=CASE_IDS)
def test_numpy_equals_numba_element_by_element(kind, ensemble, norms):
    for m, d in SHAPES:
        x, y = theory.pair(d, 0.7, 0.5, 0.0 if d == 1 else 1.0)
        kw = {"ensemble": ensemble, "norms": norms, "trials": 600, "seed": 21, "start": 2**33}
        a = trial_estimates(x, y, m, kind, backend="numpy", **kw)
        b = trial_estimates(x, y, m, kind, backend="numba", **kw)
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14 * np.max(np.abs(a)))
        if kind != "trig":  # same operations in the same order: the same bits
            np.testing.assert_array_equal(b, a)


def test_numba_one_and_two_threads_identical():
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("Numba has a single thread here")
    before = numba.get_num_threads()
    out = {}
    try:
        for threads in (1, 2):
            numba.set_num_threads(threads)
            est = [trial_estimates(X, Y, M, "positive", ensemble=e, norms=n, trials=5_000,
                                   seed=8, backend="numba") for e, n in CASES]
            res = monte_carlo_mse(X, Y, M, "hyperbolic", ensemble="orthogonal", trials=300_000,
                                  seed=8, backend="numba", chunk=70_000, proposal="plain")
            out[threads] = (est, res)
    finally:
        numba.set_num_threads(before)
    for a, b in zip(out[1][0], out[2][0]):
        np.testing.assert_array_equal(a, b)
    r1, r2 = out[1][1], out[2][1]
    assert (r1.mse, r1.stderr, r1.bias, r1.tail.k_hat) == (r2.mse, r2.stderr, r2.bias, r2.tail.k_hat)


def test_stale_kernel_cache_is_flushed(tmp_path):
    # Numba only watches the kernel's own file; edits to the inlined generator must flush it
    from rfkernels.engine import cpu as _mc_numba

    class FakeCache:
        _cache_path = str(tmp_path)
        flushed = 0

        def flush(self):
            self.flushed += 1

    class FakeDispatcher:
        _cache = FakeCache()

    fake = FakeDispatcher()
    _mc_numba._flush_if_dependencies_changed(fake)  # no stamp yet: flush, record
    _mc_numba._flush_if_dependencies_changed(fake)  # same sources: keep
    assert fake._cache.flushed == 1
    (tmp_path / "cpu.dependencies.sha256").write_text("stale\n")
    _mc_numba._flush_if_dependencies_changed(fake)
    assert fake._cache.flushed == 2


def test_chunking_changes_nothing():
    kw = {"ensemble": "orthogonal", "trials": 40_000, "seed": 9, "proposal": "plain"}
    ref = monte_carlo_mse(X, Y, M, "positive", backend="numba", **kw)
    for backend, chunk in (("numba", 997), ("numba", 40_000), ("numpy", 3_001)):
        r = monte_carlo_mse(X, Y, M, "positive", backend=backend, chunk=chunk, **kw)
        assert r.mse == pytest.approx(ref.mse, rel=1e-12)
        assert r.stderr == pytest.approx(ref.stderr, rel=1e-10)
        assert r.bias == pytest.approx(ref.bias, rel=1e-9, abs=1e-15)
        assert r.tail.k_hat == ref.tail.k_hat  # the same largest squared errors, exactly
        assert r.tail.max_share == pytest.approx(ref.tail.max_share, rel=1e-12)
    # any window of trials is the same numbers
    whole = trial_estimates(X, Y, M, "trig", trials=50, seed=9, backend="numba")
    part = trial_estimates(X, Y, M, "trig", trials=20, seed=9, backend="numba", start=17)
    np.testing.assert_array_equal(part, whole[17:37])
    lit = trial_estimates(X, Y, M, "positive", trials=8, seed=9, method="literal")
    np.testing.assert_array_equal(
        trial_estimates(X, Y, M, "positive", trials=3, seed=9, method="literal", start=4), lit[4:7]
    )


def test_seed_provenance_regenerates_the_run():
    child = np.random.SeedSequence(123).spawn(4)[2]
    r = monte_carlo_mse(X, Y, M, "positive", trials=5_000, seed=child, backend="numba")
    assert r.seed_entropy == 123 and r.seed_spawn_key == (2,)
    again = monte_carlo_mse(X, Y, M, "positive", trials=5_000, backend="numba",
                            seed=np.random.SeedSequence(r.seed_entropy, spawn_key=r.seed_spawn_key))
    assert again.mse == r.mse
    other = monte_carlo_mse(X, Y, M, "positive", trials=5_000, seed=124, backend="numba")
    assert other.mse != r.mse
    assert r.generator == "philox4x32-10"
    d = r.to_dict()
    json.dumps(d)  # serialisable
    assert d["seed_spawn_key"] == [2] and d["tail_ok"] is True and isinstance(d["ci95"], list)


def test_batch_matches_single_runs():
    xs = np.stack([X, X, 0.5 * X])
    ys = np.stack([Y, -Y, Y])
    for method, trials in (("reduced", 50_000), ("literal", 2_000)):
        b = monte_carlo_mse(xs, ys, M, "positive", ensemble="orthogonal", trials=trials,
                                  seed=5, method=method)
        assert isinstance(b, MonteCarloBatch) and len(b) == 3
        first = monte_carlo_mse(X, Y, M, "positive", ensemble="orthogonal", trials=trials,
                                seed=5, method=method)
        assert b[0].mse == first.mse and b[0].pair == 0 and b[2].pair == 2
        assert [r.mse_exact for r in b] == pytest.approx(
            theory.exact_mse(xs, ys, M, "positive", ensemble="orthogonal"), rel=1e-14)
        assert np.all(np.abs(b.z.astype(float)) < 4)
        assert b.tail_ok.all()
    # reduced pairs are independent streams: identical pairs give different numbers
    b = monte_carlo_mse(np.stack([X, X]), np.stack([Y, Y]), M, "trig", trials=1_000, seed=1)
    assert b[0].mse != b[1].mse


def test_progress_reports_every_chunk():
    calls = []
    monte_carlo_mse(X, Y, M, "positive", trials=5_000, chunk=1_000, backend="numba",
                    progress=lambda done, total: calls.append((done, total)))
    assert calls == [(k * 1000, 5000) for k in range(1, 6)]
    calls.clear()
    monte_carlo_mse(np.stack([X, X]), np.stack([Y, Y]), M, "positive", trials=30,
                          chunk=10, method="literal",
                          progress=lambda done, total: calls.append((done, total)))
    assert calls == [(20, 60), (40, 60), (60, 60)]


# ---------------------------------------------------------------------------
# Tail diagnostic and edge cases
# ---------------------------------------------------------------------------


def test_tail_flags_heavy_case_not_tame_case():
    heavy_x, heavy_y = theory.pair(8, 1.0, 1.0, 0.0)  # |x + y|^2 = 4
    heavy = monte_carlo_mse(heavy_x, heavy_y, 4, "positive", trials=200_000, seed=2, backend="numba",
                            proposal="plain")
    assert not heavy.tail_ok and heavy.tail.k_hat > 0.7
    tame = monte_carlo_mse(X, Y, 4, "positive", trials=200_000, seed=2, backend="numba", proposal="plain")
    assert tame.tail_ok and tame.tail.k_hat < 0.4
    assert tame.tail.max_share < 0.01 < heavy.tail.max_share
    assert tame.tail.n_tail == int(np.ceil(3 * np.sqrt(200_000)))
    # trig errors are bounded: no heavy tail at all
    trig_x, trig_y = theory.pair(8, 1.0, 1.0, np.pi / 2)  # |x - y|^2 = 2
    trig = monte_carlo_mse(trig_x, trig_y, 4, "trig", trials=50_000, seed=2, backend="numba")
    assert trig.tail_ok and trig.tail.k_hat < 0.2


def test_pareto_k_hat_known_shapes():
    for shape in (0.7, 0.3, -0.2):
        v = stats.genpareto.rvs(shape, size=100_000, random_state=1)
        assert pareto_k_hat(v) == pytest.approx(shape, abs=0.1)
    assert pareto_k_hat(np.random.default_rng(0).exponential(size=100_000)) == pytest.approx(0, abs=0.1)
    with pytest.raises(ValueError, match="enough samples"):
        pareto_k_hat([1.0, 2.0, 3.0])


def test_exact_estimator_has_zero_error_and_no_tail():
    # x = -y: u = 0, every positive estimate equals SM exactly
    r = monte_carlo_mse(X, -X, M, "positive", ensemble="orthogonal", trials=1_000, seed=0,
                        backend="numba")
    assert r.mse == 0.0 and r.stderr == 0.0 and r.mse_exact == 0.0
    assert r.z is None and r.tail_ok and "exact" in r.tail.note


def test_unreached_tail_is_flagged():
    # |x + y|^2 = 400: the MSE comes from projections beyond 2|x + y| = 40 sigma, which no
    # sample reaches; the estimates all look alike and the sample MSE is off by e^400
    x, y = theory.pair(16, 10.0, 10.0, 0.0)
    r = monte_carlo_mse(x, y, 16, "positive", ensemble="orthogonal", trials=2_000, seed=0,
                        backend="numba", proposal="plain")
    assert r.mse < 1e-100 * r.mse_exact
    assert not r.tail_ok and r.tail.reach < 1e-300 and "reach" in r.tail.note
    # the tame case reaches it plenty of times; trig has no such region
    tame = monte_carlo_mse(X, Y, M, "hyperbolic", trials=10_000, seed=0, backend="numba", proposal="plain")
    assert tame.tail.reach == pytest.approx(
        10_000 * M * 2 * stats.norm.sf(2 * np.sqrt(0.5)), rel=1e-12)
    assert monte_carlo_mse(X, Y, M, "trig", trials=100, seed=0).tail.reach is None


def test_few_trials_flag_the_tail():
    r = monte_carlo_mse(X, Y, M, "positive", trials=10, seed=0, proposal="plain")
    assert r.trials == 10 and not r.tail_ok and np.isnan(r.tail.k_hat)
    assert r.to_dict()["k_hat"] is None


def test_large_inputs_stay_finite_or_raise():
    # SM = e^50: estimates are accumulated relative to SM, results scaled back in log space
    x, y = theory.pair(4, 5.0, 5.0, np.pi / 2 - 2.0 / 25.0)
    r = monte_carlo_mse(x, y, 4, "positive", trials=20_000, seed=0, backend="numba", proposal="plain")
    assert np.isfinite(r.mse) and r.mse > 0
    with pytest.raises(FloatingPointError, match="overflows float64"):
        big_x, big_y = theory.pair(4, 30.0, 30.0, 0.0)
        monte_carlo_mse(big_x, big_y, 4, "positive", trials=100)


# ---------------------------------------------------------------------------
# Bad input: clear errors before any work
# ---------------------------------------------------------------------------


def _never(done, total):
    raise AssertionError("work started")


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"trials": 1}, ValueError, r"trials must be an integer >= 2"),
    ({"trials": 2.5}, TypeError, r"trials must be an integer"),
    ({"trials": "100"}, TypeError, r"trials must be an integer"),
    ({"backend": "torch"}, ValueError, r"backend must be one of 'numpy', 'numba', 'cupy'"),
    ({"method": "exact"}, ValueError, r"method must be one of 'reduced', 'literal'"),
    ({"kind": "cosine"}, ValueError, r"kind must be one of"),
    ({"ensemble": "halton"}, ValueError, r"ensemble must be one of"),
    ({"norms": "unit"}, ValueError, r"norms must be one of 'chi', 'fixed', 'antithetic'"),
    ({"ensemble": "orthogonal-unfixed-qr"}, ValueError, r"use method='literal'"),
    ({"m": 0}, ValueError, r"m must be an integer >= 1"),
    ({"chunk": 0}, ValueError, r"chunk must be an integer >= 1"),
    ({"seed": -3}, ValueError, r"seed must be a non-negative integer"),
    ({"seed": 1.5}, TypeError, r"seed must be None, a non-negative int"),
    ({"progress": 5}, TypeError, r"progress must be a callable"),
    ({"x": [0.1, np.nan, 0.0]}, ValueError, r"x must be finite"),
    ({"x": np.ones((2, 3))}, ValueError, r"y must be a 2-D array"),  # x (n, d): a batch
    ({"x": np.ones((2, 2, 3))}, ValueError, r"x must be a 1-D vector of shape \(d,\)"),
    ({"y": np.ones(4)}, ValueError, r"dimension mismatch: x has d=3, y has d=4"),
])
def test_bad_input(kwargs, exc, match):
    args = {"x": np.full(3, 0.2), "y": np.full(3, 0.1), "m": 4, "kind": "positive",
            "trials": 100, "progress": _never}
    args.update(kwargs)
    x, y, m, kind = args.pop("x"), args.pop("y"), args.pop("m"), args.pop("kind")
    with pytest.raises(exc, match=match):
        monte_carlo_mse(x, y, m, kind, **args)


def test_bad_batch_input():
    with pytest.raises(ValueError, match="same number of rows"):
        monte_carlo_mse(np.ones((3, 2)), np.ones((2, 2)), 4, "trig", trials=10)
    with pytest.raises(ValueError, match=r"y must be a 2-D array"):
        monte_carlo_mse(np.ones((2, 3)), np.ones(3), 4, "trig", trials=10)


@pytest.mark.skipif(cupy_available(), reason="CuPy and a device are present")
def test_cupy_missing_is_a_clear_error():
    with pytest.raises(ImportError, match=r"rfkernels\[gpu\]"):
        monte_carlo_mse(X, Y, M, "positive", trials=100, backend="cupy", progress=_never)


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def test_cli_json(capsys):
    argv = ["mse", "--d", "8", "--m", "6", "--norm-x", "0.5", "--norm-y", "0.5", "--angle", "1.5",
            "--kind", "positive", "--ensemble", "orthogonal", "--trials", "2e4", "--seed", "3",
            "--backend", "numba", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("mse_mc", "stderr", "mse_exact", "mse_lemma2", "mse_theorem2", "z", "bias",
                "trials", "tail_ok", "k_hat", "seed_entropy", "ci95"):
        assert key in out, key
    x, y = theory.pair(8, 0.5, 0.5, 1.5)
    assert out["trials"] == 20_000 and out["seed_entropy"] == 3
    assert out["mse_lemma2"] == pytest.approx(float(theory.lemma2_mse(x, y, 6, "positive")), rel=1e-14)
    assert out["mse_theorem2"] == pytest.approx(float(theory.theorem2_bound(x, y, 6)), rel=1e-14)
    assert out["mse_exact"] == pytest.approx(
        float(theory.exact_mse(x, y, 6, "positive", ensemble="orthogonal")), rel=1e-14)
    r = monte_carlo_mse(x, y, 6, "positive", ensemble="orthogonal", trials=20_000, seed=3)
    assert out["mse_mc"] == pytest.approx(r.mse, rel=1e-12)  # numba == numpy
    assert out["tail_ok"] is True and abs(out["z"]) < 4


def test_cli_text_and_errors(capsys):
    assert main(["mse", "--d", "4", "--m", "3", "--trials", "5000", "--norms", "fixed",
                 "--kind", "trig", "--backend", "numpy", "--method", "literal"]) == 0
    text = capsys.readouterr().out
    assert "Monte Carlo" in text and "exact" in text and "Lemma 2 (iid)          n/a" in text
    with pytest.raises(SystemExit) as exc:  # the CLI grammar refuses a non-integer count
        main(["mse", "--trials", "1.5"])
    assert exc.value.code == 2
    assert "argument --trials: expected an integer" in capsys.readouterr().err
    assert main(["mse", "--method", "fast"]) == 2
    assert "method must be one of 'reduced', 'literal'" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Memory: constant in the number of trials
# ---------------------------------------------------------------------------


def test_long_run_constant_memory():
    # 1e8 trials (a few seconds at m = 2) in a fresh process: its peak RSS must not
    # grow with the trials. The peak is read from /proc/self/status (VmHWM), which
    # execve resets; getrusage's ru_maxrss would include the forking pytest process.
    script = textwrap.dedent("""
        import resource, numpy as np
        from rfkernels.analysis import monte_carlo_mse
        def peak_kib():
            try:
                with open("/proc/self/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            return int(line.split()[1])
            except OSError:
                pass
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        x = np.array([0.3, 0.2]); y = np.array([0.1, -0.2])
        monte_carlo_mse(x, y, 2, "positive", trials=200_000, seed=0, backend="numba")
        before = peak_kib()
        r = monte_carlo_mse(x, y, 2, "positive", trials=100_000_000, seed=0, backend="numba")
        print(r.trials, before, peak_kib())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    trials, before, after = (int(v) for v in out)
    assert trials == 100_000_000
    assert (after - before) < 20_000  # KiB: buffers are O(chunk + sqrt(trials)), not O(trials)
    assert after < 200_000  # the whole process (NumPy, SciPy, Numba and its kernels) < 200 MB


# ---------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
def test_cupy_same_estimates_and_literal_on_device():
    for kind in KINDS:
        for ensemble, norms in CASES:
            kw = {"ensemble": ensemble, "norms": norms, "trials": 2_000, "seed": 21}
            a = trial_estimates(X, Y, M, kind, backend="numpy", **kw)
            b = trial_estimates(X, Y, M, kind, backend="cupy", **kw)
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14 * np.max(np.abs(a)))
    r = monte_carlo_mse(X, Y, M, "positive", ensemble="orthogonal", trials=1_000_000, seed=2,
                        backend="cupy")
    assert r.tail_ok and abs(r.z) < 4
    lit = monte_carlo_mse(X, Y, M, "positive", ensemble="orthogonal", trials=500, seed=2,
                          backend="cupy", method="literal")
    ref = monte_carlo_mse(X, Y, M, "positive", ensemble="orthogonal", trials=500, seed=2,
                          method="literal")
    assert lit.mse == pytest.approx(ref.mse, rel=1e-10)


def test_rounding_level_errors_are_flagged_not_called_exact():
    from rfkernels import theory

    x, y = theory.pair(4, 1.0, 1.0, 1e-9)  # |x - y| = 1e-9: the trig MSE is ~1e-37
    res = monte_carlo_mse(x, y, 4, "trig", trials=20000, seed=0)
    assert res.mse_exact > 0
    assert res.tail_ok is False and res.z is None
    assert "rounding level" in res.tail.note
    x = np.array([0.3, 0.2])  # x = -y: the positive estimate is exact for every draw
    res = monte_carlo_mse(x, -x, 4, "positive", trials=2000, seed=0)
    assert res.mse == 0.0 and res.mse_exact == 0.0 and res.tail_ok is True


def test_constant_estimates_give_no_z():
    from rfkernels import theory

    x, y = theory.pair(1, 0.4, 0.5, 0.0)  # d = 1, fixed norms: w = ±1, cosh is deterministic
    res = monte_carlo_mse(x, y, 1, "hyperbolic", norms="fixed", trials=5000, seed=0)
    assert res.z is None and res.tail_ok is False
    assert res.mse == pytest.approx(res.mse_exact, rel=1e-9)  # the squared bias, exactly


@pytest.mark.parametrize("method, ensemble", [("reduced", "iid"), ("reduced", "orthogonal"),
                                              ("literal", "orthogonal")])
def test_peak_bytes_bounds_the_measured_peak(method, ensemble):
    """The memory checks' estimate (peak_bytes) is above what a run allocates (tracemalloc)."""
    import tracemalloc

    from rfkernels.analysis.monte_carlo import peak_bytes

    m, chunk = (2000, 128) if method == "reduced" else (300, 16)
    pairs = np.stack([X, 0.5 * X]), np.stack([Y, -Y])
    for kind in KINDS:
        tracemalloc.start()
        try:
            monte_carlo_mse(*pairs, m, kind, ensemble=ensemble, trials=chunk, method=method,
                                  chunk=chunk, backend="numpy", seed=0)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        # 2 MiB: what any run holds besides the chunk (theory tables, the result objects)
        estimate = peak_bytes(m, X.shape[-1], 2, chunk, method=method, ensemble=ensemble)
        assert peak <= estimate + 2**21, (kind, peak, estimate)
        if method == "reduced":  # and not wildly above it either
            assert peak >= estimate / 4, (kind, peak, estimate)


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
def test_reported_numbers_do_not_depend_on_backend_or_chunk(kind):
    """Moments merge in fixed blocks of trials: the whole result is bit-identical."""
    x, y = theory.pair(8, 0.5, 0.5, 1.0)
    runs = [monte_carlo_mse(x, y, 8, kind, ensemble="orthogonal", trials=30001, seed=3,
                            backend=backend, chunk=chunk, proposal="plain")
            for backend, chunk in (("numpy", None), ("numba", None), ("numpy", 1000),
                                   ("numba", 7777))]
    keys = {(r.mse, r.stderr, r.ci95, r.bias, r.bias_stderr, r.mean_estimate, r.z,
             r.tail.k_hat, r.tail.max_share) for r in runs}
    assert len(keys) == 1


@pytest.mark.parametrize("method", ["reduced", "literal"])
def test_from_geometry_equals_monte_carlo_mse(method):
    from rfkernels.analysis import monte_carlo_mse

    x, y = theory.pair(6, 0.4, 0.5, 1.2)
    geom = theory.geometry(x, y)
    opts = dict(ensemble="orthogonal", trials=3000, seed=4, method=method)
    ref = monte_carlo_mse(x, y, 6, "hyperbolic", **opts)
    vectors = (x, y) if method == "literal" else None
    got = monte_carlo_mse(geom, None, 6, "hyperbolic", vectors=vectors, **opts)
    given = monte_carlo_mse(geom, None, 6, "hyperbolic", vectors=vectors,
                                          mse_exact=ref.mse_exact, **opts)
    for r in (got, given):
        assert (r.mse, r.stderr, r.z, r.mse_exact) == (ref.mse, ref.stderr, ref.z, ref.mse_exact)
    with pytest.raises(TypeError, match="Geometry of one pair"):
        monte_carlo_mse(theory.geometry(x[None], y[None]), None, 6, "positive", trials=10)
    with pytest.raises(ValueError, match="needs the vectors: pass vectors"):
        monte_carlo_mse(geom, None, 6, "positive", trials=10, method="literal")
    other = theory.pair(6, 2.0, 2.0, 0.1)
    with pytest.raises(ValueError, match="do not have the given geometry"):
        monte_carlo_mse(geom, None, 6, "positive", trials=10, method="literal",
                                      vectors=other)
    for bad, err in ((float("nan"), ValueError), (-1.0, ValueError), ("abc", TypeError)):
        with pytest.raises(err, match="mse_exact must be"):
            monte_carlo_mse(geom, None, 6, "positive", trials=10, mse_exact=bad)


def test_peak_bytes_of_simplex_counts_all_d_coordinates():
    """The simplex sampler draws d coordinates per block: its estimate grows with d, not only m."""
    import tracemalloc

    from rfkernels.analysis.monte_carlo import peak_bytes

    x, y = theory.pair(1000, 0.1, 0.1, 1.0)
    tracemalloc.start()
    monte_carlo_mse(x, y, 2, "positive", ensemble="simplex", trials=500, chunk=500, seed=0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak_bytes(2, 1000, 1, 500, ensemble="simplex") >= peak
    assert peak_bytes(2, 1000, 1, 500, ensemble="simplex") > 100 * peak_bytes(2, 1000, 1, 500)


def test_one_monte_carlo_function_the_old_names_warn_and_agree():
    """monte_carlo_mse takes one pair, (n, d) batches or one pair's Geometry; the old batch and
    geometry entry points are deprecated aliases with the same bits (CHANGELOG.md)."""
    import rfkernels.analysis as analysis
    from rfkernels import theory as th

    x, y = th.pair(6, 0.4, 0.5, [0.5, 1.5])
    one = monte_carlo_mse(x[0], y[0], 4, "positive", trials=4000, seed=3)
    batch = monte_carlo_mse(x, y, 4, "positive", trials=4000, seed=3)
    assert len(batch) == 2 and batch[0].mse == one.mse
    geo = monte_carlo_mse(th.geometry(x[0], y[0]), None, 4, "positive", trials=4000, seed=3)
    assert geo.mse == one.mse and geo.mse_exact == one.mse_exact
    with pytest.warns(DeprecationWarning, match="monte_carlo_mse_batch is deprecated"):
        old = analysis.monte_carlo_mse_batch(x, y, 4, "positive", trials=4000, seed=3)
    assert [r.mse for r in old] == [r.mse for r in batch]
    with pytest.warns(DeprecationWarning, match="monte_carlo_mse_from_geometry is deprecated"):
        old = analysis.monte_carlo_mse_from_geometry(th.geometry(x[0], y[0]), 4, "positive",
                                                     trials=4000, seed=3)
    assert old.mse == one.mse
    with pytest.raises(ValueError, match="vectors and mse_exact go with a theory.Geometry"):
        monte_carlo_mse(x[0], y[0], 4, "positive", trials=10, mse_exact=1.0)


def test_auto_backend_runs_small_runs_on_numpy_with_the_same_bits():
    """backend='auto': NumPy up to AUTO_NUMPY_WORK trial terms (nothing to compile), Numba
    above; the estimates are the same either way, so only the time changes."""
    from rfkernels.analysis.monte_carlo import AUTO_NUMPY_WORK, auto_backend

    x, y = theory.pair(16, 1.0, 1.0, 2.0)
    small = monte_carlo_mse(x, y, 8, "positive", ensemble="orthogonal", trials=20_000, seed=4,
                            backend="auto")
    assert small.backend == "numpy"
    same = monte_carlo_mse(x, y, 8, "positive", ensemble="orthogonal", trials=20_000, seed=4,
                           backend="numba")
    assert (small.mse, small.stderr, small.z) == (same.mse, same.stderr, same.z)
    assert auto_backend("auto", AUTO_NUMPY_WORK // 8, 8) == "numpy"
    assert auto_backend("auto", AUTO_NUMPY_WORK // 8 + 1, 8) == "numba"
    assert auto_backend("auto", 1000, 8, pairs=AUTO_NUMPY_WORK) == "numba"
    assert auto_backend("cupy", 10, 1) == "cupy"
