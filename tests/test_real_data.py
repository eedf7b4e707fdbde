"""Random Fourier features on real data: the protocol, the exact Gram error, the downstream models.

Everything runs on 300-row subsets (the figure's ``--quick`` data).
"""

import numpy as np
import pytest
from scipy.spatial.distance import pdist

from rfkernels import RandomFourierFeatures
from rfkernels.analysis import real_data as rd
from rfkernels.figures import FIGURES, budget
from rfkernels.figures import real_data as fig
from rfkernels.figures._gallery import WIDTHS

ROWS = 300


@pytest.fixture(scope="module")
def quick():
    """The figure's --quick data (300 rows per data set, SEEDS draws per point)."""
    return fig.compute(quick=True, seed=0)


@pytest.fixture(scope="module")
def wine():
    return rd.load_real_data("wine", rows=ROWS)


def test_protocol_standardises_on_the_training_rows_and_uses_the_median_heuristic():
    for name, (_, task) in rd.DATASETS.items():
        data = rd.load_real_data(name, rows=ROWS)
        n = min(ROWS, {"digits": 1797, "wine": 178, "breast_cancer": 569, "diabetes": 442}[name])
        assert data.x_train.shape[0] + data.x_test.shape[0] == n
        assert data.x_test.shape[0] == int(np.ceil(rd.TEST_SIZE * n))
        assert np.allclose(data.x_train.mean(axis=0), 0.0, atol=1e-12)
        sd = data.x_train.std(axis=0)
        assert np.all(np.isclose(sd, 1.0) | (sd == 0.0))
        median = np.median(pdist(data.x_train, "sqeuclidean"))
        assert data.median_sq_distance == pytest.approx(median, rel=1e-12)
        assert data.gamma == pytest.approx(1.0 / (2.0 * median), rel=1e-12)
        assert data.task == task and data.alpha == rd.ALPHA[name]
        if task == "classification":  # stratified: every class in both parts
            assert set(np.unique(data.y_test)) == set(np.unique(data.y_train))


@pytest.mark.parametrize("name", ["wine", "diabetes"])
def test_alpha_is_the_cross_validated_choice_on_the_training_rows(name):
    """ALPHA is what cv_alpha chooses on the full data (digits, breast cancer: docs/performance.md)."""
    data = rd.load_real_data(name)
    assert rd.cv_alpha(data) == rd.ALPHA[name]
    assert rd.ALPHAS[0] < rd.ALPHA[name] < rd.ALPHAS[-1]  # inside the grid


def test_bad_names_and_degenerate_data_are_refused():
    with pytest.raises(ValueError, match="unknown data set 'iris'; valid names are digits"):
        rd.load_real_data("iris")
    with pytest.raises(ValueError, match="median squared distance between rows is 0"):
        rd.median_gamma(np.ones((5, 3)))


@pytest.mark.parametrize("construction", list(rd.CONSTRUCTIONS))
def test_exact_gram_error_is_the_expected_mse_of_a_fit(wine, construction):
    kind, ensemble = rd.CONSTRUCTIONS[construction]
    r = np.array([8, 26, 64])
    got = rd.exact_gram_error(wine, construction, r)
    for ri, gi in zip(r, got):
        rff = RandomFourierFeatures(gamma=wine.gamma, n_components=int(ri), kind=kind,
                                    ensemble=ensemble, random_state=0).fit(wine.x_train)
        assert gi == pytest.approx(rff.expected_mse(wine.x_train).relative_frobenius, rel=1e-10)


def test_gram_error_sample_is_the_direct_frobenius_error(wine):
    phi, _ = rd.features_of(wine, "paired_orthogonal", 32, 5)
    k = np.exp(-wine.gamma * ((wine.x_train[:, None] - wine.x_train[None]) ** 2).sum(-1))
    diff = phi @ phi.T - k
    assert rd.gram_error_sample(phi, k) == pytest.approx(np.vdot(diff, diff) / np.vdot(k, k),
                                                           rel=1e-9)


def test_rbf_sampler_construction_is_scikit_learns_own():
    from sklearn.kernel_approximation import RBFSampler

    data = rd.load_real_data("diabetes", rows=ROWS)
    phi, phi_test = rd.features_of(data, "rbf_sampler", 16, 7)
    ref = RBFSampler(gamma=data.gamma, n_components=16, random_state=7).fit(data.x_train)
    assert np.array_equal(phi, ref.transform(data.x_train))
    assert np.array_equal(phi_test, ref.transform(data.x_test))


def test_ridge_on_features_is_kernel_ridge_with_their_gram_matrix(wine):
    from sklearn.linear_model import Ridge

    rng = np.random.default_rng(3)
    y = rng.normal(size=(wine.x_train.shape[0], 2))
    for r in (16, 400):  # primal (r < n) and dual (r > n) forms
        phi, phi_test = rd.features_of(wine, "paired_iid", r, 1)
        got = rd.ridge_predict(phi, y, phi_test, 0.3)
        dual = phi_test @ phi.T @ np.linalg.solve(phi @ phi.T + 0.3 * np.eye(len(phi)), y)
        ref = Ridge(alpha=0.3, fit_intercept=False).fit(phi, y).predict(phi_test)
        assert np.allclose(got, dual, rtol=1e-8, atol=1e-10)
        assert np.allclose(got, ref, rtol=1e-6, atol=1e-8)


