"""Every figure renders (Agg, --quick), and the data it plots is the theory it claims."""

import itertools
import json
import os
import re

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from rfkernels import theory
from rfkernels.commands.cli import main
from rfkernels.figures import FIGURES, figure_module, make_figures


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Every figure, --quick, on 2 worker processes (the default of ``rfkernels figures`` on 2 CPUs)."""
    out = tmp_path_factory.mktemp("figures")
    return out, make_figures(str(out), quick=True, seed=3, workers=2)


def test_every_figure_is_written_with_its_data(quick):
    out, results = quick
    assert set(results) == set(FIGURES)
    for name, res in results.items():
        exts = {os.path.splitext(p)[1] for p in res.paths}
        assert {".pdf", ".png", ".csv"} <= exts, name
        for p in res.paths:
            assert os.path.getsize(p) > 0, p
        png = next(p for p in res.paths if p.endswith(".png"))
        with open(png, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_ratio_heatmap_is_the_closed_form(quick):
    data = quick[1]["ratio"].data
    length = np.array([r["length"] for r in data["heatmap"]])
    phi = np.array([r["angle"] for r in data["heatmap"]])
    sm = np.exp(length**2 * np.cos(phi))
    s = 2 * length**2 * (1 + np.cos(phi))
    t = 2 * length**2 * (1 - np.cos(phi))
    want = np.log10((1 - np.exp(-t)) ** 2 / (2 * sm**4 * (1 - np.exp(-s))))
    np.testing.assert_allclose([r["log10_ratio"] for r in data["heatmap"]], want, rtol=1e-9, atol=1e-12)
    # symmetric in the length and in the angle, as in the paper
    n_l, n_phi = data["shape"]
    heat = np.array([r["log10_ratio"] for r in data["heatmap"]]).reshape(n_l, n_phi)
    np.testing.assert_allclose(heat, heat[::-1, :], rtol=1e-9)
    np.testing.assert_allclose(heat, heat[:, ::-1], rtol=1e-9)
    for r in data["monte_carlo"]:
        assert r["ratio_theory"] == pytest.approx(
            np.interp(r["angle"], [s_["angle"] for s_ in data["slice"]],
                      [s_["ratio"] for s_ in data["slice"]]), rel=2e-2)


def test_mse_vs_m_curves_are_the_theory(quick):
    data = quick[1]["mse_vs_m"].data
    mod = figure_module("mse_vs_m")
    x, y = theory.pair(mod.D, mod.NORM, mod.NORM, mod.ANGLE)
    for r in data["lines"][:: 7]:
        assert r["exact_orthogonal"] == pytest.approx(
            float(theory.exact_mse(x, y, r["m"], r["kind"], ensemble="orthogonal")), rel=1e-12)
        assert r["lemma2"] == pytest.approx(float(theory.lemma2_mse(x, y, r["m"], r["kind"])), rel=1e-12)
        if r["kind"] == "positive" and r["m"] <= mod.D:
            assert r["theorem2_bound"] == pytest.approx(float(theory.theorem2_bound(x, y, r["m"])),
                                                        rel=1e-12)
            assert r["exact_orthogonal"] <= r["theorem2_bound"] * (1 + 1e-12)
        else:
            assert np.isnan(r["theorem2_bound"])
    for r in data["monte_carlo"]:
        assert r["mse_exact"] == pytest.approx(
            float(theory.exact_mse(x, y, r["m"], r["kind"], ensemble=r["ensemble"])), rel=1e-12)
        if r["tail_ok"]:
            assert abs(r["z"]) < 4, r


def test_mse_vs_angle_and_feature_budget_are_the_theory(quick):
    for name in ("mse_vs_angle", "feature_budget"):
        mod = figure_module(name)
        data = quick[1][name].data
        for r in data["lines"][:: 11]:
            m = r.get("m", getattr(mod, "M", None))
            x, y = theory.pair(mod.D, mod.NORM, mod.NORM, r["angle"])
            assert r["mse_exact"] == pytest.approx(
                float(theory.exact_mse(x, y, m, r["kind"], ensemble=r["ensemble"])), rel=1e-12)
    budget = quick[1]["feature_budget"].data["lines"]
    r_dim = {row["kind"]: (row["m"] if row["kind"] == "positive" else 2 * row["m"]) for row in budget}
    assert len(set(r_dim.values())) == 1  # the same feature dimension for every kind


def test_orthogonality_gain_is_exact_and_within_theorem2(quick):
    rows = quick[1]["orthogonality_gain"].data["rows"]
    for r in rows:
        if r["kind"] == "positive":
            assert r["gain"] <= 1.0 + 1e-12
            if not np.isnan(r["theorem2_ratio"]):
                assert r["gain"] <= r["theorem2_ratio"] + 1e-12
    r = rows[len(rows) // 3]
    size = r["size"] / np.sqrt(2)
    x, y = theory.pair(r["d"], size, size, np.pi / 2)
    want = theory.exact_mse(x, y, r["m"], r["kind"], ensemble="orthogonal") / theory.exact_mse(
        x, y, r["m"], r["kind"])
    assert r["gain"] == pytest.approx(float(want), rel=1e-12)


def test_bias_audit_figure_shows_the_bias(quick):
    rows = quick[1]["bias_audit"].data["rows"]
    unfixed = {r["direction"]: r for r in rows if r["ensemble"] == "orthogonal-unfixed-qr"}
    haar = [r for r in rows if r["ensemble"] == "orthogonal"]
    assert unfixed["ones"]["relative_bias"] < -0.08 and unfixed["ones"]["biased"]
    assert sum(abs(r["z"]) > 4 for r in haar) == 0


def test_attention_figure_has_every_series(quick):
    rows = quick[1]["attention"].data["rows"]
    mod = figure_module("attention")
    cfg = mod.settings(True)
    assert len(rows) == len(cfg["m_values"]) * 3 * 2
    assert all(r["mse_mean"] > 0 for r in rows)


def test_cli_figures_quick_subset_and_report(tmp_path, capsys):
    assert main(["figures", "--out", str(tmp_path), "--quick", "--only", "orthogonality_gain"]) == 0
    assert (tmp_path / "orthogonality_gain.png").exists()
    assert "theory against Monte Carlo" in (tmp_path / "report.md").read_text()
    assert main(["figures", "--list"]) == 0
    assert "bias_audit" in capsys.readouterr().out
    assert main(["figures", "--out", str(tmp_path), "--only", "nope"]) == 2
    assert "unknown figure 'nope'" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# report.md: valid Markdown with provenance; figures.json strict JSON (issue 9)
# ---------------------------------------------------------------------------

def _unescaped_pipes(line):
    return len(re.findall(r"(?<!\\)\|", line))


def _strict_json(text):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_report_table_is_valid_markdown(quick):
    out, results = quick
    text = (out / "report.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("|")]
    header, separator, body = table[0], table[1], table[2:]
    n = _unescaped_pipes(header)
    assert len(body) == len(results)
    for line in table:
        assert _unescaped_pipes(line) == n, line
    assert re.fullmatch(r"\|(?:\s*:?-{3,}:?\s*\|)+", separator)
    assert separator.count("|") == n
    assert r"\|z\|" in header
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(text)
    assert html.count("<table>") == 1
    assert html.count("<th>") == n - 1
    assert html.count("<td>") == (n - 1) * len(results)


def test_report_and_manifest_record_provenance(quick):
    import rfkernels
    from rfkernels.storage import git_revision

    out, results = quick
    text = (out / "report.md").read_text()
    assert f"rfkernels {rfkernels.__version__}" in text
    assert (git_revision() or "unknown (not a git checkout)") in text
    assert "seed 3" in text and "--quick mode" in text and "elapsed" in text
    assert "4,000 trials per point" in text and "numba" in text  # Monte Carlo figures
    assert "2,000 trials per direction" in text  # bias audit
    meta = _strict_json((out / "figures.json").read_text())
    assert meta["format"] == "rfkernels-figures/1" and meta["status"] == "complete"
    assert meta["seed"] == 3 and meta["quick"] is True and meta["elapsed_seconds"] > 0
    assert meta["versions"]["rfkernels"] == rfkernels.__version__
    assert meta["git_revision"] == git_revision()
    assert {"report.md", "ratio.pdf", "ratio_heatmap.csv"} <= set(meta["files"])
    assert {s["figure"] for s in meta["summary"]} == set(results)


#: Figures with kernel-level Monte Carlo points (proposal "auto", see figures/_mc.py).
MC_FIGURES = ("ratio", "mse_vs_m", "mse_vs_angle", "feature_budget", "beyond")


def test_monte_carlo_points_record_their_proposal(quick):
    """Every kernel-level point says which law its trials came from; trig is never tilted."""
    from rfkernels.figures._mc import COLUMNS

    assert {"proposal", "ess", "k_hat", "max_share", "tail_ok"} <= set(COLUMNS)
    tilted = 0
    for name in MC_FIGURES:
        data = quick[1][name].data
        assert data["run"]["proposal"] == "auto", name
        for r in data["monte_carlo"]:
            assert r["proposal"] in ("plain", "tilted"), (name, r)
            if r.get("kind") == "trig" or r.get("method") == "literal":
                assert r["proposal"] == "plain", (name, r)
            if "ess" in r:
                assert (r["ess"] < r["trials"]) if r["proposal"] == "tilted" else (
                    r["ess"] == r["trials"]), (name, r)
            tilted += r["proposal"] == "tilted"
    assert tilted > 0  # the heavy-tailed points (|x + y|^2 up to ~4 here) are tilted


def test_report_counts_tilted_and_hollow_points(quick):
    from rfkernels.figures.report import summarise

    out, results = quick
    lines, _ = summarise(results)
    by_name = {line["figure"]: line for line in lines}
    for name in MC_FIGURES:
        rows, line = results[name].data["monte_carlo"], by_name[name]
        assert line["tilted"] == sum(r["proposal"] == "tilted" for r in rows)
        assert line["hollow_with_theory"] == sum(r["tail_ok"] is not True for r in rows)
    meta = _strict_json((out / "figures.json").read_text())
    assert [s.get("tilted") for s in meta["summary"]] == [line.get("tilted") for line in lines]
    text = (out / "report.md").read_text()
    assert "| tilted | hollow with theory |" in text
    tilted = sum(line.get("tilted", 0) for line in lines)
    hollow = sum(line.get("hollow_with_theory", 0) for line in lines)
    assert (f"{tilted} Monte Carlo point(s) drew their trials from the tilted" in text
            and f"{hollow} point(s) where theory exists are still drawn hollow" in text)


def test_hollow_points_are_counted_only_where_theory_exists():
    from rfkernels.figures._common import FigureResult
    from rfkernels.figures.report import summarise

    nan = float("nan")
    rows = [{"z": 0.5, "tail_ok": True, "mse_exact": 1.0, "proposal": "tilted"},
            {"z": 1.0, "tail_ok": False, "mse_exact": 1.0, "proposal": "plain"},
            {"z": nan, "tail_ok": False, "mse_exact": nan, "proposal": "plain"},  # no theory
            {"z": nan, "tail_ok": False, "mse_exact": None, "proposal": "tilted"}]
    (line,), bad = summarise({"f": FigureResult("f", [], {"monte_carlo": rows, "run": {}})})
    assert line["tilted"] == 2 and line["hollow_with_theory"] == 1 and line["heavy_tailed"] == 3
    assert bad == 0


def test_report_escapes_pipes_in_cells():
    from rfkernels.figures.report import markdown_table

    lines = markdown_table(["a|b", "c"], [["|x+y|", 1]])
    assert lines[0] == r"| a\|b | c |" and lines[2] == r"| \|x+y\| | 1 |"
    with pytest.raises(ValueError, match="cells"):
        markdown_table(["a"], [[1, 2]])


# ---------------------------------------------------------------------------
# --out: foreign files refused, a file / unwritable folder refused before any work
# ---------------------------------------------------------------------------

@pytest.fixture
def no_compute(monkeypatch):
    """Make any figure computation fail the test: --out must be refused before it."""
    from rfkernels import figures

    calls = []

    def forbidden(module, *args, **kwargs):
        calls.append(module.NAME)
        raise AssertionError(f"figure {module.NAME} computed before --out was checked")

    monkeypatch.setattr(figures, "make_figure", forbidden)
    return calls


def _one_line_error(capsys, *words):
    err = capsys.readouterr().err
    assert err.startswith("rfkernels figures: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err
    return err


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_figures_refuses_a_folder_with_foreign_files(tmp_path, capsys, no_compute):
    for name, content in (("report.md", "# my own notes\n"), ("notes.txt", "keep me\n"),
                          ("ratio.png", "not a figure")):
        folder = tmp_path / name.replace(".", "_")
        folder.mkdir()
        (folder / name).write_text(content)
        before = _snapshot(folder)
        argv = ["figures", "--out", str(folder), "--quick", "--only", "orthogonality_gain"]
        assert main(argv) == 2
        _one_line_error(capsys, repr(name), "not an output of rfkernels figures")
        assert _snapshot(folder) == before  # nothing written, nothing overwritten
    assert no_compute == []


def test_figures_regenerates_its_own_folder_but_refuses_additions(tmp_path, capsys):
    out = tmp_path / "figs"
    argv = ["figures", "--out", str(out), "--quick", "--only", "orthogonality_gain"]
    assert main(argv) == 0
    assert main(argv) == 0  # an earlier output folder of rfkernels figures is fine
    assert main(["figures", "--out", str(out), "--quick", "--only", "bias_audit"]) == 0
    meta = _strict_json((out / "figures.json").read_text())
    assert {"orthogonality_gain.png", "bias_audit.png"} <= set(meta["files"])
    (out / "mine.csv").write_text("x\n")
    before = _snapshot(out)
    assert main(argv) == 2
    _one_line_error(capsys, "'mine.csv'")
    assert _snapshot(out) == before
    # a folder written before figures.json existed: recognised by its report's header
    (out / "mine.csv").unlink()
    (out / "figures.json").unlink()
    assert main(argv) == 0


@pytest.mark.parametrize("where", ["file", "under_file"])
def test_figures_out_that_is_a_file_fails_before_any_figure(tmp_path, capsys, no_compute, where):
    target = tmp_path / "a_file"
    target.write_text("data\n")
    out = target if where == "file" else target / "sub"
    assert main(["figures", "--out", str(out), "--quick", "--only", "orthogonality_gain"]) == 2
    _one_line_error(capsys, str(out), "not a folder")
    assert target.read_text() == "data\n" and sorted(os.listdir(tmp_path)) == ["a_file"]
    assert no_compute == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes in read-only folders")
def test_figures_read_only_out_fails_before_any_figure(tmp_path, capsys, no_compute):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        for out in (folder, folder / "new"):
            assert main(["figures", "--out", str(out), "--quick", "--only", "bias_audit"]) == 2
            _one_line_error(capsys, "cannot write")
    finally:
        folder.chmod(0o755)
    assert no_compute == [] and os.listdir(folder) == []


def test_figures_unwritable_out_fails_before_any_figure(tmp_path, capsys, no_compute, monkeypatch):
    """As root a read-only folder is writable; the refusal path is exercised with a failing probe."""
    import tempfile

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    out = tmp_path / "new" / "figs"
    assert main(["figures", "--out", str(out), "--quick", "--only", "bias_audit"]) == 2
    _one_line_error(capsys, "cannot write", "Permission denied")
    assert no_compute == [] and os.listdir(tmp_path) == []


def test_gitignore_ignores_the_default_output_folder():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, ".gitignore")) as fh:
        patterns = {line.strip() for line in fh}
    assert patterns & {"rfkernels-figures/", "/rfkernels-figures/"}


# ---------------------------------------------------------------------------
# Readable figures: nothing on the data, nothing outside the figure (issue 9)
# ---------------------------------------------------------------------------

def _drawn(monkeypatch, name, data):
    """Run figure ``name``'s plot on ``data`` and return its drawn figure (not saved)."""
    mod = figure_module(name)
    figs = []

    def keep(fig, out_dir, stem):
        fig.canvas.draw()
        figs.append(fig)
        return []

    monkeypatch.setattr(mod, "save", keep)
    mod.plot(data, "unused")
    return figs[0]


