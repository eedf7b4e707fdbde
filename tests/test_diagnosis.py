"""``rfkernels.analysis.diagnose`` and its advice (:mod:`rfkernels.analysis.diagnosis.advice`).

Validation (every bad input: one line, naming the argument, before any
work), the structure of the result, the exact kernel-level and first-order
statistics against :mod:`rfkernels.theory` and direct formulas (MATH.md,
"Attention-level error to first order"), the temperature convention,
determinism, Monte Carlo against the first-order theory where the tail is
tame (MATH.md, "Monte Carlo error is heavy-tailed") and the flags where it
is not, the advice on hand-made curves, and the null fields.
"""

import json
import math
import warnings

import numpy as np
import pytest

from rfkernels.analysis.diagnosis import study as diagnosis_module
from rfkernels import theory
from rfkernels.analysis import attention_mse_first_order, diagnose
from rfkernels.analysis.diagnosis import EXTRAPOLATE_MAX, R_MAX, SLOPE_MIN, advise
from rfkernels.estimators import registry
from rfkernels.features import feature_dimension, oprf_auto_a

#: The kinds this file knows the theory of (a kind registered later is covered by the
#: structure tests through the registry).
KNOWN_KINDS = ("trig", "positive", "hyperbolic", "oprf")
#: Features per projection of the known kinds (r = m or 2m).
PER_PROJECTION = {"trig": 2, "positive": 1, "hyperbolic": 2, "oprf": 1}
#: Small, fast settings for tests that do not look at the Monte Carlo values.
FAST = dict(m=4, draws=2, pairs=200, first_order_queries=2)


def _qkv(L=6, Lk=5, d=3, dv=2, sigma=0.8, seed=0, lead=()):
    rng = np.random.default_rng(seed)
    q = sigma * rng.standard_normal(lead + (L, d))
    k = sigma * rng.standard_normal(lead + (Lk, d))
    v = rng.standard_normal(lead + (Lk, dv))
    return q, k, v


def _softmax_attention(q, k, v):
    """Exact bidirectional softmax attention, written out here (no library call)."""
    s = q @ k.T
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p @ v


def _one_line(excinfo):
    text = str(excinfo.value)
    assert text and "\n" not in text, repr(text)
    return text


def _by_key(rows):
    return {(r["head"], r["preset"], r["kind"], r["ensemble"], r["m"]): r for r in rows}


