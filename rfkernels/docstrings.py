"""Parameter text written once and substituted into docstrings (SciPy's ``doccer`` is the model).

A docstring names a shared parameter by a placeholder alone on its line,
``%(kind)s``; :func:`fill` replaces it with the entry of :data:`PARAMETERS`
(or of its own keywords), indented as the placeholder is. The entry is the
numpydoc text of the parameter: its ``name : type`` line and its
description. Placeholders left unknown raise at import, so a docstring
cannot ship one.
"""

from __future__ import annotations

import re

__all__ = ["PARAMETERS", "fill", "substitute"]

#: The shared parameters of the front door, the exact MSE, Monte Carlo and the transformers.
PARAMETERS = {
    "kind": """\
kind : str
    A registered estimator kind (``rfkernels.KINDS``): ``'trig'``,
    ``'positive'`` (FAVOR+), ``'hyperbolic'``, ``'oprf'``, ``'offset'`` and
    the dense-exponential family ``'derf'``, ``'saderf'``, ``'aderf'``,
    ``'sderf'``; an unknown name raises ValueError listing the valid ones.""",
    "kind_or_spec": """\
kind : str or rfkernels.estimators.Estimator
    A registered kind (``rfkernels.KINDS``), or a validated Estimator
    (``rfkernels.estimator(...).spec``), which carries its own ensemble,
    norms, kernel and parameters: leave those out.""",
    "ensemble": """\
ensemble : str, default 'iid'
    A registered projection ensemble (``rfkernels.ENSEMBLES``): iid
    Gaussian rows, Haar-orthogonal blocks of d rows (``'orthogonal'``),
    ``'simplex'``, ``'sorf'``, and the biased constructions of public code
    (``'orthogonal-unfixed-qr'``, ``'orthogonal-xformers'``).""",
    "norms": """\
norms : str, default 'chi'
    The row norms (``rfkernels.NORMS``): independent chi(d) (unbiased),
    ``'fixed'`` sqrt(d) (biased: the MSE is bias² plus variance) or
    ``'antithetic'`` chi(d) norms coupled in pairs of rows of a block.""",
    "kernel": """\
kernel : {'softmax', 'gaussian'}, default 'softmax'
    The target: ``exp(x·y)`` or ``exp(-gamma |x - y|^2)``, which every
    softmax estimator estimates at ``sqrt(2 gamma) (x, y)`` times
    ``exp(-gamma (|x|^2 + |y|^2))``.""",
    "gamma": """\
gamma : float, optional
    The Gaussian kernel's parameter (> 0; required with
    ``kernel='gaussian'``, refused otherwise).""",
    "A": """\
A : float, array_like or 'auto', optional
    ``kind='oprf'``: a float < 1/8, or ``'auto'`` (fitted on data); left
    out, each pair's optimal ``A*``. ``kind='derf'``: a float a (aI) or a
    symmetric (d, d) array with 8A below the identity.""",
    "B": """\
B_query, B_key : array_like of shape (d, d), optional
    ``kind='derf'`` only: the query and key maps (``B_key`` derived from
    :math:`B_q^\\top (I - 4A)^{-1} B_k = I` when left out).""",
    "population": """\
population : tuple of array_like, optional
    ``(queries, keys)``, (n, d) and (n', d), on which the data-fitted kinds
    (``'saderf'``, ``'aderf'``, ``'sderf'``) are fitted.""",
    "m": """\
m : int
    Number of projections (rows of W); the feature dimension is m, or 2m
    for kinds whose features come in pairs.""",
    "log": """\
log : bool, default False
    Return the natural log of the MSE: finite wherever the MSE is
    positive, even far beyond float64's range.""",
    "trials": """\
trials : int
    Number of independent estimates, >= 2 (integral floats such as ``1e6``
    are accepted).""",
    "seed": """\
seed : None, int >= 0, numpy.random.SeedSequence or numpy.random.Generator, default 0
    Root of all randomness, recorded in the result; the same seed gives the
    same estimates on every backend.""",
    "backend": """\
backend : {'numpy', 'numba', 'cupy', 'auto'}, default 'numpy'
    Where the trials run; ``'cupy'`` needs the ``gpu`` extra and a CUDA
    device; ``'auto'``: NumPy for a small run (no kernel to compile),
    Numba otherwise. The same estimates on every backend.""",
    "method": """\
method : {'reduced', 'literal'}, default 'reduced'
    ``'reduced'`` draws only the m scalar projections an estimate depends
    on; ``'literal'`` draws whole projection matrices and evaluates the
    feature maps users run.""",
    "chunk": """\
chunk : int, optional
    Trials per chunk (memory and progress granularity); the results do not
    depend on it.""",
    "progress": """\
progress : callable, optional
    ``progress(done_trials, total_trials)``, called after each chunk.""",
    "proposal": """\
proposal : {'auto', 'plain', 'tilted'}, default 'auto'
    The law trials are drawn from: the estimator's own, the tilted
    importance-sampling proposal with exact weights, or chosen per pair by
    a pilot run (``docs/importance.rst``).""",
}

_PLACEHOLDER = re.compile(r"^([ \t]*)%\((\w+)\)s[ \t]*$", re.MULTILINE)


def substitute(doc, table):
    """``doc`` with each placeholder line ``%(name)s`` replaced by ``table[name]``, indented as it.

    Raises KeyError naming a placeholder without an entry.
    """
    if not doc:
        return doc

    def one(match):
        indent, name = match.groups()
        if name not in table:
            raise KeyError(f"docstring placeholder %({name})s has no text")
        return "\n".join(indent + line if line else line for line in table[name].splitlines())

    return _PLACEHOLDER.sub(one, doc)


def fill(**extra):
    """Decorator: substitute :data:`PARAMETERS` (and ``extra``) into the object's docstring."""
    table = {**PARAMETERS, **extra}

    def decorate(obj):
        obj.__doc__ = substitute(obj.__doc__, table)
        return obj

    return decorate