def _display_points(artist_points, transform, step=1.0):
    """Points in display space along a polyline (every ``step`` pixels), NaN gaps skipped."""
    xy = transform.transform(np.asarray(artist_points, dtype=float))
    out = []
    for a, b in itertools.pairwise(xy):
        if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
            continue
        n = max(2, int(np.hypot(*(b - a)) / step) + 1)
        out.append(a + np.linspace(0, 1, n)[:, None] * (b - a))
    out += [p[None, :] for p in xy if np.all(np.isfinite(p))]
    return np.vstack(out) if out else np.empty((0, 2))


def _data_points(ax):
    """Every drawn data point of ``ax`` (lines densified, error bars, markers) within the axes."""
    from matplotlib.collections import LineCollection, PathCollection

    pts = []
    for line in ax.get_lines():
        if line.get_visible() and len(line.get_xydata()):
            pts.append(_display_points(line.get_xydata(), line.get_transform()))
    for coll in ax.collections:
        if isinstance(coll, LineCollection):
            for seg in coll.get_segments():
                if len(seg):
                    pts.append(_display_points(seg, coll.get_transform()))
        elif isinstance(coll, PathCollection) and len(coll.get_offsets()):
            pts.append(coll.get_offset_transform().transform(coll.get_offsets()))
    pts = np.vstack(pts) if pts else np.empty((0, 2))
    box = ax.get_window_extent()
    inside = ((pts[:, 0] >= box.x0) & (pts[:, 0] <= box.x1) & (pts[:, 1] >= box.y0)
              & (pts[:, 1] <= box.y1))
    return pts[inside]


