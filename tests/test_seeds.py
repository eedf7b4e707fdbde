"""One seed helper: None, int, SeedSequence and Generator are accepted everywhere."""

import numpy as np
import pytest

from rfkernels import draw_projections, rng, theory
from rfkernels.analysis import compare, monte_carlo_mse
from rfkernels.validation import check_seed, seed_sequence


def test_seed_sequence_forms():
    assert seed_sequence(7).entropy == 7
    seq = np.random.SeedSequence(3, spawn_key=(1,))
    assert seed_sequence(seq) is seq
    assert isinstance(seed_sequence(None), np.random.SeedSequence)
    gen = np.random.default_rng(0)
    a = seed_sequence(gen)  # consumes the generator once: 128 bits of entropy
    b = seed_sequence(np.random.default_rng(0))
    assert a.entropy == b.entropy and a.entropy >= 2**64
    assert seed_sequence(gen).entropy != a.entropy  # the generator advanced
    with pytest.raises(ValueError, match="root SeedSequence"):
        seed_sequence(seq, root=True)
    for bad in (1.5, "3", True, np.bool_(True)):
        with pytest.raises(TypeError, match="seed must be None, a non-negative int"):
            seed_sequence(bad)
    with pytest.raises(ValueError, match="non-negative"):
        seed_sequence(-1)
    assert seed_sequence(np.random.SeedSequence([1, 2])).entropy == [1, 2]


def test_check_seed_keeps_a_generator_and_seeds_the_rest():
    gen = np.random.default_rng(1)
    assert check_seed(gen) is gen
    assert check_seed(5).standard_normal() == np.random.default_rng(np.random.SeedSequence(5)).standard_normal()


def test_monte_carlo_mse_accepts_a_generator_and_records_its_entropy():
    x, y = theory.pair(4, 0.3, 0.3, 1.0)
    res = monte_carlo_mse(x, y, 4, "positive", trials=2000, seed=np.random.default_rng(42))
    again = monte_carlo_mse(x, y, 4, "positive", trials=2000,
                            seed=np.random.SeedSequence(res.seed_entropy, spawn_key=res.seed_spawn_key))
    assert res.mse == again.mse and res.seed_entropy == seed_sequence(np.random.default_rng(42)).entropy


def test_a_list_entropy_is_recorded_and_reproduces():
    x, y = theory.pair(4, 0.3, 0.3, 1.0)
    res = monte_carlo_mse(x, y, 4, "positive", trials=500, seed=np.random.SeedSequence([1, 2]))
    assert res.seed_entropy == (1, 2)
    again = monte_carlo_mse(x, y, 4, "positive", trials=500,
                            seed=np.random.SeedSequence(list(res.seed_entropy)))
    assert again.mse == res.mse
    rows = compare([{"d": 4, "norm_x": 0.3, "norm_y": 0.3, "angle": 1.0}], "positive", "iid", 2,
                   trials=100, seed=np.random.SeedSequence([1, 2]))
    assert len(rows) == 1


def test_every_entry_takes_every_seed_form():
    x, y = theory.pair(4, 0.3, 0.3, 1.0)
    geom = {"d": 4, "norm_x": 0.3, "norm_y": 0.3, "angle": 1.0}
    for seed in (None, 3, np.random.SeedSequence(3), np.random.default_rng(3)):
        assert rng.key_from_seed(seed).shape == (2,)
        assert draw_projections(4, 4, ensemble="orthogonal", seed=seed).shape == (4, 4)
        assert monte_carlo_mse(x, y, 2, "trig", trials=100, seed=seed).trials == 100
        assert len(compare([geom], "positive", "iid", 2, trials=100, seed=seed)) == 1
