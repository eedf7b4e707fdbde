"""No layer outside the registry branches on a kind's, ensemble's or norm law's name (issue 35).

Every caller goes through the entry's fields (JAX's PRNG plugins are the
model, ``../shared/STYLE.md``): a registered kind that a chain of name
comparisons does not list would otherwise fall through to another kind's
code. The scan covers ``rfkernels/`` (outside ``rfkernels/estimators/``,
the registry's own modules) and ``analysis/``; figures and commands may
pick named estimators to draw or to default to.

Flagged: a comparison (``==``, ``!=``, ``in``, ``not in``) with a string
literal, or a collection of them, that is a registered name; the same with
a module-level constant holding such names; a dict literal keyed by
registered names that is subscripted (a lookup table); ``.index`` of a
name list (seeds take the entry's frozen ``seed_index``).
"""

import ast
import pathlib

import pytest

from rfkernels.estimators import registry

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCANNED = ("rfkernels", "analysis")
REGISTRY = ROOT / "rfkernels" / "estimators"
AXES = ("kind", "ensemble", "norms", "preset")


def _names():
    return {name for axis in AXES for name in registry.names(axis)}


def _strings(node, constants):
    """The string constants of a literal (or a collection of literals, or a module constant)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        out = set()
        for elt in node.elts:
            out |= _strings(elt, constants)
        return out
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in ("set", "frozenset", "tuple") and node.args:
        return _strings(node.args[0], constants)
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    return set()


def _module_constants(tree):
    """Module-level names bound to literal collections of strings, and dict literals' string keys."""
    out, tables = {}, {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
        value = getattr(node, "value", None)
        if value is None or isinstance(value, ast.Constant):
            continue
        found = _strings(value, {})
        keys = _dict_keys(value)
        for t in targets:
            if isinstance(t, ast.Name) and found:
                out[t.id] = found
            if isinstance(t, ast.Name) and keys:
                tables[t.id] = keys
    return out, tables


def _dict_keys(node):
    keys = set()
    if isinstance(node, ast.Dict):
        for key in node.keys:
            if key is not None:
                keys |= _strings(key, {})
    return keys


def scan(source, names, where="<source>"):
    """Every place in ``source`` that branches on one of ``names`` (a list of strings)."""
    tree = ast.parse(source)
    constants, tables = _module_constants(tree)
    hits = []
    for node in ast.walk(tree):
        found = set()
        if isinstance(node, ast.Compare):
            for part in [node.left] + node.comparators:
                found |= _strings(part, constants)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
            found |= _dict_keys(node.value)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            found |= tables.get(node.value.id, set())  # a lookup table keyed by names
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("index", "get"):
            if node.func.attr == "index":
                found |= _strings(node.func.value, constants)
            elif isinstance(node.func.value, ast.Name):
                found |= tables.get(node.func.value.id, set())
        hit = sorted(found & names)
        if hit:
            hits.append(f"{where}:{node.lineno}: {', '.join(hit)}: {ast.unparse(node)[:100]}")
    return hits


def _sources():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if REGISTRY in path.parents:
                continue
            yield path


def test_no_layer_branches_on_a_registered_name():
    names = _names()
    hits = []
    for path in _sources():
        hits += scan(path.read_text(), names, str(path.relative_to(ROOT)))
    assert not hits, "name comparisons outside the registry:\n" + "\n".join(hits)


def test_the_scan_can_fail():
    names = _names()
    bad = '''
PAPER = ("trig", "positive")
def f(kind, ensemble, norms):
    if kind == "trig":
        return 1
    if ensemble in ("iid",):
        return {"chi": 0, "fixed": 1}[norms]
    return kind in PAPER or PAPER.index(kind) or CODES[kind] or CODES.get(kind)
CODES = {"positive": 0}
'''
    hits = scan(bad, names)
    assert len(hits) == 7, hits
    assert not scan('def g(kind):\n    return kind == "softmax" or kind in ("identity", "elu1")\n', names)


def test_seed_indices_are_frozen_and_distinct():
    """Studies seed by the entry's frozen index: today's positions, and a second one is refused."""
    from dataclasses import replace

    for axis in ("kind", "ensemble"):
        got = [registry.entry(axis, n).seed_index for n in registry.names(axis)]
        assert got == list(range(len(got)))
    clash = replace(registry.entry("kind", "positive"), name="positive-again")
    with pytest.raises(ValueError, match="seed_index=1 is registered already"):
        registry.register("kind", clash)
    assert "positive-again" not in registry.names("kind")
    plugin = registry.register("kind", replace(clash, seed_index=None))
    try:
        assert plugin.seed_index >= registry.PLUGIN_SEED_BASE
    finally:
        registry.unregister("kind", "positive-again")


@pytest.mark.parametrize("module,name", [
    ("rfkernels.theory", "KINDS"), ("rfkernels.theory", "PAPER_KINDS"), ("rfkernels.theory", "NORMS"),
    ("rfkernels.features", "SUM_NORMALIZABLE"), ("rfkernels.features", "oprf_exponents"),
    ("rfkernels.pairs", "check_oprf_a"),
])
def test_renamed_names_still_work_with_a_warning(module, name):
    """Names issue 35 moved (CHANGELOG.md) keep working, with a DeprecationWarning naming the new place."""
    import importlib

    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{module}.{name} is deprecated; use "):
        value = getattr(mod, name)
    assert value is not None
    with pytest.raises(AttributeError):
        getattr(mod, "no_such_name")