def _covered(points, bbox, pad=1.0):
    x0, y0, x1, y1 = bbox.x0 - pad, bbox.y0 - pad, bbox.x1 + pad, bbox.y1 + pad
    return int(np.sum((points[:, 0] > x0) & (points[:, 0] < x1) & (points[:, 1] > y0)
                      & (points[:, 1] < y1)))


def layout_problems(fig):
    """What makes a figure hard to read: legends or notes on data, labels that collide or leave."""
    renderer = fig.canvas.get_renderer()
    problems = []
    axes = fig.get_axes()
    legends = [lg for lg in fig.legends] + [ax.get_legend() for ax in axes if ax.get_legend()]
    notes = [t for ax in axes for t in ax.texts if t.get_visible() and t.get_text().strip()]
    for ax in axes:
        pts = _data_points(ax)
        for lg in legends:
            n = _covered(pts, lg.get_window_extent(renderer))
            if n:
                problems.append(f"legend {lg.get_texts()[0].get_text()!r}... covers {n} data points")
        for t in notes:
            n = _covered(pts, t.get_window_extent(renderer))
            if n:
                problems.append(f"note {t.get_text()!r} is printed over {n} data points")
    fig_box = fig.bbox
    for ax in axes:
        for t in [ax.title, ax.xaxis.label, ax.yaxis.label]:
            if t.get_text():
                b = t.get_window_extent(renderer)
                if b.x0 < fig_box.x0 + 2 or b.x1 > fig_box.x1 - 2 or b.y1 > fig_box.y1 - 1:
                    problems.append(f"{t.get_text()!r} touches or leaves the figure's edge")
        for axis in (ax.xaxis, ax.yaxis):
            boxes = sorted((lab.get_window_extent(renderer) for lab in axis.get_ticklabels()
                            if lab.get_visible() and lab.get_text()), key=lambda b: b.x0 + b.y0)
            for a, b in itertools.pairwise(boxes):
                if axis is ax.xaxis and b.x0 - a.x1 < 1.5 and a.y1 > b.y0 and b.y1 > a.y0:
                    problems.append(f"x tick labels run together in {ax.get_title()!r}")
    for t in [fig._suptitle] if fig._suptitle is not None else []:
        b = t.get_window_extent(renderer)
        if b.x0 < 2 or b.x1 > fig_box.x1 - 2:
            problems.append("suptitle touches the figure's edge")
    return problems


