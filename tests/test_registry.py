"""The estimator registry and the frozen spec (issue 18).

A toy kind registered in one module (tests/_toy_kind.py) gets the exact
theory, Monte Carlo on every backend (NumPy, Numba, the CUDA kernel under
the simulator, the same bits) and the command line, without an edit
anywhere else; the spec validates once and says why a capability is absent.
"""

import importlib
import json
import os
import subprocess
import sys

import mpmath
import numpy as np
import pytest

from rfkernels import estimators, theory
from rfkernels.analysis import monte_carlo_mse, trial_estimates
from rfkernels.estimators import registry

HERE = os.path.dirname(__file__)


@pytest.fixture
def toy():
    sys.path.insert(0, HERE)
    try:
        module = importlib.import_module("_toy_kind")
        if "toy" not in registry.names("kind"):  # a second test after the teardown below
            module = importlib.reload(module)
        yield module
    finally:
        registry.unregister("kind", "toy")
        sys.path.remove(HERE)


def test_toy_kind_theory_matches_mpmath(toy):
    x, y = theory.pair(6, 0.3, 0.2, 1.1)
    got = theory.exact_mse(x, y, 5, "toy")
    mpmath.mp.dps = 40
    s = mpmath.mpf(float((x + y) @ (x + y)))
    ref = mpmath.e ** (2 * mpmath.mpf(float(x @ y))) * mpmath.expm1(s) / 5
    assert abs(got / float(ref) - 1) < 1e-12
    with pytest.raises(ValueError, match="toy kind's exact MSE is derived for iid"):
        theory.exact_mse(x, y, 5, "toy", ensemble="orthogonal")
    assert theory.no_closed_form_reason("toy", "orthogonal", "chi").startswith("the toy kind")


def test_toy_kind_monte_carlo_on_numpy_and_numba(toy):
    x, y = theory.pair(6, 0.3, 0.2, 1.1)
    results = [monte_carlo_mse(x, y, 4, "toy", trials=40_000, seed=3, backend=b, proposal="auto")
               for b in ("numpy", "numba")]
    assert results[0].mse == results[1].mse  # the same bits
    r = results[0]
    assert r.tail_ok and abs(r.z) < 4 and r.proposal == "plain"
    assert "no tilted proposal" not in r.proposal_note or r.proposal_note.startswith("plain")
    e = [trial_estimates(x, y, 4, "toy", trials=64, seed=3, backend=b, ensemble=ens)
         for b in ("numpy", "numba") for ens in ("orthogonal",)]
    np.testing.assert_array_equal(e[0], e[1])
    with pytest.raises(ValueError, match="no tilted proposal"):
        monte_carlo_mse(x, y, 4, "toy", trials=100, proposal="tilted")


SIMULATED = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import _toy_kind
from rfkernels.engine import cuda as _reduced_cuda, cpu as _reduced_numba
out = {}
for ens, chi in ((0, True), (1, True), (2, False)):
    args = (np.uint32(5), np.uint32(6), np.uint64(3 << 40), 5, 3, ens, chi, "toy", 0.4)
    cpu, gpu = np.empty(40), np.full(40, np.nan)
    _reduced_numba.reduced_estimates(*args, cpu)
    _reduced_cuda.gpu_reduced_estimates(*args, gpu, threads=8, blocks=2)
    out[f"{ens}-{chi}"] = bool(np.array_equal(cpu, gpu))
print(json.dumps(out))
"""


def test_toy_kind_gpu_kernel_under_the_simulator(toy):
    pytest.importorskip("numba_cuda")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run([sys.executable, "-c", SIMULATED, HERE], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"0-True": True, "1-True": True, "2-False": True}


def test_toy_kind_on_the_command_line(toy, capsys):
    from rfkernels.commands.cli import main

    assert main(["mse", "--kind", "toy", "--d", "6", "--m", "4", "--norm-x", "0.3", "--norm-y",
                 "0.2", "--trials", "20000", "--backend", "numpy", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "toy" and abs(out["z"]) < 4
    assert out["mse_lemma2"] is None and "not toy" in out["null_reasons"]["mse_lemma2"]
    registry.unregister("kind", "toy")
    with pytest.raises(SystemExit):
        main(["mse", "--kind", "toy"])
    err = capsys.readouterr().err
    assert "invalid choice: 'toy'" in err and "toy" not in err.split("expected one of")[-1]


def test_spec_validates_once_and_says_why():
    est = estimators.estimator("positive", ensemble="iid", m=8, d=16)
    assert est.supports.exact_mse and est.supports.lemma2 and est.supports.reduced and est.supports.tilted
    assert not est.supports.theorem2 and "ensemble is 'iid'" in est.supports.theorem2.reason
    assert estimators.estimator("positive", ensemble="orthogonal", m=8, d=16).supports.theorem2
    assert "m <= d" in estimators.estimator("positive", ensemble="orthogonal", m=17, d=16).supports.theorem2.reason
    trig = estimators.estimator("trig")
    assert not trig.supports.tilted and "bounded" in trig.supports.tilted.reason
    sorf = estimators.estimator("positive", ensemble="sorf")
    assert not sorf.supports.reduced and not sorf.supports.exact_mse and "method='literal'" in sorf.supports.reduced.reason
    with pytest.raises(ValueError, match="kind must be one of 'trig', 'positive'"):
        estimators.estimator("gauss")
    with pytest.raises(ValueError, match="A is the parameter of kind='oprf' or kind='derf' only"):
        estimators.estimator("positive", A=0.1)
    with pytest.raises(ValueError, match="A must be < 1/8"):
        estimators.estimator("oprf", A=0.2)
    with pytest.raises(ValueError, match="needs d >= 2"):
        estimators.estimator("trig", ensemble="simplex", d=1)
    assert estimators.estimator("oprf", A="auto").params.auto
    with pytest.raises(Exception):
        est.m = 3  # frozen
    with pytest.raises(ValueError, match="registered already"):
        registry.register("kind", registry.entry("kind", "trig"))


def test_a_auto_is_one_convention():
    x, y = theory.pair(8, 0.5, 0.5, 1.0)
    auto = monte_carlo_mse(x, y, 8, "oprf", A="auto", trials=2000, seed=1, proposal="plain")
    default = monte_carlo_mse(x, y, 8, "oprf", trials=2000, seed=1, proposal="plain")
    assert auto.mse == default.mse
    assert theory.exact_mse(x, y, 8, "oprf", A="auto") == theory.exact_mse(x, y, 8, "oprf")
    with pytest.raises(ValueError, match="A must be a float < 1/8 or 'auto'"):
        monte_carlo_mse(x, y, 8, "oprf", A="best", trials=100)


def test_theory_entries_receive_the_vectors(toy):
    """A kind whose MSE depends on x and y themselves gets them (DERF's case), or a clear refusal."""
    import dataclasses

    seen = []

    def log_mse(geom, m, est, vectors):
        seen.append(vectors)
        return toy.log_mse(geom, m, est)

    registry.register("kind", dataclasses.replace(toy.KIND, name="toyv", log_mse=log_mse,
                                                  theory_needs_vectors=True, seed_index=None))
    try:
        x, y = theory.pair(6, 0.3, 0.2, 1.1)
        assert theory.exact_mse(x, y, 5, "toyv") == theory.exact_mse(x, y, 5, "toy")
        np.testing.assert_array_equal(seen[0][0], x)
        np.testing.assert_array_equal(seen[0][1], y)
        with pytest.raises(ValueError, match="depends on x and y themselves"):
            theory.exact_mse(theory.geometry(x, y), None, 5, "toyv")
    finally:
        registry.unregister("kind", "toyv")
