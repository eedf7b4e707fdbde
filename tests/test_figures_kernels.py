"""The engine's kernels the figures declare are those they run, and a pool compiles each once."""

import pickle

import numpy as np
import pytest

from rfkernels import engine
from rfkernels.engine import cpu
from rfkernels.figures import FIGURES, figure_module
from rfkernels.figures._kernels import Kernel, pending
from rfkernels.figures._pool import jobs_of

DECLARING = [n for n in FIGURES if hasattr(figure_module(n), "KERNELS")]


@pytest.mark.parametrize("name", DECLARING)
def test_declared_kernels_are_the_ones_compute_runs(name, monkeypatch):
    module = figure_module(name)
    asked = set()
    kernel_for = cpu.kernel_for

    def recording(ensemble, chi, kind, coupled=False):
        asked.add(cpu.cpu_kernel_key(ensemble, chi, kind, coupled))
        return kernel_for(ensemble, chi, kind, coupled)

    monkeypatch.setattr(cpu, "kernel_for", recording)
    module.compute(quick=True, seed=0)
    assert asked == {engine.kernel_key(*k) for k in module.KERNELS}


def test_every_engine_figure_declares_its_kernels():
    # the Monte Carlo figures on the engine (their points go through _mc or the engine)
    assert {"ratio", "mse_vs_m", "mse_vs_angle", "feature_budget", "beyond", "gaussian",
            "estimator_choice"} <= set(DECLARING)


def test_kernel_parts_are_equal_where_the_kernel_is():
    trig, offset = Kernel("trig", "iid", "chi"), Kernel("offset", "iid", "chi")
    assert trig == offset and hash(trig) == hash(offset)  # one kernel, random phase an argument
    assert Kernel("trig", "orthogonal", "chi") != trig
    assert Kernel("positive", "orthogonal", "antithetic") != Kernel("positive", "orthogonal", "chi")
    assert pickle.loads(pickle.dumps(trig)) == trig


def test_pending_lists_each_kernel_once(monkeypatch):
    monkeypatch.setattr(engine, "kernel_pending", lambda *a: True)
    parts = pending(figure_module("gaussian"))
    assert len(parts) == len({p.key for p in parts}) == 3  # offset runs trig's kernels
    monkeypatch.setattr(engine, "kernel_pending", lambda *a: False)
    assert pending(figure_module("gaussian")) == []  # warm: no job


def test_a_kernel_shared_by_figures_is_one_job_before_them():
    shared = Kernel("positive", "orthogonal", "chi")
    needs = {"mse_vs_m": [shared, Kernel("trig", "iid", "chi")], "beyond": [shared]}
    jobs = jobs_of(["mse_vs_m", "beyond"], needs, {"mse_vs_m": 14.0, "beyond": 9.5})
    parts = [j for j in jobs if j.part is not None]
    assert [j.part for j in parts] == [shared, Kernel("trig", "iid", "chi")]
    assert parts[0].priority == 14.0  # ranked by the longest figure waiting for it


def test_compile_kernel_compiles_the_signature_a_run_calls():
    engine.compile_kernel("trig", "iid", "chi")
    assert not engine.kernel_pending("trig", "iid", "chi")
    dispatcher = cpu.kernel_for(cpu.IID, True, "trig")
    before = len(dispatcher.signatures)
    for _ in engine.estimate_chunks(np.array([3, 4], dtype=np.uint32), 1.0, 8, 16, "trig",
                                    trials=300, backend="numba"):
        pass
    assert len(dispatcher.signatures) == before  # no second compilation