@pytest.mark.parametrize("name", list(FIGURES))
def test_figure_layout_is_readable(quick, monkeypatch, name):
    fig = _drawn(monkeypatch, name, quick[1][name].data)
    try:
        assert layout_problems(fig) == []
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_attention_lower_bars_stay_positive_on_the_log_axis(quick, monkeypatch):
    import matplotlib.pyplot as plt

    rows = [dict(r) for r in quick[1]["attention"].data["rows"]]
    wide = rows[0]
    wide["mse_se"] = wide["mse_mean"]  # mean - 1.96 se < 0: the 95% bar would go below zero
    fig = _drawn(monkeypatch, "attention", {"rows": rows})
    try:
        ax = fig.axes[0]
        lows = []
        for coll in ax.collections:
            for seg in coll.get_segments():
                if len(seg) == 2 and seg[0][0] == seg[1][0]:  # a vertical error bar
                    lows.append(min(seg[0][1], seg[1][1]))
        assert lows and min(lows) > 0
        factor = np.exp(1.96)  # se = mean: mean ×/÷ exp(1.96 se / mean)
        assert any(lo == pytest.approx(wide["mse_mean"] / factor, rel=1e-9) for lo in lows)
        texts = " ".join(t.get_text() for lg in fig.legends for t in lg.get_texts())
        assert "log(mean)" in texts and "exp(1.96 se / mean)" in texts
    finally:
        plt.close(fig)


