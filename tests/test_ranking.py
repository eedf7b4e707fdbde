"""rank_estimators and ``rfkernels rank``: the exact MSE of every registered estimator at a budget.

The tests ask the registry which combinations exist, so a norm law or kind
registered while they run (antithetic norms) changes no assertion: only
FAVOR+ iid (the baseline) and the paper's kinds are named.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

import rfkernels
from rfkernels import rank_estimators, theory
from rfkernels.commands.cli import main
from rfkernels.estimators import estimator, registry
from rfkernels.ranking import BASELINE, Ranking

D, R = 16, 32


@pytest.fixture(scope="module")
def pair():
    return theory.pair(D, 0.5, 0.5, 1.0)


@pytest.fixture(scope="module")
def population():
    rng = np.random.default_rng(0)
    return rng.normal(size=(40, D)) * 0.25, rng.normal(size=(40, D)) * 0.25


@pytest.fixture(scope="module")
def one(pair):
    return rank_estimators(*pair, r=R)


@pytest.fixture(scope="module")
def many(population):
    return rank_estimators(*population, r=R)


def _combinations(d):
    """Every registered (kind, ensemble, norms) and whether the estimator accepts it at d."""
    out = {}
    for kind, ens, law in itertools.product(*(registry.names(a) for a in ("kind", "ensemble", "norms"))):
        try:
            estimator(kind, ensemble=ens, norms=law, d=d)
            out[(kind, ens, law)] = True
        except ValueError:
            out[(kind, ens, law)] = False
    return out


def _strict(text):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------------
# The values are the theory's
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind, ensemble, m", [("positive", "orthogonal", R), ("trig", "iid", R // 2),
                                               ("hyperbolic", "simplex", R // 2), ("oprf", "iid", R)])
def test_a_pair_gets_the_theory_s_exact_mse(one, pair, kind, ensemble, m):
    row = one.row(kind, ensemble, "chi")
    assert row.ranked and row.m == m and row.r == R
    assert row.log_mse == float(theory.exact_mse(*pair, m, kind, ensemble=ensemble, log=True))
    np.testing.assert_allclose(row.mse, theory.exact_mse(*pair, m, kind, ensemble=ensemble),
                               rtol=1e-12)


@pytest.mark.parametrize("kind, ensemble", [("positive", "orthogonal"), ("trig", "iid"),
                                            ("saderf", "iid"), ("aderf", "orthogonal")])
def test_a_population_gets_the_mean_of_the_theory_s_mse_data_fitted_kinds_fitted_on_it(
        many, population, kind, ensemble):
    row = many.row(kind, ensemble, "chi")
    m = R // registry.entry("kind", kind).features_per_projection
    per_pair = theory.exact_mse(*population, m, kind, ensemble=ensemble)  # fitted on the rows
    assert row.ranked and row.m == m
    np.testing.assert_allclose(row.mse, per_pair.mean(), rtol=1e-12)
    np.testing.assert_allclose(row.log_mse, math.log(per_pair.mean()), rtol=1e-12)
    assert many.n_pairs == 40 and many.inputs == "population"


def test_ratio_is_to_favor_plus_iid_at_the_same_budget(one, many):
    for ranking in (one, many):
        base = ranking.row(*BASELINE)
        assert base.ratio == 1.0 and base.m == R
        for row in ranking.ranked:
            np.testing.assert_allclose(row.ratio, row.mse / base.mse, rtol=1e-12)


def test_a_geometry_gives_the_vectors_values(one, pair):
    by_geom = rank_estimators(geom=theory.geometry(*pair), r=R)
    assert by_geom.inputs == "geometry" and by_geom.d == D
    for row in by_geom.ranked:
        assert row.log_mse == one.row(row.kind, row.ensemble, row.norms).log_mse


# ---------------------------------------------------------------------------
# The order and the rows
# ---------------------------------------------------------------------------


def test_ranked_ascending_then_the_unranked(one, many):
    for ranking in (one, many):
        ranked = ranking.ranked
        assert [row.rank for row in ranked] == list(range(1, len(ranked) + 1))
        assert ranking.rows[:len(ranked)] == ranked  # the unranked come after
        logs = [row.log_mse for row in ranked]
        assert logs == sorted(logs)
        assert ranking.best is ranked[0]
        assert all(row.rank is None and row.mse is None and row.reason for row in ranking.unranked)


def test_refused_combinations_are_absent_and_every_accepted_one_is_a_row(one):
    accepted = _combinations(D)
    rows = {(row.kind, row.ensemble, row.norms) for row in one.rows}
    assert rows == {c for c, ok in accepted.items() if ok}
    assert {entry[:3] for entry in one.refused} == {c for c, ok in accepted.items() if not ok}
    assert all(entry[3] and "\n" not in entry[3] for entry in one.refused)
    assert not any(row.kind == "derf" for row in one.rows)  # needs parameters nobody gave
    with pytest.raises(KeyError, match="derf/iid/chi"):
        one.row("derf")


def test_monte_carlo_only_estimators_are_listed_with_the_capability_s_reason(one):
    for ens in ("sorf", "orthogonal-unfixed-qr"):
        row = one.row("positive", ens, "chi")
        assert not row.ranked and row.mse is row.log_mse is row.ratio is None
        assert row.reason == estimator("positive", ensemble=ens).supports.exact_mse.reason
        assert "Monte Carlo only" in row.reason
        assert row.to_dict()["null_reasons"]["mse"] == row.reason


def test_data_fitted_kinds_are_explained_for_a_single_pair(one, many):
    for kind in ("saderf", "aderf", "sderf"):
        row = one.row(kind, "iid", "chi")
        assert not row.ranked and "population" in row.reason and kind in row.reason
        assert many.row(kind, "iid", "chi").ranked
    # a dense fitted A has no orthogonal theory: the fitted estimator's own reason
    row = many.row("sderf", "orthogonal", "chi")
    assert not row.ranked and "Monte Carlo only" in row.reason


def test_a_population_of_one_pair_is_refused_by_the_fit_with_its_reason(pair):
    x, y = pair
    ranking = rank_estimators(x[None], y[None], r=8)
    row = ranking.row("saderf", "iid", "chi")
    assert not row.ranked and "single pair" in row.reason


# ---------------------------------------------------------------------------
# The budget
# ---------------------------------------------------------------------------


def test_the_budget_counts_outputs_two_per_projection_for_trig_and_hyperbolic(pair):
    ranking = rank_estimators(*pair, r=33)
    for kind, m in (("trig", 16), ("hyperbolic", 16), ("positive", 33), ("oprf", 33), ("offset", 33)):
        row = ranking.row(kind, "iid", "chi")
        assert (row.m, row.r, row.outputs) == (m, 33, m * registry.entry("kind", kind).features_per_projection)
    small = rank_estimators(*pair, r=1)
    for kind in ("trig", "hyperbolic"):
        row = small.row(kind, "iid", "chi")
        assert row.m == 0 and not row.ranked and "buy no projection" in row.reason
    assert small.row("positive", "iid", "chi").m == 1


# ---------------------------------------------------------------------------
# Validation and strict JSON
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("args, kwargs, error, name", [
    ("pair", {"r": 0}, ValueError, "r"),
    ("pair", {"r": -3}, ValueError, "r"),
    ("pair", {"r": 2.5}, TypeError, "r"),
    ("none", {"r": 8}, ValueError, "x and y"),
    ("mismatch", {"r": 8}, ValueError, "x and y"),
    ("d", {"r": 8}, ValueError, "d="),
    ("nan", {"r": 8}, ValueError, "x"),
    ("cube", {"r": 8}, ValueError, "x must be"),
    ("empty", {"r": 8}, ValueError, "at least one pair"),
    ("pair", {"r": 8, "kernel": "laplace"}, ValueError, "kernel must be"),
    ("pair", {"r": 8, "kernel": "gaussian"}, ValueError, "gamma"),
    ("pair", {"r": 8, "gamma": 0.5}, ValueError, "gamma"),
    ("both", {"r": 8}, ValueError, "geom and"),
    ("geom", {"r": 8}, ValueError, "geom.s"),
    ("notgeom", {"r": 8}, TypeError, "geom must be"),
])
def test_bad_inputs_raise_one_line_errors_naming_the_argument(pair, args, kwargs, error, name):
    x, y = pair
    X = np.ones((3, D))
    forms = {"pair": ((x, y), {}), "none": ((x,), {}), "mismatch": ((X, X[:2]), {}),
             "d": ((x, y[:4]), {}), "nan": ((np.full(D, np.nan), y), {}),
             "cube": ((X[None], X[None]), {}), "empty": ((X[:0], X[:0]), {}),
             "both": ((x, y), {"geom": theory.geometry(x, y)}),
             "geom": ((), {"geom": theory.Geometry(4.0, 1.0, np.ones(3), 1.0)}),
             "notgeom": ((), {"geom": (4, 1.0, 1.0, 1.0)})}
    positional, extra = forms[args]
    with pytest.raises(error) as info:
        rank_estimators(*positional, **extra, **kwargs)
    text = str(info.value)
    assert name in text and "\n" not in text, text


def test_json_is_strict_where_values_are_zero_overflow_or_absent(one, many):
    cases = [one, many, rank_estimators(*theory.pair(4, 15.0, 15.0, 0.3), r=4),
             rank_estimators(np.zeros(4), np.zeros(4), r=4)]
    for ranking in cases:
        out = ranking.to_dict()
        text = json.dumps(out, allow_nan=False)
        for row in _strict(text)["rows"]:
            for key, value in row.items():
                if value is None:
                    assert row["null_reasons"][key], (key, row)
    big = cases[2].row(*BASELINE)
    assert big.mse is None and big.log_mse > 709 and "beyond float64" in dict(big.null_reasons)["mse"]
    zero = cases[3].row(*BASELINE)
    assert zero.mse == 0.0 and zero.log_mse is None and zero.ratio is None
    assert isinstance(one, Ranking) and rfkernels.rank_estimators is rank_estimators
    assert "rank_estimators" in rfkernels.__all__


# ---------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------


def test_rank_json_parses_and_matches_the_api(capsys, pair):
    assert main(["rank", "--r", str(R), "--d", str(D), "--norm-x", "0.5", "--norm-y", "0.5",
                 "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    api = rank_estimators(*pair, r=R).to_dict()
    assert out["rows"] == api["rows"] and out["r"] == R and out["d"] == D
    assert out["pairs"] is None and out["null_reasons"]["pairs"]


def test_rank_table_and_a_population_file(capsys, population, tmp_path):
    path = tmp_path / "pairs.npz"
    np.savez(path, X=population[0], Y=population[1])
    assert main(["rank", "--r", str(R), "--pairs", str(path)]) == 0
    text = capsys.readouterr().out
    assert "mean over 40 pairs" in text and "positive/iid/chi" in text
    assert "No exact MSE here" in text and "Monte Carlo only" in text
    first = next(line for line in text.splitlines() if line.strip().startswith("1  "))
    assert rank_estimators(*population, r=R).best.name in first
    assert main(["rank", "--r", "8", "--pairs", str(path), "--json"]) == 0
    assert _strict(capsys.readouterr().out)["n_pairs"] == 40


@pytest.mark.parametrize("make, argv, match", [
    (None, ["--pairs", "{dir}/missing.npz"], "No such file"),
    ("noY", ["--pairs", "{file}"], "no array named 'Y'"),
    ("text", ["--pairs", "{file}"], "not a NumPy .npz"),
    ("good", ["--pairs", "{file}", "--d", "4"], "--pairs excludes --d"),
    (None, ["--kernel", "gaussian"], "gamma"),
])
def test_rank_errors_are_one_line(capsys, tmp_path, make, argv, match):
    file = tmp_path / "pairs.npz"
    if make == "noY":
        np.savez(file, X=np.ones((2, 3)))
    elif make == "text":
        file.write_text("not a zip")
    elif make == "good":
        np.savez(file, X=np.ones((2, 3)), Y=np.ones((2, 3)))
    argv = [a.format(dir=tmp_path, file=file) for a in argv]
    assert main(["rank", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("rfkernels rank: error:") and "\n" not in err and match in err, err


def test_the_module_s_examples_run():
    import doctest

    from rfkernels import ranking

    result = doctest.testmod(ranking)
    assert result.attempted >= 3 and result.failed == 0


def test_rank_help_shows_each_default_once(capsys):
    with pytest.raises(SystemExit):
        main(["rank", "--help"])
    text = capsys.readouterr().out
    assert "(default: None)" not in text and "--pairs FILE.npz" in text
    for option, default in (("--r", "64"), ("--d", "16"), ("--kernel", "softmax")):
        entry = " ".join(text.split(f"  {option} ", 1)[1].split("\n  -", 1)[0].split())
        assert entry.count("default") == 1 and f"(default: {default})" in entry, entry
