"""The layout as a contract: the layers, no import cycle, the size limits, no private name across modules.

The layers are import-linter's contract in pyproject.toml
(``[tool.importlinter]``): core -> analysis -> figures -> commands, and the
core's own layers below them. ``analysis/``, ``figures/`` and ``commands/``
install as ``rfkernels.analysis``, ``rfkernels.figures`` and
``rfkernels.commands`` (pyproject's package-dir); an editable install maps
them from their folders, which grimp (import-linter's graph) does not
follow, so the checks run on a staged copy with the installed layout.
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: folder -> where it is installed inside the rfkernels package
FOLDERS = {"rfkernels": "", "analysis": "analysis", "figures": "figures", "commands": "commands"}
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 100


def _stage(tmp):
    """A copy of the package with the installed layout (sources only)."""
    dest = tmp / "src" / "rfkernels"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc", "*.sha256")
    for folder, inside in FOLDERS.items():
        shutil.copytree(ROOT / folder, dest / inside if inside else dest, ignore=ignore,
                        dirs_exist_ok=True)
    return tmp / "src"


_RUN = textwrap.dedent("""
    import sys
    # the editable install's finder would find the working tree, not the staged copy
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, sys.argv[1])
    import rfkernels
    assert rfkernels.__file__.startswith(sys.argv[1]), rfkernels.__file__
    {body}
""")


def _run(src, body, *args):
    code = _RUN.format(body=textwrap.dedent(body).strip())
    return subprocess.run([sys.executable, "-c", code, str(src), *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    pytest.importorskip("importlinter")
    return _stage(tmp_path_factory.mktemp("layout"))


def test_layers_contract_holds(staged):
    proc = _run(staged, """
        from importlinter.cli import lint_imports
        sys.exit(lint_imports(config_filename=sys.argv[2], no_cache=True))
    """, str(ROOT / "pyproject.toml"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Contracts: 1 kept, 0 broken." in proc.stdout


def test_layers_contract_can_fail(staged, tmp_path):
    """An upward import (core -> analysis) breaks the contract: the check is not vacuous."""
    bad = _stage(tmp_path)
    (bad / "rfkernels" / "validation.py").write_text(
        (bad / "rfkernels" / "validation.py").read_text() + "\n\ndef upward():\n    from rfkernels.analysis import tail  # noqa: F401\n")
    proc = _run(bad, """
        from importlinter.cli import lint_imports
        sys.exit(lint_imports(config_filename=sys.argv[2], no_cache=True))
    """, str(ROOT / "pyproject.toml"))
    assert proc.returncode != 0
    assert "rfkernels.validation -> rfkernels.analysis.tail" in proc.stdout


def test_no_import_cycle(staged):
    proc = _run(staged, """
        import grimp, json
        g = grimp.build_graph("rfkernels", cache_dir=None)
        index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]
        sys.setrecursionlimit(100000)

        def visit(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in g.find_modules_directly_imported_by(v):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    cycles.append(sorted(comp))

        for m in sorted(g.modules):
            if m not in index:
                visit(m)
        print(json.dumps(cycles))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]", f"import cycles: {proc.stdout}"


def _sources():
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def _body_lines(node):
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def test_modules_and_functions_within_limits():
    big, long = [], []
    for path in _sources():
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            big.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and _body_lines(node) > MAX_FUNCTION_LINES:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}"
    assert not long, f"function bodies over {MAX_FUNCTION_LINES} lines: {long}"


def test_no_private_name_crosses_modules():
    """``from x import _name`` and ``module._name`` are used only inside the module that defines them."""
    crossing = []
    for path in _sources():
        tree = ast.parse(path.read_text())
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__") \
                            and not (path.parent / f"{alias.name}.py").exists():  # a sibling module
                        crossing.append(f"{path.relative_to(ROOT)}: {alias.name} from {node.module}")
                    else:
                        modules.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                modules.update((a.asname or a.name).split(".")[0] for a in node.names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and _is_ours(node.value.id, tree):
                crossing.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value.id}.{node.attr}")
    assert not crossing, crossing


def _is_ours(name, tree):
    """True if ``name`` is bound by an import of one of our modules (not numba, numpy, ...)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("rfkernels")):
            if any((a.asname or a.name) == name for a in node.names):
                return True
        if isinstance(node, ast.Import):
            if any((a.asname or a.name) == name and a.name.startswith("rfkernels") for a in node.names):
                return True
    return False


def test_every_package_folder_is_installed():
    """pyproject lists every package (a non-editable install would silently leave one out)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for folder, inside in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join(["rfkernels", *([inside] if inside else []), *rel]))
    assert found == set(config["packages"])