def test_interval95_is_arithmetic_where_positive_and_geometric_elsewhere():
    from rfkernels.figures._common import interval95

    lower, upper, geo = interval95([1.0, 1.0], [0.1, 1.0])
    assert list(geo) == [False, True]
    assert lower[0] == pytest.approx(0.196) and upper[0] == pytest.approx(0.196)
    assert 1.0 - lower[1] == pytest.approx(np.exp(-1.96)) and 1.0 + upper[1] == pytest.approx(np.exp(1.96))


def test_ratio_heatmap_is_rasterised_and_the_pdf_small(quick, monkeypatch):
    from matplotlib.collections import QuadMesh

    out = quick[0]
    fig = _drawn(monkeypatch, "ratio", quick[1]["ratio"].data)
    meshes = [c for ax in fig.axes for c in ax.collections if isinstance(c, QuadMesh)]
    assert meshes and all(m.get_rasterized() for m in meshes)
    # quick grid: 80 x 120 cells (the default 240 x 360 made 2.3 MB as vectors)
    assert os.path.getsize(out / "ratio.pdf") < 200_000


def test_figures_only_accepts_spaces_commas_and_repeats(tmp_path, monkeypatch):
    """--only follows the CLI's list grammar; --seed accepts 1e3."""
    import rfkernels.figures as figs
    from rfkernels.commands.cli import main

    seen = {}

    def fake_make_figures(out, only=None, quick=False, seed=0, progress=None, workers=1):
        seen["only"], seen["seed"], seen["workers"] = only, seed, workers
        return {}

    monkeypatch.setattr(figs, "make_figures", fake_make_figures)
    args = ["figures", "--out", str(tmp_path / "o"), "--seed", "1e3",
            "--only", "ratio", "mse_vs_m,bias_audit", "--only", "attention"]
    assert main(args) == 0
    assert seen == {"only": ["ratio", "mse_vs_m", "bias_audit", "attention"], "seed": 1000,
                    "workers": figs.usable_cpus()}  # --workers: the usable CPUs by default
    assert main(args + ["--workers", "1e0"]) == 0 and seen["workers"] == 1


