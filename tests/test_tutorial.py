"""The "first hour" tutorial (docs/first_hour.rst) runs, and its printed outputs are real.

The page is executed top to bottom in an empty working directory, in one
namespace: ``>>>`` examples with :mod:`doctest` (ELLIPSIS, NORMALIZE_WHITESPACE,
and a checker that allows one unit in the last digit shown of each decimal
number, so that BLAS or platform rounding cannot break the page),
``.. code-block:: python`` blocks with ``exec`` and ``.. code-block:: console``
blocks (``$ rfkernels ...`` lines only) as subprocesses of ``python -m rfkernels``.
"""

import doctest
import io
import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pandas")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "first_hour.rst")

_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+code-block::\s*(\S+)\s*$")
_NUMBER = re.compile(r"([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)")


# ---------------------------------------------------------------------------
# Reading the page
# ---------------------------------------------------------------------------


def page_blocks(text):
    """The page as ``(type, content, first_line)`` in document order.

    ``type`` is ``"doctest"`` (text between code blocks, whose ``>>>``
    examples doctest runs), or the language of a ``.. code-block::``
    (``content`` its dedented body).
    """
    lines = text.splitlines()
    blocks, prose, prose_start, i = [], [], 1, 0
    while i < len(lines):
        match = _DIRECTIVE.match(lines[i])
        if not match:
            prose.append(lines[i])
            i += 1
            continue
        if prose:
            blocks.append(("doctest", "\n".join(prose) + "\n", prose_start))
        indent, language = len(match.group(1)), match.group(2)
        i += 1
        while i < len(lines) and re.match(r"^\s+:\w[\w-]*:", lines[i]):  # directive options
            i += 1
        body, body_start = [], i + 1
        while i < len(lines) and (not lines[i].strip()
                                  or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        blocks.append((language, textwrap.dedent("\n".join(body)).strip("\n") + "\n", body_start))
        prose, prose_start = [], i + 1
    if prose:
        blocks.append(("doctest", "\n".join(prose) + "\n", prose_start))
    return blocks


def console_commands(content):
    """The ``$ ...`` commands of a console block (backslash continuations joined)."""
    commands, current = [], None
    for line in content.splitlines():
        if current is not None:
            current += " " + line.strip()
        elif line.startswith("$ "):
            current = line[2:].strip()
        elif line.strip():
            raise AssertionError(f"console blocks show commands only (their output is not "
                                 f"checked); got {line!r}")
        else:
            continue
        if current.endswith("\\"):
            current = current[:-1].rstrip()
        else:
            commands.append(current)
            current = None
    assert current is None, "console block ends inside a continued command"
    return commands


# ---------------------------------------------------------------------------
# Comparing outputs
# ---------------------------------------------------------------------------


def _last_digit_unit(token):
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def numbers_match(want, got):
    """Whether ``got`` prints what ``want`` shows, up to one unit in each number's last digit.

    Text between numbers must agree up to whitespace; integers must agree exactly.
    """
    w_parts, g_parts = _NUMBER.split(want), _NUMBER.split(got)
    if len(w_parts) != len(g_parts):
        return False
    for k, (w, g) in enumerate(zip(w_parts, g_parts)):
        if k % 2 == 0:  # text
            if w.split() != g.split():
                return False
        elif not re.search(r"[.eE]", w):  # integer: exact
            if g != w and (re.search(r"[.eE]", g) or int(g) != int(w)):
                return False
        elif abs(float(w) - float(g)) > _last_digit_unit(w) * (1 + 1e-9):
            return False
    return True


class LastDigitChecker(doctest.OutputChecker):
    """doctest's checker, then :func:`numbers_match` (not where the expected output has ``...``)."""

    def check_output(self, want, got, optionflags):
        if super().check_output(want, got, optionflags):
            return True
        return "..." not in want and numbers_match(want, got)


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE | doctest.FAIL_FAST


def run_page(text, name, workdir):
    """Run every block of ``text`` in order in ``workdir``; returns the counts run by type.

    Raises AssertionError at the first block that fails, with its line in the page.
    """
    env = dict(os.environ, MPLBACKEND="Agg")
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(checker=LastDigitChecker(), optionflags=FLAGS)
    globs = {"__name__": "first_hour"}
    counts = {"examples": 0, "python": 0, "console": 0}
    for kind, content, line in page_blocks(text):
        if kind == "doctest":
            test = parser.get_doctest(content, globs, name, name, line - 1)
            if not test.examples:
                continue
            report = io.StringIO()
            result = runner.run(test, out=report.write, clear_globs=False)
            globs = test.globs
            assert result.failed == 0, report.getvalue()
            counts["examples"] += result.attempted
        elif kind == "python":
            exec(compile(content, f"{name}:{line}", "exec"), globs)  # noqa: S102
            counts["python"] += 1
        elif kind == "console":
            for command in console_commands(content):
                argv = shlex.split(command)
                assert argv[0] == "rfkernels", f"{name}:{line}: only rfkernels commands run: {command}"
                out = subprocess.run([sys.executable, "-m", "rfkernels", *argv[1:]], check=False,
                                     cwd=workdir, env=env, capture_output=True, text=True,
                                     timeout=300)
                assert out.returncode == 0, f"{name}:{line}: {command}\n{out.stdout}{out.stderr}"
                counts["console"] += 1
        else:
            raise AssertionError(f"{name}:{line}: code-block of language {kind!r} would not be "
                                 "run; use python, console or >>> examples")
    return counts


def _read_page():
    with open(PAGE, encoding="utf-8") as fh:
        return fh.read()


def test_first_hour_page_runs_and_prints_what_it_shows(tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        counts = run_page(_read_page(), "first_hour.rst", str(tmp_path))
    finally:
        plt.close("all")
    assert counts["examples"] >= 30 and counts["python"] >= 1 and counts["console"] >= 1, counts
    # what the page promises to leave behind
    for path in ("first-hour/theory/results.csv", "first-hour/theory-cli/results.csv",
                 "first-hour/mc/results.csv", "first-hour/mc/sweep.json"):
        assert (tmp_path / path).is_file(), path
    with open(tmp_path / "first-hour" / "mse_vs_m.png", "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_page_has_no_code_that_is_not_run():
    text = _read_page()
    assert "code-block:: python" in text and "code-block:: console" in text
    assert not re.search(r"^\s*\.\.\s+(code|sourcecode|literalinclude)::", text, re.MULTILINE)
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        # a paragraph ending in "::" opens a literal block, which nothing would run
        if stripped.endswith("::") and not stripped.startswith(".."):
            raise AssertionError(f"first_hour.rst:{number}: literal block; use code-block:: "
                                 "python/console or >>> examples so that the tests run it")
    languages = {kind for kind, _, _ in page_blocks(text)}
    assert languages <= {"doctest", "python", "console"}, languages


def test_page_is_in_the_toctree():
    with open(os.path.join(ROOT, "docs", "index.rst"), encoding="utf-8") as fh:
        assert re.search(r"^\s+first_hour\s*$", fh.read(), re.MULTILINE)


# -- the machinery itself can fail ---------------------------------------------


def test_numbers_match_allows_one_unit_in_the_last_digit_only():
    assert numbers_match("MSE 0.07632  z = -0.45", "MSE 0.07633  z = -0.44")
    assert numbers_match("x 1.5e-03", "x 1.6e-03")
    assert numbers_match("a  =  1.0", "a = 1.0")
    assert not numbers_match("MSE 0.07632", "MSE 0.07634")
    assert not numbers_match("z = -0.45", "z = 0.45")
    assert not numbers_match("x 1.5e-03", "x 1.5e-02")
    assert not numbers_match("3 of 40", "4 of 40")  # integers exactly
    assert not numbers_match("tail_ok = True", "tail_ok = False")
    assert not numbers_match("0.5 and 0.6", "0.5")


def test_run_page_catches_a_wrong_output_a_failing_block_and_a_failing_command(tmp_path):
    good = "Text.\n\n>>> print(f'{2 / 3:.4f}')\n0.6667\n"
    assert run_page(good, "good.rst", str(tmp_path))["examples"] == 1
    with pytest.raises(AssertionError, match="0.6672"):
        run_page(good.replace("0.6667", "0.6672") + "\n>>> 1\n1\n", "wrong.rst", str(tmp_path))
    with pytest.raises(ZeroDivisionError):
        run_page(".. code-block:: python\n\n   1 / 0\n", "raises.rst", str(tmp_path))
    with pytest.raises(AssertionError, match="exit|rfkernels"):
        run_page(".. code-block:: console\n\n   $ rfkernels no-such-command\n", "cli.rst",
                 str(tmp_path))
    with pytest.raises(AssertionError, match="commands only"):
        console_commands("$ rfkernels sweep --help\nusage: ...\n")
    with pytest.raises(AssertionError, match="would not be run"):
        run_page(".. code-block:: bash\n\n   ls\n", "bash.rst", str(tmp_path))


def test_page_blocks_keep_document_order_and_join_continuations():
    text = (">>> a = 1\n\n.. code-block:: python\n   :caption: c\n\n   a += 1\n\n"
            ".. code-block:: console\n\n   $ rfkernels sweep --d 4 \\\n       --m 2\n\n>>> a\n2\n")
    blocks = page_blocks(text)
    assert [b[0] for b in blocks] == ["doctest", "python", "console", "doctest"]
    assert blocks[1][1] == "a += 1\n"
    assert console_commands(blocks[2][1]) == ["rfkernels sweep --d 4 --m 2"]
