"""RandomFourierFeatures.n_components_for: the least output dimension meeting an exact error target."""

import numpy as np
import pytest

from rfkernels import RandomFourierFeatures

X = np.random.default_rng(4).normal(size=(30, 5))
GAMMA = 0.15
CASES = [(k, e) for k in ("offset", "trig") for e in ("iid", "orthogonal", "simplex")]


def _fitted(r, kind, ensemble):
    return RandomFourierFeatures(gamma=GAMMA, n_components=r, kind=kind,
                                 ensemble=ensemble, random_state=0).fit(X)


@pytest.mark.parametrize("kind, ensemble", CASES)
def test_frobenius_target_is_met_at_r_and_not_one_step_below(kind, ensemble):
    rff = RandomFourierFeatures(gamma=GAMMA, kind=kind, ensemble=ensemble)
    step = 2 if kind == "trig" else 1
    for target in (0.2, 0.03):
        r = rff.n_components_for(X, target)
        assert r % step == 0
        assert _fitted(r, kind, ensemble).expected_mse(X).relative_frobenius <= target
        if r > step:
            assert _fitted(r - step, kind, ensemble).expected_mse(X).relative_frobenius > target


@pytest.mark.parametrize("kind, ensemble", CASES[:2] + CASES[3:5])
def test_quantile_target_is_met_at_r_and_not_one_step_below(kind, ensemble):
    rff = RandomFourierFeatures(gamma=GAMMA, kind=kind, ensemble=ensemble)
    step = 2 if kind == "trig" else 1
    r = rff.n_components_for(X, 2e-3, criterion="quantile", q=0.8)
    assert np.quantile(_fitted(r, kind, ensemble).expected_mse(X).entries, 0.8) <= 2e-3
    assert np.quantile(_fitted(r - step, kind, ensemble).expected_mse(X).entries, 0.8) > 2e-3


def test_monotone_in_the_target_and_gamma_scale_resolved_on_x():
    rff = RandomFourierFeatures(gamma="scale", kind="trig", ensemble="orthogonal")
    rs = [rff.n_components_for(X, t) for t in (0.5, 0.1, 0.05, 0.01, 0.005)]
    assert rs == sorted(rs) and rs[0] < rs[-1]
    assert not hasattr(rff, "projections_")  # no fit needed, none made


def test_iid_offset_follows_one_over_r():
    """iid: the error is S/r exactly, so halving the target doubles r (to rounding up)."""
    rff = RandomFourierFeatures(gamma=GAMMA)
    r1, r2 = rff.n_components_for(X, 0.02), rff.n_components_for(X, 0.01)
    assert abs(r2 - 2 * r1) <= 2


@pytest.mark.parametrize("kwargs, error, match", [
    ({"target": 0.0}, ValueError, "target must be a finite number > 0"),
    ({"target": float("nan")}, ValueError, "target must be a finite number > 0"),
    ({"target": "small"}, TypeError, "target must be a finite number > 0"),
    ({"target": 0.1, "criterion": "max"}, ValueError, "criterion must be one of"),
    ({"target": 0.1, "criterion": "quantile", "q": 1.5}, ValueError, r"q must be in \(0, 1\]"),
    ({"target": 1e-300}, ValueError, "is not met below n_components="),
])
def test_bad_requests_are_one_line_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        RandomFourierFeatures(gamma=GAMMA).n_components_for(X, **kwargs)


def test_sorf_has_no_exact_value():
    with pytest.raises(ValueError, match="no closed form for the sorf ensemble"):
        RandomFourierFeatures(ensemble="sorf").n_components_for(X, 0.1)