# ---------------------------------------------------------------------------
# Worker processes: the same files and numbers; budgets and measured seconds
# ---------------------------------------------------------------------------

def _without_timings(lines):
    return [{k: v for k, v in line.items() if k not in ("seconds", "cpu_seconds", "budget_seconds")}
            for line in lines]


def test_workers_make_the_same_files_and_numbers_as_one_process(quick, tmp_path):
    """The fixture ran on 2 workers; here in one process: every CSV and PNG byte alike.

    attention (the study's parts preloaded from other workers), a Numba Monte
    Carlo figure, and capacity (LAPACK's SVD, whose rounding depends on the
    BLAS threads: SAME_BLAS_THREADS).
    """
    from rfkernels.figures.report import summarise

    out, pooled = quick
    names = ["attention", "mse_vs_angle", "capacity"]
    here = make_figures(str(tmp_path), only=names, quick=True, seed=3, workers=1)
    assert list(here) == names
    for name in names:
        files = sorted(os.path.basename(p) for p in here[name].paths)
        assert files == sorted(os.path.basename(p) for p in pooled[name].paths)
        for f in files:
            if not f.endswith(".pdf"):  # a PDF records when it was written
                assert (tmp_path / f).read_bytes() == (out / f).read_bytes(), f
    lines = _without_timings(summarise({n: pooled[n] for n in names})[0])
    assert lines == _without_timings(summarise(here)[0])
    meta = _strict_json((tmp_path / "figures.json").read_text())
    assert meta["workers"] == 1 and "in one process" in (tmp_path / "report.md").read_text()


def test_results_keep_the_report_order_on_workers(quick):
    out, results = quick
    assert list(results) == list(FIGURES)
    meta = _strict_json((out / "figures.json").read_text())
    assert [s["figure"] for s in meta["summary"]] == list(FIGURES) == meta["figures"]
    assert meta["workers"] == 2 and meta["usable_cpus"] >= 1
    assert "with 2 worker processes" in (out / "report.md").read_text()


def test_every_figure_declares_a_budget():
    from rfkernels.figures import _attention_study as study

    for name in FIGURES:
        b = figure_module(name).BUDGET
        assert set(b) == {False, True} and 0 < b[True] <= b[False], name
    for what in ("table", "theory"):
        assert 0 < study.PART_BUDGET[what][True] <= study.PART_BUDGET[what][False]


def test_budget_counts_each_shared_part_for_the_first_figure_needing_it():
    from rfkernels.figures import _attention_study as study
    from rfkernels.figures import budget, shared_parts

    table, line = (study.PART_BUDGET[w][False] for w in ("table", "theory"))
    own = {n: figure_module(n).BUDGET[False] for n in FIGURES}
    scales = len(study.settings(False)["scales"])
    assert budget("attention") == pytest.approx(own["attention"] + table + line)
    assert budget("attention_regime") == pytest.approx(own["attention_regime"] + (scales - 1) * table)
    assert budget("figure4") == pytest.approx(own["figure4"] + line)  # σ = 1.5: its own theory line
    assert budget("figure4", names=["figure4"]) == pytest.approx(own["figure4"] + 2 * table + 2 * line)
    parts = {p for ps in shared_parts(FIGURES).values() for p in ps}
    assert len(parts) == scales + 2
    assert sum(budget(n) for n in FIGURES) == pytest.approx(sum(own.values())
                                                             + sum(p.budget for p in parts))


def test_report_and_manifest_record_seconds_and_budgets(quick):
    from rfkernels.figures import budget

    out, results = quick
    meta = _strict_json((out / "figures.json").read_text())
    for line in meta["summary"]:
        res = results[line["figure"]]
        assert line["seconds"] == pytest.approx(res.seconds, abs=1e-3) and res.seconds > 0
        assert line["cpu_seconds"] >= 0
        assert line["budget_seconds"] == pytest.approx(budget(line["figure"], quick=True))
    text = (out / "report.md").read_text()
    assert "| seconds | CPU s | budget s |" in text and "rfkernels.figures.budget" in text


