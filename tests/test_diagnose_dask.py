"""Diagnose's heads on a Dask cluster: one task per head, the numbers of a local run."""

import json

import pytest

pytest.importorskip("distributed")

from distributed import LocalCluster  # noqa: E402

from rfkernels.analysis import diagnose, synthetic_qkv  # noqa: E402
from rfkernels.commands.cli import main  # noqa: E402

GRID = dict(m=[4, 16], draws=2, queries=32, pairs=300, first_order_queries=8,
            kinds=["positive", "trig"], ensembles=["iid", "orthogonal"])


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(processes=False, n_workers=1, threads_per_worker=2,
                      dashboard_address=None) as c:
        yield c


def test_heads_on_dask_give_the_local_numbers(cluster):
    q, k, v = synthetic_qkv()
    local = diagnose(q, k, v, **GRID)
    ticks = []
    remote = diagnose(q, k, v, scheduler=cluster.scheduler_address, progress=ticks.append, **GRID)
    assert remote.rows == local.rows and remote.summary == local.summary
    assert remote.advice == local.advice
    assert sum(ticks) == local.meta["units"] and remote.meta["scheduler"] == cluster.scheduler_address


def test_the_plan_travels_to_a_worker():
    import pickle

    from rfkernels.analysis.diagnosis import study

    q, k, v = synthetic_qkv()
    plan, _ = study._plan(q, k, v, [4], None, None, None, "chi", None, 2, 32, 300, 8, 0.01, None,
                          0, 1, None)
    copy = pickle.loads(pickle.dumps(plan))
    assert all(getattr(copy, key) == getattr(plan, key) for key in type(plan).__slots__)


def test_the_command_takes_a_scheduler(cluster, tmp_path):
    import numpy as np

    q, k, v = synthetic_qkv()
    np.savez(tmp_path / "qkv.npz", q=q, k=k, v=v)
    out = tmp_path / "out"
    assert main(["diagnose", str(tmp_path / "qkv.npz"), "--m", "4", "--draws", "2", "--queries", "16",
                 "--pairs", "100", "--kind", "positive", "--scheduler", cluster.scheduler_address,
                 "--out", str(out)]) == 0
    doc = json.loads((out / "diagnosis.json").read_text())
    assert doc["meta"]["scheduler"] == cluster.scheduler_address
    assert "--scheduler" in doc["provenance"]["command_line"]


def test_an_unreachable_scheduler_is_one_line(tmp_path, capsys):
    import numpy as np

    q, k, v = synthetic_qkv()
    np.savez(tmp_path / "qkv.npz", q=q, k=k, v=v)
    assert main(["diagnose", str(tmp_path / "qkv.npz"), "--scheduler", "tcp://127.0.0.1:1",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in err[0]