# ---------------------------------------------------------------------------
# 1. Validation: one line, naming the argument, before any work
# ---------------------------------------------------------------------------


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if diagnose starts on a head."""
    def refuse(*args, **kwargs):
        raise AssertionError("diagnose did work before refusing its arguments")
    monkeypatch.setattr(diagnosis_module, "_head", refuse)


_Q, _K, _V = _qkv()


def _replace(i, value):
    args = [_Q, _K, _V]
    args[i] = value
    return tuple(args)


_BAD_ARRAYS = [
    ("Q None", (None, _K, _V), ValueError, r"\bQ\b.*missing"),
    ("K None", (_Q, None, _V), ValueError, r"\bK\b.*missing"),
    ("Q complex", _replace(0, _Q + 1j), ValueError, r"Complex data not supported: Q\b"),
    ("K complex", _replace(1, _K.astype(complex)), ValueError, r"Complex data not supported: K\b"),
    ("V complex", _replace(2, 1j * _V), ValueError, r"Complex data not supported: V\b"),
    ("Q object with str", _replace(0, np.array([["a", 1.0, 2.0]] * 6, dtype=object)), ValueError,
     r"^Q must hold real numbers"),
    ("K object with None", _replace(1, np.array([[None, 1.0, 2.0]] * 5, dtype=object)), ValueError,
     r"^K must hold real numbers"),
    ("Q strings", _replace(0, np.array([["1", "2", "3"]] * 6)), ValueError, r"^Q must hold real"),
    ("Q ragged", _replace(0, [[1.0, 2.0, 3.0], [1.0, 2.0]]), ValueError, r"^Q must be an array"),
    ("Q inf", _replace(0, np.where(_Q > 0.5, np.inf, _Q)), ValueError, r"^Q must be finite"),
    ("K -inf", _replace(1, np.where(_K > 0.5, -np.inf, _K)), ValueError, r"^K must be finite"),
    ("K nan", _replace(1, np.full_like(_K, np.nan)), ValueError, r"^K must be finite"),
    ("V nan", _replace(2, np.where(_V > 0, np.nan, _V)), ValueError, r"^V must be finite"),
    ("Q (0, d)", _replace(0, np.zeros((0, 3))), ValueError, r"^Q is empty"),
    ("K (0, d)", (_Q, np.zeros((0, 3)), np.zeros((0, 2))), ValueError, r"^K is empty"),
    ("Q, K (L, 0)", (np.zeros((6, 0)), np.zeros((5, 0)), _V), ValueError, r"^Q is empty"),
    ("V (L_k, 0)", _replace(2, np.zeros((5, 0))), ValueError, r"^V is empty"),
    ("Q 1-D", _replace(0, _Q[0]), ValueError, r"^Q must have shape"),
    ("K 1-D", _replace(1, _K[0]), ValueError, r"^K must have shape"),
    ("V 1-D", _replace(2, _V[:, 0]), ValueError, r"^V must have shape"),
    ("Q 0-D", _replace(0, 1.0), ValueError, r"^Q must have shape"),
    ("d mismatch", _replace(1, _K[:, :2]), ValueError, r"Q has d=3, K has d=2"),
    ("V rows", _replace(2, _V[:4]), ValueError, r"^V must have one row per key.*L_k=5.*V has 4"),
    ("heads Q, K", (np.stack([_Q] * 2), np.stack([_K] * 3), _V), ValueError,
     r"leading \(batch, head\) axes of Q, K, V do not broadcast"),
    ("heads V", (np.stack([_Q] * 2), _K, np.stack([_V] * 3)), ValueError,
     r"leading \(batch, head\) axes of Q, K, V do not broadcast"),
]


@pytest.mark.parametrize("args, exc, match", [c[1:] for c in _BAD_ARRAYS],
                         ids=[c[0] for c in _BAD_ARRAYS])
def test_bad_arrays_raise_one_line_before_any_work(no_work, args, exc, match):
    with pytest.raises(exc, match=match) as excinfo:
        diagnose(*args, **FAST)
    _one_line(excinfo)


def test_missing_k_names_it():
    with pytest.raises(TypeError, match="'K'") as excinfo:
        diagnose(_Q)
    _one_line(excinfo)


_BAD_OPTIONS = [
    ("unknown kind", dict(kinds=["cosine"]), ValueError, r"^kind.*'trig'.*'cosine'"),
    ("empty kinds", dict(kinds=[]), ValueError, r"^kinds must name at least one"),
    ("repeated kinds", dict(kinds=["trig", "positive", "trig"]), ValueError,
     r"^kinds must not repeat"),
    ("unknown ensemble", dict(ensembles=["haar"]), ValueError, r"^ensemble.*'iid'.*'haar'"),
    ("repeated ensembles", dict(ensembles=["iid", "iid"]), ValueError,
     r"^ensembles must not repeat"),
    ("unknown preset", dict(presets=["fast"]), ValueError, r"^presets must be one of"),
    ("unknown norms", dict(norms="unit"), ValueError, r"^norms must be one of 'chi', 'fixed', 'antithetic'"),
    ("m 0", dict(m=0), ValueError, r"^m must be >= 1"),
    ("m repeated", dict(m=[4, 8, 4]), ValueError, r"^m must not repeat"),
    ("m empty", dict(m=[]), ValueError, r"^m must be"),
    ("m fraction", dict(m=2.5), TypeError, r"^m must hold integers"),
    ("m bool", dict(m=True), TypeError, r"^m must be an integer"),
    ("scale 0", dict(scale=0), ValueError, r"^scale must be a positive finite"),
    ("scale -1", dict(scale=-1), ValueError, r"^scale must be a positive finite"),
    ("scale nan", dict(scale=math.nan), ValueError, r"^scale must be a positive finite"),
    ("scale inf", dict(scale=math.inf), ValueError, r"^scale must be a positive finite"),
    ("scale True", dict(scale=True), TypeError, r"^scale must be a positive real"),
    ("scale str", dict(scale="1"), TypeError, r"^scale must be a positive real"),
    ("draws 1", dict(draws=1), ValueError, r"^draws must be an integer >= 2"),
    ("draws fraction", dict(draws=2.5), TypeError, r"^draws must be an integer"),
    ("queries 0", dict(queries=0), ValueError, r"^queries must be an integer >= 1"),
    ("pairs 0", dict(pairs=0), ValueError, r"^pairs must be an integer >= 1"),
    ("first_order_queries -1", dict(first_order_queries=-1), ValueError,
     r"^first_order_queries must be an integer >= 0"),
    ("target 0", dict(target=0), ValueError, r"^target must be a positive finite"),
    ("target nan", dict(target=math.nan), ValueError, r"^target must be a positive finite"),
    ("target inf", dict(target=math.inf), ValueError, r"^target must be a positive finite"),
    ("target True", dict(target=True), TypeError, r"^target must be a positive real"),
    ("budgets 0", dict(budgets=[0]), ValueError, r"^budgets must be >= 1"),
    ("budgets repeated", dict(budgets=[8, 8]), ValueError, r"^budgets must not repeat"),
    ("workers 0", dict(workers=0), ValueError, r"^workers must be an integer >= 1"),
    ("workers True", dict(workers=True), TypeError, r"^workers must be an integer"),
    ("seed -1", dict(seed=-1), ValueError, r"^seed must be"),
    ("seed str", dict(seed="x"), TypeError, r"^seed must be"),
    ("progress not callable", dict(progress=3), TypeError, r"^progress must be callable"),
]


@pytest.mark.parametrize("options, exc, match", [c[1:] for c in _BAD_OPTIONS],
                         ids=[c[0] for c in _BAD_OPTIONS])
def test_bad_options_raise_one_line_before_any_work(no_work, options, exc, match):
    kw = {**FAST, **options}
    with pytest.raises(exc, match=match) as excinfo:
        diagnose(_Q, _K, _V, **kw)
    _one_line(excinfo)


def test_simplex_needs_two_dimensions_before_any_work(no_work):
    with pytest.raises(ValueError, match=r"simplex.*d >= 2.*d=1") as excinfo:
        diagnose(_Q[:, :1], _K[:, :1], _V, ensembles=["iid", "simplex"], **FAST)
    _one_line(excinfo)


def test_no_work_fixture_would_catch_work(no_work):
    """The fixture itself can fail: a valid call reaches ``_head``."""
    with pytest.raises(AssertionError, match="did work"):
        diagnose(_Q, _K, _V, **FAST)


# ---------------------------------------------------------------------------
# 2. Structure
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def six_heads():
    """Q (2, 1, L, d) against K (3, L_k, d): six heads; default kinds, ensembles and presets."""
    q, _, _ = _qkv(lead=(2, 1), seed=1)
    _, k, v = _qkv(lead=(3,), seed=2)
    units = []
    res = diagnose(q, k, v, m=(2, 3), draws=2, pairs=2000, first_order_queries=2, seed=5,
                   progress=units.append, workers=1)
    return q, k, v, res, units


def test_rows_and_summary_cover_the_grid_once(six_heads):
    _, _, _, res, _ = six_heads
    kinds = diagnosis_module.attention_kinds()  # not offset, not the data-fitted kinds (DERF's, tilted)
    assert kinds == tuple(k for k in registry.names("kind")  # nor the hybrid's 27 outputs per projection
                          if k != "offset" and registry.entry("kind", k).pair_transform is None
                          and not registry.entry("kind", k).population
                          and registry.entry("kind", k).features_per_projection <= 2)
    ensembles = diagnosis_module.DEFAULT_ENSEMBLES
    ms = (2, 3)
    assert res.meta["kinds"] == list(kinds)  # every registered kind by default
    assert res.meta["ensembles"] == list(ensembles)
    assert res.meta["presets"] == ["rfkernels"]  # the libraries' numerics on request
    assert res.meta["heads"] == 6 and res.meta["head_shape"] == [2, 3]
    n = len(kinds) * len(ensembles) * len(ms)
    assert len(res.rows) == 6 * n
    assert len(res.summary) == n
    keys = {(r["head"], r["preset"], r["kind"], r["ensemble"], r["m"]) for r in res.rows}
    assert keys == {(h, p, kind, e, m) for h in range(6) for p in ["rfkernels"] for kind in kinds
                    for e in ensembles for m in ms}
    summary_keys = {(r["preset"], r["kind"], r["ensemble"], r["m"]) for r in res.summary}
    assert len(summary_keys) == n
    assert all(r["head"] == "all" and r["heads"] == 6 for r in res.summary)
    assert [h["head"] for h in res.heads] == list(range(6))


def test_r_is_m_or_2m(six_heads):
    _, _, _, res, _ = six_heads
    for row in res.rows + res.summary:
        entry = registry.entry("kind", row["kind"])
        per = PER_PROJECTION.get(row["kind"], entry.features_per_projection)
        assert row["r"] == per * row["m"] == feature_dimension(row["kind"], 3, m=row["m"])


def test_heads_index_histogram_and_u2(six_heads):
    q, k, _, res, _ = six_heads
    edges = np.asarray(res.meta["histogram_edges"])
    root = math.sqrt(res.meta["scale"])
    assert res.meta["scale"] == 1 / math.sqrt(3)
    for h, info in enumerate(res.heads):
        idx = np.unravel_index(h, (2, 3))
        assert info["index"] == [int(i) for i in idx]
        qh, kh = root * q[idx[0], 0], root * k[idx[1]]
        u2 = np.sum((qh[:, None, :] + kh[None, :, :]) ** 2, axis=-1).ravel()
        assert info["all_pairs"] is True
        assert info["pairs"] == u2.size == 30
        assert len(info["histogram_counts"]) == edges.size - 1
        assert sum(info["histogram_counts"]) == info["pairs"]
        np.testing.assert_array_equal(info["histogram_counts"], np.histogram(u2, bins=edges)[0])
        assert info["u2_max"] == pytest.approx(u2.max(), rel=1e-12)
        heavy = np.mean(u2 > diagnosis_module.HEAVY_TAIL_U2)
        assert info["heavy_tail_share"] == pytest.approx(heavy)
        assert info["heavy_tail_share_stderr"] == 0.0
    assert edges[-1] == pytest.approx(max(h["u2_max"] for h in res.heads), rel=1e-12)


def test_oprf_params_are_fitted_on_the_scaled_head(six_heads):
    q, k, _, res, _ = six_heads
    root = math.sqrt(res.meta["scale"])
    for row in res.rows:
        idx = np.unravel_index(row["head"], (2, 3))
        if row["kind"] == "oprf":
            want = oprf_auto_a(root * q[idx[0], 0], root * k[idx[1]])
            assert set(row["params"]) == {"A"}
            assert row["params"]["A"] == pytest.approx(want, rel=1e-12, abs=1e-15)
            assert res.heads[row["head"]]["fitted"]["oprf"]["A"] == row["params"]["A"]
        elif row["kind"] in KNOWN_KINDS:
            assert row["params"] == {}
    # the A of unscaled vectors differs: the fit is on q', k'
    a_unscaled = oprf_auto_a(q[0, 0], k[0])
    a_row = next(r["params"]["A"] for r in res.rows if r["kind"] == "oprf" and r["head"] == 0)
    assert a_row != pytest.approx(a_unscaled, rel=1e-6)


def test_summary_pools_heads(six_heads):
    _, _, _, res, _ = six_heads
    rows = _by_key(res.rows)
    for s in res.summary:
        group = [rows[(h, s["preset"], s["kind"], s["ensemble"], s["m"])] for h in range(6)]
        assert s["attention_mse"] == pytest.approx(np.mean([r["attention_mse"] for r in group]),
                                                   rel=1e-12)
        se = math.sqrt(sum(r["attention_mse_stderr"] ** 2 for r in group)) / 6
        assert s["attention_mse_stderr"] == pytest.approx(se, rel=1e-12)
        uniform = np.mean([r["uniform_mse"] for r in group])
        assert s["uniform_mse"] == pytest.approx(uniform, rel=1e-12)
        assert s["zero_mse"] == pytest.approx(np.mean([r["zero_mse"] for r in group]), rel=1e-12)
        assert s["heads_worse_than_uniform"] == sum(r["worse_than_uniform"] for r in group)
        if s["kernel_reason"] is None:
            # all pairs, the same count per head: the pooled mean is the mean of the heads' means
            assert s["kernel_rel_mse_mean"] == pytest.approx(
                np.mean([r["kernel_rel_mse_mean"] for r in group]), rel=1e-10)
            assert s["kernel_rel_mse_max"] == pytest.approx(
                max(r["kernel_rel_mse_max"] for r in group), rel=1e-12)
            assert s["kernel_rel_mse_mean_stderr"] == 0.0


def test_progress_units(six_heads):
    _, _, _, res, units = six_heads
    assert all(u == 1 for u in units)
    assert sum(units) == res.meta["units"] == 6 * (2 + 2 * 2 * 2)


# ---------------------------------------------------------------------------
# 3. Exactness: kernel level against rfkernels.theory, baselines and first order directly
# ---------------------------------------------------------------------------


def _exact_rel(qs, ks, m, kind, ensemble, norms, A):
    """The exact relative MSE of every pair (i, j), C order, from rfkernels.theory."""
    x = np.repeat(qs, ks.shape[0], axis=0)
    y = np.tile(ks, (qs.shape[0], 1))
    kw = {"A": A} if kind == "oprf" else {}
    mse = theory.exact_mse(x, y, m, kind, ensemble=ensemble, norms=norms, **kw)
    return mse / np.exp(2.0 * np.einsum("ij,ij->i", x, y))


@pytest.mark.parametrize("norms, kinds, ensembles", [
    ("chi", KNOWN_KINDS, ("iid", "orthogonal", "simplex")),
    ("fixed", ("trig", "positive", "hyperbolic"), ("iid", "orthogonal")),
])
def test_kernel_level_is_the_exact_theory_over_all_pairs(norms, kinds, ensembles):
    q, k, v = _qkv(L=6, Lk=5, d=3, sigma=0.8, seed=3)
    ms = (2, 5)  # 5 > d: two orthogonal blocks, the last partial
    res = diagnose(q, k, v, m=ms, kinds=kinds, ensembles=ensembles, norms=norms, draws=2,
                   pairs=30, first_order_queries=0, seed=1)
    info = res.heads[0]
    assert info["all_pairs"] is True and info["pairs"] == 30
    root = math.sqrt(1 / math.sqrt(3))
    qs, ks = root * q, root * k
    for row in res.rows:
        assert row["kernel_reason"] is None
        rel = _exact_rel(qs, ks, row["m"], row["kind"], row["ensemble"], norms,
                         row["params"].get("A"))
        logs = np.log(rel)
        assert row["kernel_rel_mse_mean"] == pytest.approx(rel.mean(), rel=1e-10), row["kind"]
        assert row["kernel_rel_mse_max"] == pytest.approx(rel.max(), rel=1e-10)
        for name, p in (("median", 0.5), ("q90", 0.9), ("q99", 0.99)):
            assert row[f"kernel_rel_mse_{name}"] == pytest.approx(np.exp(np.quantile(logs, p, method="inverted_cdf")),
                                                                  rel=1e-10)
        assert row["kernel_share_rel_mse_above_1"] == pytest.approx(np.mean(rel > 1.0))
        assert row["kernel_rel_mse_mean_stderr"] == 0.0


def test_baselines_are_exact():
    q, k, v = _qkv(L=7, Lk=5, d=4, dv=3, sigma=1.0, seed=4)
    res = diagnose(q, k, v, kinds=["positive"], ensembles=["iid"], **FAST)
    root = math.sqrt(0.5)  # scale = 1/sqrt(4)
    att = _softmax_attention(root * q, root * k, v)
    uniform = np.mean((att - v.mean(axis=0)) ** 2)
    zero = np.mean(att ** 2)
    assert uniform > 1e-3  # not a trivial case
    for table in (res.rows, res.summary):
        for row in table:
            assert row["uniform_mse"] == pytest.approx(uniform, rel=1e-12)
            assert row["zero_mse"] == pytest.approx(zero, rel=1e-12)
            assert row["relative_mse"] == pytest.approx(row["attention_mse"] / zero, rel=1e-12)
    assert res.heads[0]["uniform_mse"] == pytest.approx(uniform, rel=1e-12)
    assert res.heads[0]["exact_mean_square"] == pytest.approx(zero, rel=1e-12)


def _first_order_direct(q, k, v, m, kind):
    """MATH.md's closed forms, written out per query row.

    Returns the first-order MSE (mean over rows and value columns) and the
    normalisers' relative standard deviation sqrt(mean_i Var D_i / D_i^2)
    (the same forms with every a_j = 1: Var D_i = (sum_jj' E[g_j g_j'] - D_i^2)/m).
    """
    total, rel_var = 0.0, 0.0
    n2 = np.sum(k * k, axis=1)
    for qi in q:
        logits = k @ qi
        kij = np.exp(logits)
        den = kij.sum()
        a = v - (kij @ v) / den
        if kind == "positive":
            e = np.exp(qi @ qi + 2 * logits[:, None] + 2 * logits[None, :] + k @ k.T)
        elif kind == "trig":
            z = qi - k
            zp = np.sum((z[:, None] + z[None, :]) ** 2, axis=-1)
            zm = np.sum((z[:, None] - z[None, :]) ** 2, axis=-1)
            e = np.exp(qi @ qi + (n2[:, None] + n2[None, :]) / 2) * 0.5 * (
                np.exp(-zp / 2) + np.exp(-zm / 2))
        else:  # hyperbolic
            u = qi + k
            lam = np.exp(-(qi @ qi + n2) / 2)
            up = np.sum((u[:, None] + u[None, :]) ** 2, axis=-1)
            um = np.sum((u[:, None] - u[None, :]) ** 2, axis=-1)
            e = lam[:, None] * lam[None, :] * 0.5 * (np.exp(up / 2) + np.exp(um / 2))
        total += np.einsum("jc,jk,kc->", a, e, a) / (m * den * den)
        rel_var += (e.sum() / den ** 2 - 1.0) / m
    return total / (q.shape[0] * v.shape[1]), math.sqrt(rel_var / q.shape[0])


def test_first_order_is_the_closed_form_on_all_rows():
    q, k, v = _qkv(L=4, Lk=6, d=3, dv=2, sigma=0.5, seed=6)
    res = diagnose(q, k, v, m=(3, 8), kinds=["trig", "positive", "hyperbolic"], ensembles=["iid"],
                   draws=2, pairs=200, first_order_queries=4, seed=2)
    root = math.sqrt(1 / math.sqrt(3))
    for row in res.rows:
        want, sd = _first_order_direct(root * q, root * k, v, row["m"], row["kind"])
        assert row["first_order_reason"] is None
        assert row["first_order_mse"] == pytest.approx(want, rel=1e-9), row["kind"]
        assert row["normaliser_rel_sd"] == pytest.approx(sd, rel=1e-9), row["kind"]
        assert row["first_order_valid"] is (sd <= diagnosis_module.NORMALISER_SD_MAX)
        assert row["first_order_stderr"] is None  # every row: exact, no sampling error
        ratio = row["first_order_mse"] / row["attention_mse"]
        assert row["first_order_ratio"] == pytest.approx(ratio)


def test_first_order_on_a_row_subset_uses_its_spawn_key():
    q, k, v = _qkv(L=12, Lk=6, d=3, dv=2, sigma=0.5, seed=6)
    res = diagnose(q, k, v, m=4, kinds=["positive"], ensembles=["iid"], draws=2, pairs=200,
                   first_order_queries=3, seed=11)
    root = math.sqrt(1 / math.sqrt(3))
    ss = np.random.SeedSequence(res.meta["entropy"], spawn_key=(4, 0))  # SPAWN_KEYS["first_order"]
    fo = attention_mse_first_order(root * q, root * k, v, 4, "positive", queries=3, seed=ss)
    row = res.rows[0]
    assert row["first_order_mse"] == pytest.approx(fo.mse, rel=1e-12)
    assert row["first_order_stderr"] == pytest.approx(fo.stderr, rel=1e-12)
    assert row["first_order_stderr"] > 0


def test_sampled_pairs_estimate_the_all_pairs_mean():
    """pairs < L L_k: sampled with replacement; the mean and heavy share within 4 stderr."""
    q, k, v = _qkv(L=24, Lk=24, d=4, dv=2, sigma=0.35, seed=7)
    res = diagnose(q, k, v, m=8, kinds=["trig", "positive"], ensembles=["iid"], scale=1.0,
                   draws=2, pairs=400, first_order_queries=0, seed=3)
    info = res.heads[0]
    assert info["all_pairs"] is False and info["pairs"] == 400
    assert sum(info["histogram_counts"]) == 400
    u2 = np.sum((q[:, None] + k[None, :]) ** 2, axis=-1).ravel()
    share = np.mean(u2 > 1.0)
    assert 0.1 < share < 0.9
    assert abs(info["heavy_tail_share"] - share) < 4 * info["heavy_tail_share_stderr"]
    for row in res.rows:
        exact = _exact_rel(q, k, 8, row["kind"], "iid", "chi", None).mean()
        se = row["kernel_rel_mse_mean_stderr"]
        assert se > 0
        assert abs(row["kernel_rel_mse_mean"] - exact) < 4 * se, (row["kind"], exact, se)


# ---------------------------------------------------------------------------
# 4. The temperature convention
# ---------------------------------------------------------------------------


def test_scale_is_split_symmetrically():
    q, k, v = _qkv(L=8, Lk=6, d=4, sigma=1.0, seed=8, lead=(2,))
    s = 0.37
    a = diagnose(q, k, v, scale=s, **FAST)
    b = diagnose(np.sqrt(s) * q, np.sqrt(s) * k, v, scale=1.0, **FAST)
    assert [r["attention_mse"] for r in a.rows] == [r["attention_mse"] for r in b.rows]
    assert a.rows == b.rows and a.heads == b.heads
    assert a.meta["scale"] == s and b.meta["scale"] == 1.0


def test_default_scale_is_one_over_sqrt_d():
    q, k, v = _qkv(L=8, Lk=6, d=4, sigma=1.0, seed=8)
    a = diagnose(q, k, v, **FAST)
    b = diagnose(q, k, v, scale=0.5, **FAST)
    c = diagnose(q, k, v, scale=1.0, **FAST)
    assert a.meta["scale"] == 0.5
    assert a.rows == b.rows
    assert [r["attention_mse"] for r in a.rows] != [r["attention_mse"] for r in c.rows]


# ---------------------------------------------------------------------------
# 5. Determinism
# ---------------------------------------------------------------------------


def test_same_seed_same_result_other_seed_other_draws():
    q, k, v = _qkv(L=10, Lk=8, d=3, seed=9)
    a = diagnose(q, k, v, seed=4, **FAST)
    b = diagnose(q, k, v, seed=4, **FAST)
    c = diagnose(q, k, v, seed=5, **FAST)
    assert a.rows == b.rows and a.summary == b.summary and a.heads == b.heads
    assert a.advice == b.advice
    assert [r["attention_mse"] for r in a.rows] != [r["attention_mse"] for r in c.rows]


def test_fresh_entropy_is_recorded_and_reproduces():
    q, k, v = _qkv(L=10, Lk=8, d=3, seed=9)
    a = diagnose(q, k, v, seed=None, **FAST)
    b = diagnose(q, k, v, seed=a.meta["entropy"], **FAST)
    assert a.rows == b.rows


def test_workers_do_not_change_the_numbers():
    q, k, v = _qkv(L=10, Lk=8, d=3, seed=10, lead=(3,))
    a = diagnose(q, k, v, workers=1, **FAST)
    b = diagnose(q, k, v, workers=2, **FAST)
    assert a.meta["workers"] == 1 and b.meta["workers"] == 2
    assert a.rows == b.rows and a.summary == b.summary and a.heads == b.heads


def test_broadcast_keys_equal_repeated_keys():
    q, _, _ = _qkv(L=10, Lk=8, d=3, seed=11, lead=(3,))
    _, k, v = _qkv(L=10, Lk=8, d=3, seed=12)
    a = diagnose(q, k, v, **FAST)
    b = diagnose(q, np.stack([k] * 3), np.stack([v] * 3), **FAST)
    assert a.meta["head_shape"] == b.meta["head_shape"] == [3]
    assert a.rows == b.rows and a.heads == b.heads
    # the three heads differ (their queries do)
    assert len({r["attention_mse"] for r in a.rows if r["kind"] == "positive"
                and r["ensemble"] == "iid"}) == 3


# ---------------------------------------------------------------------------
# 6. Monte Carlo honesty
# ---------------------------------------------------------------------------

#: Model tolerance of the first-order theory in the tame cases below (its relative
#: departure from the truth; MATH.md: 1.41e-5 vs 1.42e-5 at sigma = 0.1, m = 64).
FIRST_ORDER_TOLERANCE = 0.03


@pytest.mark.parametrize("sigma, m", [(0.1, 64), (0.2, 256)])
def test_monte_carlo_agrees_with_first_order_where_tame(sigma, m):
    L, d = 64, 4
    rng = np.random.default_rng(1)
    q = sigma * rng.standard_normal((L, d))
    k = sigma * rng.standard_normal((L, d))
    v = rng.standard_normal((L, d))
    res = diagnose(q, k, v, m=m, kinds=["positive", "trig"], ensembles=["iid"], scale=1.0,
                   draws=200, queries=L, first_order_queries=L, pairs=2000, seed=3)
    assert res.meta["queries"] == L
    assert res.heads[0]["heavy_tail_share"] < 0.01
    for row in res.rows:
        mc, se, fo = row["attention_mse"], row["attention_mse_stderr"], row["first_order_mse"]
        assert row["draws"] == 200 and row["draws_nonfinite"] == 0
        assert row["first_order_stderr"] is None  # all rows
        assert 0 < se < 0.1 * mc  # resolved
        z = (mc - fo) / math.hypot(se, FIRST_ORDER_TOLERANCE * fo)
        assert abs(z) < 4, (row["kind"], mc, se, fo)
        assert row["normaliser_rel_sd"] < diagnosis_module.NORMALISER_SD_MAX
        assert row["first_order_valid"] is True
        assert row["first_order_ratio"] == pytest.approx(fo / mc)
    if sigma == 0.2:
        assert not any(r["worse_than_uniform"] for r in res.rows)


def test_heavy_tail_flags():
    """N(0, 1) entries, d = 8, scale 1: positive features at m = 4 are worse than uniform."""
    L, d = 64, 8
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((L, d)) for _ in range(3))
    res = diagnose(q, k, v, m=4, kinds=["positive", "trig"], ensembles=["iid"], scale=1.0,
                   draws=32, queries=L, first_order_queries=4, pairs=2000, seed=0)
    assert res.heads[0]["heavy_tail_share"] > 0.5
    for table in (res.rows, res.summary):
        pos = next(r for r in table if r["kind"] == "positive")
        assert pos["worse_than_uniform"] is True
        assert pos["attention_mse"] - pos["uniform_mse"] > 4 * pos["attention_mse_stderr"]
        assert pos["first_order_valid"] is False
        assert pos["normaliser_rel_sd"] > diagnosis_module.NORMALISER_SD_MAX
        assert pos["nonpositive_rows_share"] == 0.0  # positive normalisers
        assert pos["kernel_share_rel_mse_above_1"] > 0.5
    assert next(r for r in res.summary if r["kind"] == "positive")["heads_worse_than_uniform"] == 1
    budget = next(b for b in res.advice["budget"] if b["kind"] == "positive")
    assert budget["worse_than_uniform_at"] == [4]


# ---------------------------------------------------------------------------
# 7. Advice on hand-made curves
# ---------------------------------------------------------------------------


def _row(kind, m, rel, se=0.0, ensemble="iid", preset="rfkernels", worse=False, zero=2.0):
    per = PER_PROJECTION[kind]
    return {"preset": preset, "kind": kind, "ensemble": ensemble, "m": m, "r": per * m,
            "relative_mse": rel, "attention_mse": None if rel is None else rel * zero,
            "attention_mse_stderr": se * zero, "zero_mse": zero, "worse_than_uniform": worse}


def _curve(kind, ms, f, **kw):
    return [_row(kind, m, f(PER_PROJECTION[kind] * m), **kw) for m in ms]


def _budget(advice, kind, ensemble="iid"):
    return next(b for b in advice["budget"] if b["kind"] == kind and b["ensemble"] == ensemble)


def test_advice_at_most_when_the_smallest_r_reaches_target():
    adv = advise(_curve("positive", (16, 64), lambda r: 0.1 / r), 0.01)
    b = _budget(adv, "positive")
    assert (b["r_needed"], b["how"]) == (16, "at most")
    assert adv["target"] == 0.01


@pytest.mark.parametrize("kind, c", [("positive", 1.0), ("positive", 1.234), ("trig", 1.01),
                                     ("trig", 0.5)])
def test_advice_interpolates_a_one_over_r_curve(kind, c):
    target = 0.01
    ms = (8, 32, 128) if kind == "positive" else (4, 16, 64)  # r = 8, 32, 128 (trig: 2m)
    adv = advise(_curve(kind, ms, lambda r: c / r), target)
    b = _budget(adv, kind)
    exact = c / target  # 1/r curve: log-log interpolation is exact
    per = PER_PROJECTION[kind]
    assert 8 < exact < 128  # the crossing is inside the grid
    assert b["how"] == "interpolated"
    assert b["r_needed"] % per == 0  # a whole number of projections (trig: even)
    assert 0 <= b["r_needed"] - exact < per, (b["r_needed"], exact)


@pytest.mark.parametrize("kind, c", [("positive", 1.0), ("positive", 3.3), ("trig", 1.01)])
def test_advice_extrapolates_a_one_over_r_curve(kind, c):
    target = 0.001
    ms = (4, 64) if kind == "positive" else (2, 8)  # r = 4, 64 / 4, 16: not reached (c/r > target)
    adv = advise(_curve(kind, ms, lambda r: c / r), target)
    b = _budget(adv, kind)
    exact = c / target
    per = PER_PROJECTION[kind]
    assert b["how"] == "extrapolated"
    assert b["r_needed"] % per == 0
    assert 0 <= b["r_needed"] - exact < per, (b["r_needed"], exact)


def test_advice_unreachable_for_a_flat_or_slowly_falling_curve():
    flat = _curve("positive", (4, 16, 64), lambda r: 0.5)
    slow = _curve("trig", (2, 8, 32), lambda r: 0.5 * r ** (SLOPE_MIN / 2))
    adv = advise(flat + slow, 0.01)
    for kind in ("positive", "trig"):
        b = _budget(adv, kind)
        assert b["r_needed"] is None and b["how"] == "unreachable", b
    # a slope steeper than SLOPE_MIN whose extrapolation passes R_MAX is unreachable too
    steep_but_far = _curve("positive", (4, 16), lambda r: 0.5 * r ** -0.2)
    assert 16 * (1e-6 / (0.5 * 16 ** -0.2)) ** (1 / -0.2) > R_MAX
    b = _budget(advise(steep_but_far, 1e-6), "positive")
    assert b["r_needed"] is None and b["how"] == "unreachable", b
    # ... as is one whose target lies more than EXTRAPOLATE_MAX times beyond the grid, said so
    far = _budget(advise(steep_but_far, 0.1), "positive")  # r = 16 * 194
    assert far["r_needed"] is None and far["how"] == "unreachable"
    assert far["note"].startswith("not reachable at any practical r: at the local slope -0.20")
    assert f"more than {EXTRAPOLATE_MAX} times the largest r measured (16)" in far["note"]
    # ... while the same curve with a target within the limit is extrapolated (r = 16 * 25.7)
    assert _budget(advise(steep_but_far, 0.15), "positive")["how"] == "extrapolated"


def test_advice_budget_order_and_worse_than_uniform_at():
    rows = (_curve("positive", (4, 16, 64), lambda r: 1.0 / r)
            + _curve("trig", (2, 8, 32), lambda r: 0.2 / r)
            + [_row("hyperbolic", m, 0.5, worse=(m == 8)) for m in (2, 8, 32)])
    adv = advise(rows, 0.01)
    assert [b["kind"] for b in adv["budget"]] == ["trig", "positive", "hyperbolic"]
    assert _budget(adv, "hyperbolic")["worse_than_uniform_at"] == [16]
    assert _budget(adv, "positive")["worse_than_uniform_at"] == []


def test_best_at_grid_points_and_between():
    a = _curve("positive", (16, 64), lambda r: 1.0 / r, se=1e-4)
    b = _curve("positive", (16, 64), lambda r: 2.0 / r, se=1e-4, ensemble="orthogonal")
    adv = advise(a + b, 0.01)
    assert [e["r"] for e in adv["best"]] == [16, 64]  # default: the grid
    at16 = adv["best"][0]
    assert at16["best"]["ensemble"] == "iid" and at16["best"]["measured"] is True
    assert at16["best"]["relative_mse"] == pytest.approx(1 / 16)
    assert at16["best"]["relative_mse_stderr"] == pytest.approx(1e-4)
    assert [e["ensemble"] for e in at16["ranking"]] == ["iid", "orthogonal"]
    assert at16["ahead_of_runner_up"] is True  # gap 1/16 >> 2 hypot(1e-4, 1e-4)
    # between grid points: log-log interpolation (exact for 1/r), never "measured"
    adv = advise(a + b, 0.01, budgets=[32, 1000])
    assert [e["r"] for e in adv["best"]] == [32, 1000]
    at32 = adv["best"][0]
    assert at32["best"]["ensemble"] == "iid" and at32["best"]["measured"] is False
    assert at32["best"]["relative_mse"] == pytest.approx(1 / 32, rel=1e-12)
    assert at32["ranking"][1]["relative_mse"] == pytest.approx(2 / 32, rel=1e-12)
    assert at32["ahead_of_runner_up"] is None  # not both measured
    # beyond every grid: never extrapolated
    assert adv["best"][1]["best"] is None and adv["best"][1]["ranking"] == []


def test_best_ahead_of_runner_up_needs_two_standard_errors():
    a = _curve("positive", (16,), lambda r: 0.100, se=0.01)
    b = _curve("positive", (16,), lambda r: 0.120, se=0.01, ensemble="orthogonal")
    assert advise(a + b, 0.01)["best"][0]["ahead_of_runner_up"] is False  # 0.02 < 2 * 0.0141
    b = _curve("positive", (16,), lambda r: 0.130, se=0.01, ensemble="orthogonal")
    assert advise(a + b, 0.01)["best"][0]["ahead_of_runner_up"] is True  # 0.03 > 0.0283
    # a single estimator has no runner-up
    assert advise(a, 0.01)["best"][0]["ahead_of_runner_up"] is None


def test_best_compares_kinds_at_equal_r_not_equal_m():
    # trig at m = 8 has r = 16, positive at m = 16 has r = 16
    rows = [_row("trig", 8, 0.05, se=1e-4), _row("positive", 16, 0.03, se=1e-4)]
    adv = advise(rows, 0.01)
    assert [e["r"] for e in adv["best"]] == [16]
    assert [e["kind"] for e in adv["best"][0]["ranking"]] == ["positive", "trig"]


def test_diagnose_budgets_reach_the_advice():
    q, k, v = _qkv(L=10, Lk=8, d=3, seed=13)
    res = diagnose(q, k, v, m=(4, 8), kinds=["positive", "trig"], ensembles=["iid"], budgets=[12],
                   draws=2, pairs=200, first_order_queries=0)
    assert [e["r"] for e in res.advice["best"]] == [12]
    res = diagnose(q, k, v, m=(4, 8), kinds=["positive", "trig"], ensembles=["iid"], draws=2,
                   pairs=200, first_order_queries=0)
    assert [e["r"] for e in res.advice["best"]] == [4, 8, 16]
    # measured entries are the summary's relative MSE at that r
    rel = {(s["kind"], s["r"]): s["relative_mse"] for s in res.summary}
    for entry in res.advice["best"]:
        for e in entry["ranking"]:
            if e["measured"]:
                assert e["relative_mse"] == rel[(e["kind"], entry["r"])]


# ---------------------------------------------------------------------------
# 8. Null handling
# ---------------------------------------------------------------------------


def test_no_exact_theory_gives_none_with_a_reason():
    q, k, v = _qkv(L=6, Lk=5, d=4, seed=14)
    res = diagnose(q, k, v, kinds=KNOWN_KINDS, ensembles=["iid", "sorf", "orthogonal-unfixed-qr"],
                   **FAST)
    kernel_fields = [f for f in res.rows[0] if f.startswith("kernel_") and f != "kernel_reason"]
    assert len(kernel_fields) == 7
    for table in (res.rows, res.summary):
        for row in table:
            if row["ensemble"] == "iid":
                assert row["kernel_reason"] is None
                assert all(isinstance(row[f], float) for f in kernel_fields)
            else:
                assert isinstance(row["kernel_reason"], str) and row["kernel_reason"]
                assert all(row[f] is None for f in kernel_fields), row
            if row["ensemble"] != "iid" or row["kind"] == "oprf":
                assert isinstance(row["first_order_reason"], str) and row["first_order_reason"]
                assert row["first_order_mse"] is None and row["first_order_valid"] is None
                assert row["first_order_ratio"] is None and row["first_order_stderr"] is None
                assert row["normaliser_rel_sd"] is None
            else:
                assert row["first_order_reason"] is None
                assert row["first_order_mse"] > 0 and row["normaliser_rel_sd"] > 0
            # the Monte Carlo is there for every cell
            assert row["attention_mse"] > 0 and row["attention_mse_stderr"] > 0


def test_first_order_queries_zero_and_no_iid_give_reasons():
    q, k, v = _qkv(L=6, Lk=5, d=3, seed=15)
    res = diagnose(q, k, v, kinds=["positive"], ensembles=["iid"], m=4, draws=2, pairs=200,
                   first_order_queries=0)
    assert "first_order_queries" in res.rows[0]["first_order_reason"]
    res = diagnose(q, k, v, kinds=["positive"], ensembles=["orthogonal"], **FAST)
    assert "iid" in res.rows[0]["first_order_reason"]
    assert res.summary[0]["first_order_reason"] == res.rows[0]["first_order_reason"]


# ---------------------------------------------------------------------------
# 9. Synthetic values
# ---------------------------------------------------------------------------


def test_synthetic_values_are_recorded_and_regenerable():
    q, k, _ = _qkv(L=6, Lk=5, d=3, seed=16)
    a = diagnose(q, k, **FAST)
    assert a.meta["values"].startswith("synthetic")
    assert a.meta["d_v"] == 3 and a.heads[0]["d_v"] == 3
    # SPAWN_KEYS["values"]: (0, head) under the root entropy, N(0, 1) entries
    v = np.random.default_rng(np.random.SeedSequence(a.meta["entropy"], spawn_key=(0, 0))) \
        .standard_normal((5, 3))
    b = diagnose(q, k, v, **FAST)
    assert b.meta["values"] == "given"
    assert a.rows == b.rows


# ---------------------------------------------------------------------------
# Edge cases that were bugs: values beyond float64, theories out of range, exact estimates
# ---------------------------------------------------------------------------


def test_kernel_error_beyond_float64_is_inf_not_a_crash():
    q = np.full((2, 1), 18.0)  # |q' + k'|^2 = 1296: log relative MSE of positive ~ 1296
    res = diagnose(q, q, np.eye(2)[:, :1], m=1, draws=2, scale=1.0, kinds=["positive"],
                   ensembles=["iid"], first_order_queries=0)
    assert res.rows[0]["kernel_rel_mse_max"] == math.inf
    doc = json.loads(json.dumps(res.to_dict(), allow_nan=False))  # strict: inf became null
    row = doc["rows"][0]
    assert row["kernel_rel_mse_max"] is None
    assert row["null_reasons"]["kernel_rel_mse_max"] == "beyond float64"


def test_simplex_theory_out_of_range_gives_a_reason():
    q = np.array([[30.0, 30.0], [30.0, 29.0]])
    res = diagnose(q, q, m=2, draws=2, scale=1.0, kinds=["positive"], ensembles=["simplex"],
                   first_order_queries=0)
    row = res.rows[0]
    assert isinstance(row["kernel_reason"], str) and row["kernel_reason"]
    assert row["kernel_rel_mse_mean"] is None


def test_zero_kernel_error_reads_zero():
    q = np.ones((2, 2))  # q = k: trig estimates are exact (cos 0 = 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no invalid-value warning either
        res = diagnose(q, q, np.eye(2), m=4, draws=2, kinds=["trig"], ensembles=["iid"],
                       first_order_queries=0)
    row = res.rows[0]
    assert row["kernel_rel_mse_max"] == 0.0
    assert row["kernel_rel_mse_mean"] == 0.0 and row["kernel_rel_mse_median"] == 0.0


# ---------------------------------------------------------------------------
# Presets: the libraries' numerics beside the estimator
# ---------------------------------------------------------------------------


def test_presets_run_the_kinds_they_offer_with_their_epsilon_share():
    from rfkernels.presets import PRESETS as ENTRIES

    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(24, 4)), 2.0 * rng.normal(size=(24, 4)), rng.normal(size=(24, 2))
    res = diagnose(q, k, v, m=(8,), kinds=["trig", "positive", "hyperbolic"], ensembles=["iid"],
                   presets=list(ENTRIES), draws=2, pairs=100, first_order_queries=0)
    cells = {(r["preset"], r["kind"]) for r in res.rows}
    assert cells == {("rfkernels", "trig"), ("rfkernels", "positive"), ("rfkernels", "hyperbolic"),
                     ("performer-pytorch", "positive"), ("google-research", "positive"),
                     ("xformers", "positive"), ("xformers", "hyperbolic")}
    by = {(r["preset"], r["kind"]): r for r in res.rows}
    assert by[("rfkernels", "positive")]["stabiliser_share_mean"] is None
    assert by[("xformers", "positive")]["stabiliser_share_max"] == 0.0
    # performer-pytorch adds 1e-4 to every feature: a positive share, larger than google's 1e-6
    torch_share = by[("performer-pytorch", "positive")]["stabiliser_share_mean"]
    google_share = by[("google-research", "positive")]["stabiliser_share_mean"]
    assert 0 < google_share < torch_share < 1
    # xformers computes the estimator itself (its 1e-6 sits inside the exponent and cancels)
    assert by[("xformers", "positive")]["attention_mse"] == pytest.approx(
        by[("rfkernels", "positive")]["attention_mse"], rel=1e-9)
    # library rows say why they have no kernel-level or first-order theory
    assert "preset 'rfkernels'" in by[("performer-pytorch", "positive")]["kernel_reason"]
    doc = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert all("stabiliser_share_mean" in r["null_reasons"] for r in doc["rows"]
               if r["preset"] == "rfkernels")


def test_presets_without_a_requested_kind_are_refused_before_any_work():
    q = np.ones((4, 2))
    with pytest.raises(ValueError, match="offers 'positive' only"):
        diagnose(q, q, kinds=["trig"], presets=["performer-pytorch"], m=2, draws=2)


def test_dtypes_axis_reports_rounding_beside_sampling():
    rng = np.random.default_rng(5)
    q, k, v = 0.3 * rng.normal(size=(32, 4)), 0.3 * rng.normal(size=(32, 4)), rng.normal(size=(32, 2))
    base = diagnose(q, k, v, m=(8,), kinds=["positive"], ensembles=["iid"], draws=3, pairs=100,
                    first_order_queries=0)
    assert base.precision == [] and base.meta["dtypes"] == ["float64"]
    res = diagnose(q, k, v, m=(8,), kinds=["positive"], ensembles=["iid"], draws=3, pairs=100,
                   first_order_queries=0, dtypes=["float16", "float32"])
    assert res.meta["dtypes"] == ["float64", "float16", "float32"]
    assert res.rows == base.rows  # the dtype axis changes nothing else
    by = {r["dtype"]: r for r in res.precision}
    assert set(by) == {"float16", "float32"} and all(r["draws"] == 3 for r in by.values())
    # float32 rounding is ~1e-7 relative, float16 ~1e-3: both far below the sampling error here
    assert 0 < by["float32"]["rounding_mse"] < 1e-3 * by["float16"]["rounding_mse"]
    assert by["float16"]["rounding_to_sampling"] < 1e-2
    assert by["float16"]["sampling_mse"] == res.rows[0]["attention_mse"]
    with pytest.raises(ValueError, match="dtypes"):
        diagnose(q, k, v, m=(8,), draws=2, dtypes=["float8"])


# ---------------------------------------------------------------------------
# Review findings: ties, exact estimates, fixed norms, off-grid budgets, overflow rows
# ---------------------------------------------------------------------------


def test_first_order_refuses_fixed_norms():
    rng = np.random.default_rng(8)
    q, k = 0.3 * rng.normal(size=(16, 4)), 0.3 * rng.normal(size=(16, 4))
    res = diagnose(q, k, m=(8,), kinds=["positive"], ensembles=["iid"], norms="fixed", draws=2,
                   pairs=50, first_order_queries=2)
    row = res.rows[0]
    assert row["first_order_mse"] is None and row["first_order_valid"] is None
    assert "chi norms" in row["first_order_reason"]


def test_rounding_is_not_worse_than_an_exact_uniform_baseline():
    # one key: every estimator returns v_1 (to rounding), and so does uniform attention
    rng = np.random.default_rng(9)
    q, k, v = rng.normal(size=(6, 3)), rng.normal(size=(1, 3)), rng.normal(size=(1, 2))
    res = diagnose(q, k, v, m=(2, 8), kinds=["positive", "hyperbolic"], ensembles=["iid"],
                   draws=3, pairs=10, first_order_queries=0)
    for row in res.rows + res.summary:
        assert row["uniform_mse"] == 0.0 and row["attention_mse"] < 1e-28
        assert not row["worse_than_uniform"] and not row["better_than_uniform"]


def test_exact_estimates_reach_any_target_at_the_smallest_r():
    q, k, v = np.zeros((6, 4)), np.zeros((5, 4)), np.ones((5, 2))
    res = diagnose(q, k, v, m=(2, 8), kinds=["positive"], ensembles=["iid"], draws=2, pairs=10,
                   first_order_queries=0)
    assert all(r["relative_mse"] == 0.0 for r in res.summary)
    (entry,) = res.advice["budget"]
    assert entry["r_needed"] == 2 and entry["how"] == "at most"
    assert res.advice["best"][0]["best"]["relative_mse"] == 0.0


def test_a_budget_outside_the_grid_says_so():
    rng = np.random.default_rng(10)
    q, k = 0.3 * rng.normal(size=(8, 4)), 0.3 * rng.normal(size=(8, 4))
    res = diagnose(q, k, m=(4, 8), kinds=["positive"], ensembles=["iid"], draws=2, pairs=20,
                   first_order_queries=0, budgets=[1, 6, 100000])
    far = {e["r"]: e for e in res.advice["best"]}
    assert far[1]["best"] is None and "outside" in far[1]["note"]
    assert far[6]["best"] is not None and far[6]["note"] is None
    doc = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert "outside" in doc["advice"]["best"][2]["null_reasons"]["best"]


def test_dtypes_report_each_maps_overflow_on_the_data():
    rng = np.random.default_rng(11)
    q, k, v = rng.normal(size=(16, 4)), rng.normal(size=(16, 4)), rng.normal(size=(16, 2))
    w_row = k.copy()
    res = diagnose(q, w_row, v, m=(4,), kinds=["positive"], ensembles=["iid"],
                   presets=["rfkernels", "xformers"], draws=2, pairs=20, first_order_queries=0,
                   dtypes=["float16"], scale=1.0)
    got = {(r["preset"], r["dtype"]) for r in res.overflow}
    assert got == {("rfkernels", "float64"), ("rfkernels", "float16"), ("xformers", "float64"),
                   ("xformers", "float16")}
    assert all(r["head"] == 0 and r["m"] == 4 for r in res.overflow)
    doc = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    for row in doc["overflow"] + doc["precision"]:
        for key, value in row.items():
            assert value is not None or key in row.get("null_reasons", {}), key