def test_pool_schedules_the_longest_ready_job_first():
    from rfkernels.figures._pool import PoolRun, jobs_of

    class Part:
        def __init__(self, n):
            self.group, self.budget, self.units, self.n = "study", 5.0 + n, 1, n

    class Pool:
        def __init__(self):
            self.submitted = []

        def submit(self, fn, *args):
            if fn.__name__ != "start_worker":
                self.submitted.append(args[0].n if fn.__name__ == "run_part" else args[0])
            return object()

    p1, p2 = Part(1), Part(2)
    jobs = jobs_of(["a", "b", "c"], {"c": [p1, p2]}, {"a": 1.0, "b": 9.0, "c": 0.5})
    run = PoolRun(jobs, 2, ("out", True, 0, None), None, lambda: None)
    pool = Pool()
    run.submit_ready(pool)
    assert pool.submitted == ["b", 2]  # b (9 s), then the 7 s part; c waits for its parts
    run.running.clear()  # both done
    run.values[p2] = (None, 0.0, 0.0)
    run.submit_ready(pool)
    assert pool.submitted[2:] == [1, "a"]  # c still waits for p1
    run.running.clear()
    run.values[p1] = (None, 0.0, 0.0)
    run.submit_ready(pool)
    assert pool.submitted[4:] == ["c"]
    # an exclusive job (its BLAS uses every CPU) runs first and alone; the other workers start
    jobs = jobs_of(["a", "x"], {}, {"a": 9.0, "x": 1.0}, exclusive={"x"})
    run, pool = PoolRun(jobs, 2, ("out", True, 0, None), None, lambda: None), Pool()
    run.submit_ready(pool)
    assert pool.submitted == ["x"] and len(run.running) == 2  # x and a worker's start
    run.running = {f: j for f, j in run.running.items() if j.name == "x"}  # the start is done
    run.submit_ready(pool)
    assert pool.submitted == ["x"]  # nothing beside x
    run.running.clear()
    run.submit_ready(pool)
    assert pool.submitted == ["x", "a"]


_NO_COMPILE = """
import gc, sys
from numba.core import event
from numba.core.dispatcher import Dispatcher
compiled = event.RecordingListener()
event.register("numba:compile", compiled)
import rfkernels.figures as figures
from rfkernels.commands.cli import build_parser
build_parser()
for name in figures.FIGURES:
    figures.figure_module(name)
def loaded():
    return sorted(d.py_func.__qualname__ for d in gc.get_objects()
                  if isinstance(d, Dispatcher) and d.overloads)
assert not compiled.buffer and not loaded(), (compiled.buffer, loaded())
from rfkernels.figures._common import make_figure
make_figure(figures.figure_module("orthogonality_gain"), sys.argv[1], quick=True)
assert not compiled.buffer and not loaded(), (compiled.buffer, loaded())  # theory only
print("ok")
"""


def test_importing_the_figures_compiles_no_kernel(tmp_path):
    """Importing every figure (and the CLI) compiles or loads no Numba kernel; a figure that
    needs none (theory only) loads none: a worker compiles only what its figures use."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _NO_COMPILE, str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


# ---------------------------------------------------------------------------
# Faults: Ctrl-C (exit 130, one line, workers stopped); a full disk names the file
# ---------------------------------------------------------------------------

#: Runs ``rfkernels figures`` with Python's SIGINT handler even where the test runner was
#: started with SIGINT ignored (a background job), which a child would inherit.
_CLI = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from rfkernels.commands.cli import main; sys.exit(main(sys.argv[1:]))")


def _children(pid):
    """Live child processes of ``pid`` (Linux /proc), zombies left out."""
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                kids.append(int(entry))
    return kids


def _alive(pids):
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(pid)
        except OSError:
            pass
    return out


def _started(proc, out, workers, timeout=240):
    """Wait until ``proc`` claimed ``out`` and has ``workers`` worker processes; their pids."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        kids = [k for k in _children(proc.pid) if "spawn_main" in _cmdline(k)]
        if (out / "figures.json").exists() and len(kids) >= workers:
            time.sleep(1.5)  # the workers are importing or computing
            return kids
        time.sleep(0.05)
    raise AssertionError("rfkernels figures did not start its workers")


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline") as fh:
            return fh.read()
    except OSError:
        return ""


