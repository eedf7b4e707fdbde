"""The command line as a user meets it: strict JSON, one option grammar, one help style.

Every run here is small (a few thousand trials, the numpy backend) so the
whole file takes seconds.
"""

from __future__ import annotations

import json
import math
import re
import resource
import subprocess
import sys

import numpy as np
import pytest

from rfkernels.commands.cli import build_parser, main
from rfkernels.commands._options import int_value
from rfkernels.commands._output import dumps, json_safe


def _strict(text):
    """Parse JSON refusing NaN, Infinity and -Infinity (which Python's json accepts)."""

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _reasons(obj):
    """Every ``null_reasons`` map in a JSON document, merged (key -> list of reasons)."""
    found = {}
    if isinstance(obj, dict):
        for k, v in (obj.get("null_reasons") or {}).items():
            found.setdefault(k, []).append(v)
        children = obj.values()
    elif isinstance(obj, list):
        children = obj
    else:
        return found
    for child in children:
        for k, v in _reasons(child).items():
            found.setdefault(k, []).extend(v)
    return found


#: A geometry whose MSE is beyond float64 (log MSE ~ 1349): theory overflows, Monte Carlo cannot run.
OVERFLOW = ["--d", "4", "--norm-x", "15", "--norm-y", "15", "--angle", "0", "--m", "4",
            "--kind", "positive", "--trials", "2000"]


# ---------------------------------------------------------------------------
# Every machine-readable output is strict JSON, every null has its reason
# ---------------------------------------------------------------------------