def test_exact_kernel_score_is_scikit_learns_kernel_ridge():
    from sklearn.kernel_ridge import KernelRidge

    data = rd.load_real_data("diabetes", rows=ROWS)
    mu = data.y_train.mean()
    model = KernelRidge(alpha=data.alpha, kernel="rbf", gamma=data.gamma)
    pred = model.fit(data.x_train, data.y_train - mu).predict(data.x_test) + mu
    r2 = 1 - np.sum((pred - data.y_test) ** 2) / np.sum((data.y_test - data.y_test.mean()) ** 2)
    assert rd.exact_kernel_score(data) == pytest.approx(r2, rel=1e-8)
    digits = rd.load_real_data("digits", rows=ROWS)
    classes = np.unique(digits.y_train)
    codes = np.where(digits.y_train[:, None] == classes, 1.0, -1.0)
    model = KernelRidge(alpha=digits.alpha, kernel="rbf", gamma=digits.gamma)
    out = model.fit(digits.x_train, codes - codes.mean(0)).predict(digits.x_test)
    acc = np.mean(classes[np.argmax(out, axis=1)] == digits.y_test)
    assert rd.exact_kernel_score(digits) == pytest.approx(acc)


def test_agreement_says_yes_tie_or_no():
    gram = {"a": 1.0, "b": 2.0}
    assert rd.agreement(gram, {"a": 0.9, "b": 0.8}, {"a": 0.01, "b": 0.01})["verdict"] == "yes"
    tie = rd.agreement(gram, {"a": 0.9, "b": 0.91}, {"a": 0.01, "b": 0.01})
    assert tie["verdict"] == "tie" and tie["best_score"] == "b"
    no = rd.agreement(gram, {"a": 0.8, "b": 0.9}, {"a": 0.01, "b": 0.01})
    assert no["verdict"] == "no" and no["score_gap"] == pytest.approx(0.1)
    assert no["gap_se"] == pytest.approx(np.hypot(0.01, 0.01))


def test_figure_is_registered_with_a_budget_and_a_gallery_width():
    assert FIGURES["real_data"] == "real_data" and WIDTHS["real_data"] == 900
    assert budget("real_data") <= 15.0 and budget("real_data", quick=True) < budget("real_data")


def test_monte_carlo_gram_errors_agree_with_the_exact_ones(quick):
    rows = quick["monte_carlo"]
    assert len(rows) == len(rd.DATASETS) * len(rd.CONSTRUCTIONS) * len(fig.R_MC)
    for p in rows:
        bounded = rd.is_bounded(p["construction"])
        assert p["tail_ok"] is bounded and p["trials"] == fig.SEEDS
        if bounded:
            assert abs(p["z"]) < 4, p
    lines = {(r["dataset"], r["construction"], r["r"]): r["gram_error_exact"] for r in quick["lines"]}
    assert all(lines[(p["dataset"], p["construction"], p["r"])] == p["mse_exact"] for p in rows)


def test_exact_lines_fall_as_one_over_r_for_iid_and_orthogonal_is_lower(quick):
    lines = quick["lines"]
    for name in rd.DATASETS:
        curve = {(r["construction"], r["r"]): r["gram_error_exact"] for r in lines
                 if r["dataset"] == name}
        for c in ("rbf_sampler", "paired_iid"):
            assert curve[(c, 512)] == pytest.approx(curve[(c, 8)] * 8 / 512, rel=1e-12)
        for r in (8, 64, 512):  # the order the docs state, at every r > 2 in the data
            order = sorted(rd.CONSTRUCTIONS, key=lambda c: curve[(c, r)])
            assert order == ["paired_orthogonal", "paired_simplex", "paired_iid", "rbf_sampler",
                             "positive_orthogonal"], (name, r, order)


def test_downstream_rows_and_the_agreement_table(quick):
    down = quick["downstream"]
    models = {m["dataset"]: m for m in quick["exact_model"]}
    assert set(models) == set(rd.DATASETS)
    for p in down:
        assert p["score_min"] <= p["score_mean"] <= p["score_max"]
        assert p["score_se"] == pytest.approx(p["score_sd"] / np.sqrt(fig.SEEDS))
        if p["task"] == "classification":
            assert 0.0 <= p["score_min"] and p["score_max"] <= 1.0
    for name, m in models.items():  # more outputs, closer to the exact kernel model
        for c in rd.CONSTRUCTIONS:
            mean = {p["r"]: p["score_mean"] for p in down
                    if p["dataset"] == name and p["construction"] == c}
            assert mean[fig.R_POINTS[-1]] > mean[fig.R_POINTS[0]] - 0.02
            assert mean[fig.R_POINTS[-1]] < m["exact_kernel_score"] + 0.05
    table = quick["agreement"]
    assert len(table) == len(rd.DATASETS) * len(fig.R_POINTS)
    assert {r["verdict"] for r in table} <= {"yes", "tie", "no"}


def test_csv_files_are_written(tmp_path, quick, monkeypatch):
    from rfkernels.figures._common import make_figure

    monkeypatch.setattr(fig, "compute", lambda quick_, seed, progress=None: quick)
    monkeypatch.setattr(fig, "plot", lambda data, out_dir: [])  # drawn in tests/test_figures.py
    res = make_figure(fig, str(tmp_path), quick=True)
    names = sorted(p.rsplit("/", 1)[-1] for p in res.paths)
    assert names == sorted(["real_data_theory.csv",
                            "real_data_monte_carlo.csv", "real_data_downstream.csv",
                            "real_data_exact_model.csv", "real_data_agreement.csv"])
    head = (tmp_path / "real_data_agreement.csv").read_text().splitlines()[0]
    assert head == "dataset,r,lowest_gram_error,best_score,score_gap,gap_se,verdict"


def test_the_figure_has_the_same_numbers_whatever_the_blas_threads(quick):
    """Alone (the process's BLAS threads, here 2) and on a pool's worker (1): the same bytes."""
    from threadpoolctl import threadpool_limits

    from rfkernels.figures import figure_module

    runs = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            runs.append(figure_module("real_data").compute(quick=True, seed=0))
    assert runs[0] == runs[1] == quick