def _gone(pids, timeout=15):
    import time

    deadline = time.monotonic() + timeout
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pids)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the workers in /proc")
def test_ctrl_c_on_workers_exits_130_with_one_line(tmp_path):
    """Ctrl-C reaches the whole foreground process group: the parent stops the workers."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "figs"
    proc = subprocess.Popen([sys.executable, "-c", _CLI, "figures", "--quick", "--workers", "2",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        workers = _started(proc, out, 2)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: parent and workers
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err == "rfkernels figures: interrupted\n"
    assert _gone(workers), _alive(workers)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds the workers in /proc")
def test_a_killed_worker_is_one_line_exit_2_and_stops_the_others(tmp_path):
    import signal
    import subprocess
    import sys

    out = tmp_path / "figs"
    proc = subprocess.Popen([sys.executable, "-c", _CLI, "figures", "--quick", "--workers", "2",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        workers = _started(proc, out, 2)
        os.kill(workers[0], signal.SIGKILL)  # as the kernel's OOM killer would
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err
    assert err.startswith("rfkernels figures: error: RuntimeError: a worker process of rfkernels "
                          "figures died") and err.count("\n") == 1, err
    assert _gone(workers), _alive(workers)


_SWALLOWED = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from rfkernels import figures
module = figures.figure_module("orthogonality_gain")
compute = module.compute

class Finalised:
    def __del__(self):
        signal.raise_signal(signal.SIGINT)  # Ctrl-C while Python runs a finaliser

def interrupted(*args, **kwargs):
    Finalised()  # collected at once: its KeyboardInterrupt cannot propagate
    return compute(*args, **kwargs)

module.compute = interrupted
from rfkernels.commands.cli import main
sys.exit(main(["figures", "--quick", "--workers", "1", "--out", sys.argv[1],
               "--only", "orthogonality_gain"]))
"""


def test_ctrl_c_in_a_finaliser_is_not_swallowed(tmp_path):
    """Before: "Exception ignored in ... Traceback ... KeyboardInterrupt", then exit 0."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _SWALLOWED, str(tmp_path / "figs")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "rfkernels figures: interrupted\n"


def test_interrupt_watch_restores_the_handlers(tmp_path):
    import signal
    import sys

    hook, handler = sys.unraisablehook, signal.getsignal(signal.SIGINT)
    assert main(["figures", "--quick", "--out", str(tmp_path), "--only", "orthogonality_gain"]) == 0
    assert signal.getsignal(signal.SIGINT) is handler and sys.unraisablehook is hook


def _no_space(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["create", "create_named_temporary", "savefig"])
def test_full_disk_names_the_figure_file(tmp_path, capsys, monkeypatch, where):
    """ENOSPC creating the temporary file (with no name, or the temporary's), or from
    Matplotlib, names the output it was for: one line, exit 2."""
    import errno
    import tempfile

    mkstemp = tempfile.mkstemp
    out = tmp_path / "figs"
    target = out / "orthogonality_gain.pdf"

    def full(*args, prefix=None, dir=None, **kwargs):
        if prefix and prefix.startswith(".orthogonality_gain.pdf."):
            if where == "create":
                _no_space()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(dir, prefix + "x.tmp"))
        return mkstemp(*args, prefix=prefix, dir=dir, **kwargs)

    if where == "savefig":
        import matplotlib.figure

        monkeypatch.setattr(matplotlib.figure.Figure, "savefig", _no_space)
    else:
        monkeypatch.setattr(tempfile, "mkstemp", full)
    argv = ["figures", "--out", str(out), "--quick", "--only", "orthogonality_gain", "--workers", "1"]
    assert main(argv) == 2
    _one_line_error(capsys, f"{target}: {os.strerror(errno.ENOSPC)}")


def test_full_disk_names_the_report_on_workers(tmp_path, capsys, monkeypatch):
    """On workers the report is written by the parent: ENOSPC there names report.md."""
    import errno
    import tempfile

    mkstemp = tempfile.mkstemp

    def full(*args, prefix=None, **kwargs):
        if prefix and prefix.startswith(".report.md."):
            _no_space()
        return mkstemp(*args, prefix=prefix, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", full)
    out = tmp_path / "figs"
    argv = ["figures", "--out", str(out), "--quick", "--workers", "2",
            "--only", "orthogonality_gain,bias_audit"]
    assert main(argv) == 2
    _one_line_error(capsys, f"{out / 'report.md'}: {os.strerror(errno.ENOSPC)}")
    assert (out / "orthogonality_gain.png").exists() and (out / "bias_audit.png").exists()


def test_workers_option_is_checked(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["figures", "--out", str(tmp_path), "--workers", "0"])
    assert "--workers" in capsys.readouterr().err
    with pytest.raises(ValueError, match="workers"):
        make_figures(str(tmp_path), only=["orthogonality_gain"], workers=0)
