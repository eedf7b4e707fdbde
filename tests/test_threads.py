"""Independent items on this process's threads: the numbers and the order of a loop."""

import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from rfkernels import workers
from rfkernels.analysis import attention_mse, favor_study


def test_map_in_order_is_the_loop_in_its_order():
    def slow_square(i):
        rng = np.random.default_rng(i)  # each item its own seed
        return i, float(rng.standard_normal(1000) @ rng.standard_normal(1000))

    items = list(range(12))
    assert workers.map_in_order(slow_square, items, threads=3) == [slow_square(i) for i in items]


def test_map_in_order_runs_on_threads_with_one_blas_thread_each():
    seen = []

    def item(i):
        blas = [lib["num_threads"] for lib in threadpool_info() if lib.get("user_api") == "blas"]
        seen.append((threading.current_thread().name, max(blas, default=1)))
        return i

    assert workers.map_in_order(item, range(6), threads=2, name="rfk-test") == list(range(6))
    assert all(name.startswith("rfk-test") for name, _ in seen)
    assert all(blas == 1 for _, blas in seen)


def test_map_in_order_on_one_thread_is_a_plain_loop():
    names = workers.map_in_order(lambda i: threading.current_thread().name, range(3), threads=1)
    assert names == [threading.main_thread().name] * 3


def test_map_in_order_raises_the_items_error():
    def item(i):
        if i == 2:
            raise ValueError("item 2")
        return i

    with pytest.raises(ValueError, match="item 2"):
        workers.map_in_order(item, range(4), threads=2)


def test_thread_count_is_numbas():
    import numba

    assert workers.thread_count() == numba.get_num_threads()


def test_attention_study_has_the_same_bits_on_threads(monkeypatch):
    kw = dict(kinds=["positive", "trig"], ensembles=["iid", "orthogonal"], samples=4, seed=5)
    monkeypatch.setattr(favor_study, "thread_count", lambda: 1)
    one = attention_mse(64, 4, [2, 8], **kw)
    ticks = []
    monkeypatch.setattr(favor_study, "thread_count", lambda: 3)
    three = attention_mse(64, 4, [2, 8], progress=ticks.append, **kw)
    np.testing.assert_array_equal(one.per_sample_mse, three.per_sample_mse)
    assert one.rows == three.rows
    assert one.meta["exact_output_mean_square"] == three.meta["exact_output_mean_square"]
    assert sum(ticks) == 4 * (1 + 2 * 2 * 2)  # every unit reported once, from the threads


def _square_plus(shared, i):
    import os

    rng = np.random.default_rng(i)
    return i, shared + float(rng.standard_normal(100) @ rng.standard_normal(100)), os.getpid()


def _fails_on_three(shared, i):
    if i == 3:
        raise ValueError(f"item {i}")
    return i


def test_map_on_processes_is_the_loop_in_its_order_on_other_processes():
    import os

    ticks = []
    got = workers.map_on_processes(_square_plus, 10.0, range(8), 2, done=lambda: ticks.append(1))
    assert [g[:2] for g in got] == [_square_plus(10.0, i)[:2] for i in range(8)]
    assert os.getpid() not in {g[2] for g in got} and len(ticks) == 8


def test_map_on_processes_raises_the_items_error_and_ends_its_workers():
    import multiprocessing

    before = set(multiprocessing.active_children())
    with pytest.raises(ValueError, match="item 3"):
        workers.map_on_processes(_fails_on_three, None, range(8), 2)
    assert set(multiprocessing.active_children()) <= before