def test_check_json_is_strict_and_explains_exact_zeros(capsys):
    assert main(["check", "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    zero = [r for r in out["rows"] if r["kind"] == "trig" and r["d"] == 1 and r["angle"] == 0.0]
    assert zero and zero[0]["log_exact_iid"] is None
    assert zero[0]["null_reasons"]["log_exact_iid"] == "the MSE is exactly 0 (log = -inf)"
    # every null of every row says why
    for r in out["rows"]:
        nulls = {k for k, v in r.items() if v is None}
        assert nulls == set(r.get("null_reasons", {})), r


def test_compare_json_is_strict_with_bias_audit_and_overflow(capsys):
    status = main(["compare", *OVERFLOW, "--bias-audit", "--json"])
    out = _strict(capsys.readouterr().out)
    assert status == out["exit_status"] == 1
    assert out["out_of_range"] == 2 and out["violations"] == 0
    for r in out["rows"]:
        assert r["mse_exact"] is None and r["mse_mc"] is None
        assert r["null_reasons"]["mse_exact"].startswith("mse_exact beyond float64: log = 1348.6")
        assert r["null_reasons"]["mse_mc"].startswith("Monte Carlo not run")
        assert {k for k, v in r.items() if v is None} == set(r["null_reasons"])
    assert len(out["bias_audit"]) == 10


def test_compare_json_ordinary_rows_explain_not_applicable_values(capsys):
    assert main(["compare", "--d", "8", "--m", "4", "--kind", "positive", "--trials", "2000",
                 "--json"]) in (0, 1)
    out = _strict(capsys.readouterr().out)
    iid = next(r for r in out["rows"] if r["ensemble"] == "iid")
    assert iid["theorem2_bound"] is None
    assert "Theorem 2" in iid["null_reasons"]["theorem2_bound"]


def test_mse_json_is_strict_and_explains_nulls(capsys):
    assert main(["mse", "--backend", "numpy", "--trials", "2000", "--d", "4", "--m", "3",
                 "--kind", "trig", "--norms", "fixed", "--ensemble", "orthogonal-unfixed-qr",
                 "--method", "literal", "--json", "--no-progress"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["mse_exact"] is None and out["mse_lemma2"] is None and out["reach"] is None
    assert "orthogonal-unfixed-qr" in out["null_reasons"]["mse_exact"]
    assert "chi" in out["null_reasons"]["mse_lemma2"]


def test_sweep_json_is_strict(tmp_path, capsys):
    assert main(["sweep", "--out", str(tmp_path / "s"), "--d", "4", "--m", "1,2", "--angle", "0,1",
                 "--kind", "trig,positive", "--theory-only", "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["points"] == 8 and math.isfinite(out["seconds"])


def test_attention_sidecar_is_strict_and_explains_nonfinite_samples(tmp_path, capsys):
    csv = tmp_path / "a.csv"
    assert main(["attention", "--L", "64", "--d", "4", "--m", "2", "--samples", "3", "--kind", "trig",
                 "--ensemble", "iid,orthogonal", "--nonpositive", "nan", "--out", str(csv)]) == 0
    text = capsys.readouterr().out
    side = _strict((tmp_path / "a.json").read_text())
    nulls = [(r, i) for r in side["per_sample_mse"] for i, v in enumerate(r["mse"]) if v is None]
    assert nulls, "this seed gives non-finite trig samples under --nonpositive nan"
    for r, i in nulls:
        assert "not finite" in r["null_reasons"][f"mse[{i}]"]
    assert "non-finite" in text  # the text table shows the same count


def test_json_safe_helper():
    data = {"a": np.float64("nan"), "b": [1.0, np.inf], "c": {"d": -np.inf, "e": np.int64(3)},
            "f": (np.bool_(True), None), "g": [{"h": float("nan")}]}
    out = json_safe(data)
    assert out == {"a": None, "b": [1.0, None], "c": {"d": None, "e": 3, "null_reasons": {
        "d": "-inf: beyond float64"}}, "f": [True, None], "g": [{"h": None, "null_reasons": {
        "h": "not a number (NaN)"}}], "null_reasons": {"a": "not a number (NaN)",
                                                        "b[1]": "+inf: beyond float64"}}
    assert type(out["c"]["e"]) is int
    _strict(dumps(data))
    out = json_safe({"x": None, "y": float("nan")}, explain=lambda k, v, row: f"why {k}")
    assert out["null_reasons"] == {"x": "why x", "y": "why y"}


# ---------------------------------------------------------------------------
# Text shows what --json says; the exit status agrees with both
# ---------------------------------------------------------------------------


def test_compare_text_shows_overflow_and_exits_like_json(capsys):
    status = main(["compare", *OVERFLOW])
    text = capsys.readouterr().out
    assert status == 1
    assert "overflow" in text and "not run" in text
    assert main(["compare", *OVERFLOW, "--json"]) == status
    out = _strict(capsys.readouterr().out)
    for r in out["rows"]:
        assert r["note"] in text  # every note of the JSON is printed
    assert "2 with a value beyond float64" in text


def test_compare_ordinary_run_exits_0_in_text_and_json(capsys):
    args = ["compare", "--d", "8", "--m", "4", "--kind", "trig", "--trials", "5000"]
    assert main(args) == 0
    assert "exit status 0" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    assert _strict(capsys.readouterr().out)["exit_status"] == 0


def test_mse_text_gives_the_reasons_json_gives(capsys):
    args = ["mse", "--backend", "numpy", "--trials", "2000", "--d", "4", "--m", "3", "--kind", "trig",
            "--norms", "fixed", "--ensemble", "orthogonal-unfixed-qr", "--method", "literal",
            "--no-progress"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    reasons = _strict(capsys.readouterr().out)["null_reasons"]
    for key in ("mse_exact", "mse_lemma2", "mse_theorem2"):
        assert f"({reasons[key]})" in text


def test_check_text_shows_exact_zero_as_zero(capsys):
    assert main(["check"]) == 0
    text = capsys.readouterr().out
    assert "inf" not in text
    row = next(line for line in text.splitlines() if re.match(r"\s+1\s+0\.5\s+0\.5\s+0\.00\s+1\s+trig", line))
    assert row.split()[6:9] == ["0", "0", "0"]


# ---------------------------------------------------------------------------
# Bias audit: --trials and every --d, --m
# ---------------------------------------------------------------------------


def test_bias_audit_uses_trials_and_every_d_and_m(capsys):
    assert main(["compare", "--d", "4,8", "--m", "2", "--m", "4", "--kind", "positive",
                 "--ensemble", "iid", "--trials", "300", "--bias-audit", "--json"]) in (0, 1)
    audit = _strict(capsys.readouterr().out)["bias_audit"]
    assert {a["trials"] for a in audit} == {300}
    assert {(a["d"], a["m"]) for a in audit} == {(4, 2), (4, 4), (8, 2), (8, 4)}
    assert main(["compare", "--d", "4,8", "--m", "2,4", "--kind", "positive", "--ensemble", "iid",
                 "--trials", "300", "--bias-audit"]) in (0, 1)
    text = capsys.readouterr().out
    assert "300 trials per row" in text
    audit_lines = [ln.split() for ln in text.splitlines() if "orthogonal" in ln and ln.startswith("  ")]
    assert {(int(a[0]), int(a[1])) for a in audit_lines} == {(4, 2), (4, 4), (8, 2), (8, 4)}


def test_bias_audit_too_large_fails_in_one_line_before_any_work(capsys):
    # 1e7 trials of 64 x 64 projections: terabytes; refused before the comparison rows run
    assert main(["compare", "--d", "64", "--m", "64", "--trials", "1e7", "--bias-audit"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "bias audit at d = 64, m = 64" in lines[0] and "GiB" in lines[0]


# ---------------------------------------------------------------------------
# One grammar: lists by commas and repeats, --kind/--ensemble everywhere,
# counts written 1e6, each default shown once
# ---------------------------------------------------------------------------

LIST_OPTIONS = [
    ("compare", "--d", ["4,8", "16"], [4, 8, 16]),
    ("compare", "--m", ["4,8", "16"], [4, 8, 16]),
    ("compare", "--angle", ["0,1", "2"], [0.0, 1.0, 2.0]),
    ("compare", "--norm-x", ["1,2", "3"], [1.0, 2.0, 3.0]),
    ("compare", "--norm-y", ["1", "2,3"], [1.0, 2.0, 3.0]),
    ("compare", "--kind", ["trig,positive", "hyperbolic"], ["trig", "positive", "hyperbolic"]),
    ("compare", "--ensemble", ["iid", "orthogonal"], ["iid", "orthogonal"]),
    ("sweep", "--d", ["4", "8,16"], [4, 8, 16]),
    ("sweep", "--m", ["1e3,2"], [1000, 2]),
    ("sweep", "--angle", ["0", "1"], [0.0, 1.0]),
    ("sweep", "--kind", ["trig", "positive"], ["trig", "positive"]),
    ("sweep", "--ensemble", ["iid", "orthogonal"], ["iid", "orthogonal"]),
    ("sweep", "--norms", ["chi", "fixed"], ["chi", "fixed"]),
    ("sweep", "--backends", ["numpy", "numba"], ["numpy", "numba"]),
    ("sweep", "--norm-x", ["1", "2"], [1.0, 2.0]),
    ("sweep", "--norm-y", ["1", "2"], [1.0, 2.0]),
    ("sweep", "--norm-sum", ["1", "2"], [1.0, 2.0]),
    ("attention", "--m", ["2,4", "8"], [2, 4, 8]),
    ("attention", "--kind", ["trig", "positive"], ["trig", "positive"]),
    ("attention", "--ensemble", ["iid", "orthogonal"], ["iid", "orthogonal"]),
]


def _parse(*argv):
    extra = ["--out", "x"] if argv[0] == "sweep" else []
    return build_parser().parse_args([*argv, *extra])


@pytest.mark.parametrize("command,option,values,expected", LIST_OPTIONS)
def test_list_options_take_commas_and_repeats(command, option, values, expected):
    argv = [command]
    for v in values:
        argv += [option, v]
    dest = option.lstrip("-").replace("-", "_")
    assert getattr(_parse(*argv), dest) == expected


def test_a_given_list_replaces_the_default():
    assert _parse("compare").m == [4, 16]
    assert _parse("compare", "--m", "8").m == [8]
    assert _parse("attention", "--m", "8").m == [8]
    assert _parse("attention").kind == ["trig", "positive", "hyperbolic"]
    assert _parse("sweep").m is None  # the TOML file or the spec decides


def test_compare_runs_every_repeated_m(capsys):
    assert main(["compare", "--m", "4", "--m", "8", "--kind", "trig", "--ensemble", "iid",
                 "--trials", "2000", "--json"]) == 0
    assert [r["m"] for r in _strict(capsys.readouterr().out)["rows"]] == [4, 8]


@pytest.mark.parametrize("command", ["mse", "compare", "sweep", "attention"])
def test_one_name_for_kind_and_ensemble(command):
    args = _parse(command, "--kind", "positive", "--ensemble", "iid")
    assert args.kind in ("positive", ["positive"]) and args.ensemble in ("iid", ["iid"])


def test_attention_old_plural_names_are_gone(capsys):
    with pytest.raises(SystemExit) as exc:
        _parse("attention", "--kinds", "trig")
    assert exc.value.code == 2


COUNTS = {
    "mse": ["--d", "--m", "--trials", "--seed", "--chunk"],
    "compare": ["--trials", "--seed"],
    "sweep": ["--trials", "--seed", "--chunk", "--workers"],
    "attention": ["--L", "--d", "--samples", "--seed"],
}


@pytest.mark.parametrize("command,option", [(c, o) for c, opts in COUNTS.items() for o in opts])
def test_counts_accept_scientific_integers(command, option):
    value = getattr(_parse(command, option, "1e3"), option.lstrip("-").replace("-", "_"))
    assert value == 1000 and type(value) is int


def test_int_value_is_exact_and_strict():
    assert int_value("12345678901234567891") == 12345678901234567891
    assert int_value("1.5e3") == 1500 and int_value("1_000") == 1000
    for bad in ("1.5", "1e-3", "inf", "nan", "abc", ""):
        with pytest.raises(Exception, match="expected an integer"):
            int_value(bad)


def test_non_integer_count_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["mse", "--trials", "1.5"])
    assert exc.value.code == 2
    assert "argument --trials: expected an integer" in capsys.readouterr().err


def test_mse_m_1e9_is_integer_syntax():
    assert _parse("mse", "--m", "1e9").m == 10**9


def test_mse_m_1e9_fails_in_one_line_before_allocating():
    # In a child process that sees a 2 GiB machine (and cannot get more than
    # 6 GiB of address space, so a missing check cannot hurt the test machine),
    # m = 1e9 projections must be refused by the memory estimate, not by numpy.
    script = ("import sys, rfkernels.validation as v; v.available_memory = lambda: 2 * 2**30; "
              "from rfkernels.commands.cli import main; "
              "sys.exit(main(['mse', '--m', '1e9', '--backend', 'numpy', '--trials', '2000', "
              "'--no-progress']))")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))

    run = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True,
                         preexec_fn=limit, timeout=300)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "GiB of memory" in lines[0]  # check_memory's estimate, not numpy's failed allocation


def _help(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


def _option_entries(text):
    """The help text of each option, joined over its lines."""
    entries, current = [], None
    for line in text.splitlines():
        if re.match(r"^  -", line):
            current = [line]
            entries.append(current)
        elif current is not None and line.startswith("      "):
            current.append(line)
        else:
            current = None
    return [" ".join(" ".join(e).split()) for e in entries]


@pytest.mark.parametrize("command", ["check", "mse", "compare", "sweep", "attention", "figures"])
def test_help_shows_each_default_once(command, capsys):
    text = _help(command, capsys)
    assert "(default: None)" not in text and "(default: False)" not in text
    for entry in _option_entries(text):
        assert entry.count("default") <= 1, entry


def test_help_shows_list_defaults_as_lists_and_no_unmeasured_compile_time(capsys):
    text = " ".join(_help("compare", capsys).split())
    assert "(default: 4,16)" in text and "(default: 100000)" in text
    assert "may be repeated" in text
    text = _help("mse", capsys)
    assert "20 s" not in text and "compiles its kernel on first use" in " ".join(text.split())


# ---------------------------------------------------------------------------
# --proposal: which law the Monte Carlo trials came from, in text and JSON
# ---------------------------------------------------------------------------

#: |x + y|^2 = 5.76: a heavy tail for positive features, which auto tilts.
HEAVY = ["--backend", "numpy", "--trials", "4000", "--d", "4", "--m", "4", "--norm-x", "1.2",
         "--norm-y", "1.2", "--angle", "0", "--no-progress"]
PROPOSAL_KEYS = ("proposal", "proposal_note", "proposal_shift", "proposal_alpha0",
                 "proposal_wscale", "pilot_k_hat", "ess", "weight_mean")


@pytest.mark.parametrize("proposal", ["auto", "tilted"])
def test_mse_tilted_run_shows_its_proposal_in_text_and_json(proposal, capsys):
    args = ["mse", *HEAVY, "--proposal", proposal]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert set(PROPOSAL_KEYS) <= set(out)
    assert out["proposal"] == "tilted" and out["proposal_note"].startswith("tilted: ")
    assert out["proposal_shift"] > 0 and out["proposal_alpha0"] == 0.2
    assert out["proposal_wscale"] == 1.0  # tau scales W for oprf only
    assert 0 < out["ess"] < out["trials"] and out["weight_mean"] > 0
    assert out["tail_ok"] is True and abs(out["z"]) < 4
    if out["pilot_k_hat"] is None:
        assert out["null_reasons"]["pilot_k_hat"].startswith("no pilot run")
    assert {k for k, v in out.items() if v is None} <= set(out.get("null_reasons", {}))
    assert f"tilted: shift mu = {out['proposal_shift']:.4g}" in text
    assert f"ESS = {out['ess']:,.0f} of 4,000 trials" in text
    assert f"({out['proposal_note']})" in text


def test_mse_plain_run_explains_the_missing_tilt(capsys):
    assert main(["mse", *HEAVY, "--proposal", "plain", "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["proposal"] == "plain" and out["proposal_note"] == "plain: as requested"
    assert out["ess"] == out["trials"] and out["weight_mean"] == 1.0
    for key in ("proposal_shift", "proposal_alpha0", "proposal_wscale", "pilot_k_hat"):
        assert out[key] is None and out["null_reasons"][key], key
    assert main(["mse", *HEAVY, "--kind", "trig"]) == 0  # auto: trig is never tilted
    assert "proposal         plain: ESS = 4,000 of 4,000 trials (100%)" in capsys.readouterr().out


@pytest.mark.parametrize("extra,needle", [
    (["--kind", "trig"], "trig"),
    (["--method", "literal"], "literal"),
])
def test_mse_tilted_where_nothing_can_be_tilted_is_one_line_exit_2(extra, needle, capsys):
    assert main(["mse", *HEAVY, "--proposal", "tilted", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "proposal='tilted'" in err[0] and needle in err[0], err


@pytest.mark.parametrize("command", ["mse", "compare", "sweep"])
def test_an_unknown_proposal_is_a_usage_error(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, *(["--out", "unused"] if command == "sweep" else []),
              "--proposal", "gaussian"])
    assert exc.value.code == 2
    assert ("argument --proposal: invalid choice: 'gaussian'; expected one of plain, tilted, auto"
            in capsys.readouterr().err)


def test_compare_shows_the_proposal_of_every_row(capsys):
    args = ["compare", "--d", "4", "--m", "4", "--norm-x", "1.2", "--norm-y", "1.2", "--angle", "0",
            "--kind", "positive,trig", "--ensemble", "iid", "--trials", "4000"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    rows = _strict(capsys.readouterr().out)["rows"]
    by_kind = {r["kind"]: r for r in rows}
    assert by_kind["positive"]["proposal"] == "tilted" and by_kind["trig"]["proposal"] == "plain"
    assert 0 < by_kind["positive"]["ess"] < 4000 and by_kind["trig"]["ess"] == 4000
    header, *lines = [line for line in text.splitlines() if line[:3].strip().isdigit() or "#" in line]
    assert header.split()[-3] == "proposal"
    assert [line.split()[-3] for line in lines] == ["tilted", "plain"]
    assert main([*args, "--proposal", "plain", "--json"]) == 0
    assert {r["proposal"] for r in _strict(capsys.readouterr().out)["rows"]} == {"plain"}
    only_trig = [a if a != "positive,trig" else "trig" for a in args]
    assert main([*only_trig, "--proposal", "tilted"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tilted" in err[0] and "trig" in err[0], err


# ---------------------------------------------------------------------------
# Names are validated at parse time against the registry; angles may be
# written as multiples of pi; repeated list entries count once
# ---------------------------------------------------------------------------

from rfkernels.backends import BACKENDS  # noqa: E402
from rfkernels.commands._options import angle_value, choice  # noqa: E402
from rfkernels.estimators import registry  # noqa: E402
from rfkernels.engine import PROPOSALS  # noqa: E402

#: (command, option, valid choices) of every name option of the command line.
NAME_OPTIONS = [
    *[(c, "--kind", "kind") for c in ("mse", "compare", "sweep")],
    ("attention", "--kind", "attention-kind"),  # the kinds attention takes (issue 37)
    *[(c, "--ensemble", "ensemble") for c in ("mse", "compare", "sweep", "attention")],
    *[(c, "--norms", "norms") for c in ("mse", "compare", "sweep", "attention")],
    ("mse", "--backend", "mse-backend"),
    *[(c, "--backend", "backend") for c in ("compare", "sweep")],
    ("sweep", "--backends", "backend"),
    ("attention", "--backend", "attention-backend"),
    *[(c, "--proposal", "proposal") for c in ("mse", "compare", "sweep")],
]


def _choices(which):
    if which == "backend":
        return BACKENDS
    if which == "mse-backend":  # auto: numpy for a small run (issue 37's first run)
        return (*BACKENDS, "auto")
    if which == "attention-backend":
        return ("numpy", "cupy")
    if which == "proposal":
        return PROPOSALS
    if which == "attention-kind":
        from rfkernels.commands.attention import attention_kinds

        return attention_kinds()[0]
    return registry.names(which)


def _usage_error(argv, capsys):
    """The stderr of a parse-time refusal (exit status 2, nothing on stdout, no run)."""
    extra = ["--out", "unused"] if argv[0] in ("sweep", "attention") else []
    with pytest.raises(SystemExit) as exc:
        main([*argv, *extra])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.mark.parametrize("command,option,which", NAME_OPTIONS)
def test_an_unknown_name_is_refused_at_parse_time(command, option, which, capsys, monkeypatch):
    import rfkernels.commands.cli as cli

    ran = []
    monkeypatch.setitem(cli._COMMANDS, command, (*cli._COMMANDS[command][:1],
                                                 lambda args: ran.append(args) or 0,
                                                 cli._COMMANDS[command][2]))
    err = _usage_error([command, option, "nonsense"], capsys)
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert lines == [f"rfkernels {command}: error: argument {option}: invalid choice: "
                     f"'nonsense'; expected one of {', '.join(_choices(which))}"]
    assert not ran
    # in a list, one bad item is enough
    if option in ("--kind", "--ensemble", "--backends") and command != "mse":
        good = _choices(which)[0]
        err = _usage_error([command, option, f"{good},nonsense"], capsys)
        assert f"argument {option}: invalid choice: 'nonsense'" in err
    # every valid name passes the parser
    for name in _choices(which):
        args = _parse(command, option, name)
        value = getattr(args, option.lstrip("-").replace("-", "_"))
        assert value in (name, [name])


def test_attention_backend_keeps_its_restriction(capsys):
    err = _usage_error(["attention", "--backend", "numba"], capsys)
    assert "argument --backend: invalid choice: 'numba'; expected one of numpy, cupy" in err


@pytest.mark.parametrize("command,option,which", NAME_OPTIONS)
def test_help_lists_the_choices(command, option, which, capsys):
    entries = _option_entries(_help(command, capsys))
    entry = next(e for e in entries if e.startswith(f"{option} "))
    assert ", ".join(_choices(which)) in entry, entry


def test_a_kind_registered_later_is_a_choice(capsys):
    from dataclasses import replace

    registry.register("kind", replace(registry.entry("kind", "positive"), name="toy-kind", seed_index=None))
    try:
        assert _parse("compare", "--kind", "toy-kind,trig").kind == ["toy-kind", "trig"]
        assert _parse("mse", "--kind", "toy-kind").kind == "toy-kind"
        assert "toy-kind" in _help("sweep", capsys)
    finally:
        registry.unregister("kind", "toy-kind")
    assert "toy-kind" in _usage_error(["mse", "--kind", "toy-kind"], capsys)  # refused again


def test_choice_helper():
    conv = choice(("a", "b"), "letter")
    assert conv("b") == "b" and conv.choices == ("a", "b")
    with pytest.raises(Exception, match=r"invalid choice: 'c'; expected one of a, b"):
        conv("c")
    assert choice("ensemble").choices == registry.names("ensemble")


@pytest.mark.parametrize("text,value", [
    ("pi", math.pi), ("pi/2", math.pi / 2), ("3pi/4", 3 * math.pi / 4), ("3*pi/4", 3 * math.pi / 4),
    ("2*pi/3", 2 * math.pi / 3), ("-pi/4", -math.pi / 4), ("0.5pi", 0.5 * math.pi), ("PI/3", math.pi / 3),
    (" pi / 6 ", math.pi / 6), ("1.5", 1.5), ("0", 0.0), ("1e-3", 1e-3),
])
def test_angle_value_takes_numbers_and_multiples_of_pi(text, value):
    assert angle_value(text) == value


@pytest.mark.parametrize("bad", ["x", "", "pi/0", "pi/2/3", "2**pi", "*pi", "pi*2", "3pi4", "1.5.", "pie"])
def test_angle_value_refuses_other_text(bad):
    with pytest.raises(Exception, match=re.escape(
            f"expected an angle in radians such as 1.5, pi, pi/2 or 3pi/4, got {bad!r}")):
        angle_value(bad)


@pytest.mark.parametrize("command", ["mse", "compare", "sweep"])
def test_every_angle_option_takes_multiples_of_pi(command, capsys):
    assert _parse(command, "--angle", "pi/2").angle in (math.pi / 2, [math.pi / 2])
    if command != "mse":
        assert _parse(command, "--angle", "0,pi/4", "--angle", "pi").angle == [0.0, math.pi / 4,
                                                                                 math.pi]
    err = _usage_error([command, "--angle", "half-pi"], capsys)
    assert ("argument --angle: expected an angle in radians such as 1.5, pi, pi/2 or 3pi/4, "
            "got 'half-pi'") in err


def test_mse_angle_pi_over_2_is_the_number(capsys):
    base = ["mse", "--backend", "numpy", "--proposal", "plain", "--trials", "2000", "--d", "4",
            "--m", "2", "--json", "--no-progress"]
    outs = []
    for angle in ("pi/2", "1.5707963267948966"):
        assert main([*base, "--angle", angle]) == 0
        out = _strict(capsys.readouterr().out)
        out.pop("elapsed_s", None)
        outs.append(out)
    assert outs[0]["angle"] == math.pi / 2
    assert outs[0] == outs[1]


@pytest.mark.parametrize("command,option,values,expected", [
    ("compare", "--kind", ["positive,trig", "trig"], ["positive", "trig"]),
    ("compare", "--m", ["4,8,4", "8"], [4, 8]),
    ("compare", "--angle", ["1,pi", "3.141592653589793"], [1.0, math.pi]),
    ("compare", "--ensemble", ["iid", "iid,orthogonal"], ["iid", "orthogonal"]),
    ("sweep", "--d", ["8,4", "8"], [8, 4]),
    ("sweep", "--norms", ["chi,chi"], ["chi"]),
    ("sweep", "--backends", ["numpy", "numpy"], ["numpy"]),
    ("attention", "--kind", ["trig", "positive,trig"], ["trig", "positive"]),
    ("attention", "--m", ["2,2"], [2]),
])
def test_repeated_list_entries_count_once(command, option, values, expected):
    argv = [command]
    for v in values:
        argv += [option, v]
    assert getattr(_parse(*argv), option.lstrip("-").replace("-", "_")) == expected


def test_figures_only_repeats_count_once():
    args = build_parser().parse_args(["figures", "--only", "ratio", "bias_audit,ratio",
                                      "--only", "bias_audit"])
    assert args.only == ["ratio", "bias_audit"]


def test_compare_repeated_kind_gives_no_repeated_rows(capsys):
    assert main(["compare", "--d", "4", "--m", "2", "--ensemble", "iid", "--trials", "2000",
                 "--proposal", "plain", "--kind", "positive,trig", "--kind", "trig",
                 "--json"]) in (0, 1)
    rows = _strict(capsys.readouterr().out)["rows"]
    keys = [(r["kind"], r["ensemble"], r["m"], r["d"]) for r in rows]
    assert [k[0] for k in keys] == ["positive", "trig"] and len(set(keys)) == len(keys)


def test_attention_repeated_kind_runs(tmp_path, capsys):
    csv = tmp_path / "a.csv"
    assert main(["attention", "--L", "16", "--d", "4", "--m", "2,2", "--samples", "2",
                 "--kind", "positive", "--kind", "positive", "--ensemble", "iid",
                 "--out", str(csv)]) == 0  # the study refuses repeats; the CLI passes none
    assert len(_strict((tmp_path / "a.json").read_text())["per_sample_mse"]) == 1


# ---------------------------------------------------------------------------
# Theorem 2 is shown only where it applies
# ---------------------------------------------------------------------------

MSE_SMALL = ["mse", "--backend", "numpy", "--proposal", "plain", "--trials", "2000", "--d", "8",
             "--m", "4", "--no-progress"]


def test_theorem2_reason_rule():
    from rfkernels.commands.mse import theorem2_reason

    assert theorem2_reason("positive", "orthogonal", "chi", 4, 8) is None
    assert theorem2_reason("positive", "orthogonal", "chi", 8, 8) is None
    for args, needle in ((("positive", "iid", "chi", 4, 8), "ensemble is 'iid'"),
                         (("positive", "simplex", "chi", 4, 8), "ensemble is 'simplex'"),
                         (("positive", "orthogonal-unfixed-qr", "chi", 4, 8), "orthogonal-unfixed-qr"),
                         (("trig", "orthogonal", "chi", 4, 8), "kind is 'trig'"),
                         (("positive", "orthogonal", "fixed", 4, 8), "norms are 'fixed'"),
                         (("positive", "orthogonal", "chi", 9, 8), "m = 9 > d = 8")):
        reason = theorem2_reason(*args)
        assert reason.startswith("Theorem 2 bounds positive features, orthogonal ensemble") and \
            needle in reason, (args, reason)


def test_mse_iid_has_no_theorem2(capsys):
    assert main([*MSE_SMALL, "--ensemble", "iid", "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["mse_theorem2"] is None
    assert "ensemble is 'iid'" in out["null_reasons"]["mse_theorem2"]
    assert out["mse_lemma2"] is not None  # Lemma 2 is about iid features
    assert main([*MSE_SMALL, "--ensemble", "iid"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "Theorem 2" in ln)
    assert "n/a" in line and f"({out['null_reasons']['mse_theorem2']})" in line


def test_mse_orthogonal_has_theorem2(capsys):
    from rfkernels import theory

    assert main([*MSE_SMALL, "--ensemble", "orthogonal", "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    x, y = theory.pair(8, 1.0, 1.0, 1.0)
    assert out["mse_theorem2"] == pytest.approx(float(theory.theorem2_bound(x, y, 4)), rel=1e-14)
    assert "mse_theorem2" not in out.get("null_reasons", {})
    assert main([*MSE_SMALL, "--ensemble", "orthogonal", "--m", "9", "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["mse_theorem2"] is None and "m = 9 > d = 8" in out["null_reasons"]["mse_theorem2"]


def test_check_and_compare_state_the_same_theorem2_rule(capsys):
    from rfkernels.commands.mse import theorem2_reason

    assert main(["check", "--json"]) == 0
    for r in _strict(capsys.readouterr().out)["rows"]:
        expected = theorem2_reason(r["kind"], "orthogonal", "chi", r["m"], r["d"])
        assert (r["log_theorem2_bound"] is None) == (expected is not None), r
        if expected is not None:
            assert r["null_reasons"]["log_theorem2_bound"] == expected
    assert main(["compare", "--d", "4", "--m", "2,8", "--kind", "positive,trig", "--trials", "2000",
                 "--proposal", "plain", "--json"]) in (0, 1)
    for r in _strict(capsys.readouterr().out)["rows"]:
        expected = theorem2_reason(r["kind"], r["ensemble"], r["norms"], r["m"], r["d"])
        assert (r["theorem2_bound"] is None) == (expected is not None), r
        if expected is not None:
            assert r["null_reasons"]["theorem2_bound"] == expected
