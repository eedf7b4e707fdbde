r"""The shape of a kind's per-projection term: all the exact-MSE numerics know of a kind.

The numerics below the registry never see a kind's name: each kind module
of :mod:`rfkernels.estimators` passes its :class:`TermForm` (and its
ensemble's row cosine) to :mod:`rfkernels.numerics.closed_form`,
:mod:`rfkernels.numerics.oprf_simplex` and
:mod:`rfkernels.numerics.antithetic_mse`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TermForm:
    r"""How one projection's term depends on the row ``w`` and the pair (x, y).

    Attributes
    ----------
    on_sum : bool
        True: the term is a function of :math:`w\cdot u`, :math:`u = x + y`
        (argument :math:`s = |u|^2`, prefactor :math:`\Lambda`, squared
        :math:`\Lambda^2`); False: of :math:`w\cdot z`, :math:`z = x - y`
        (argument :math:`t = |z|^2`, prefactor :math:`\Lambda^{-1}`), a
        cosine.
    symmetric : bool
        True: even in ``w``, a pair of exponentials
        :math:`(e^{w\cdot u} + e^{-w\cdot u})/2` (on the sum) or
        :math:`\cos(w\cdot z)` (on the difference); False: one exponential
        :math:`e^{w\cdot u}`.
    quadratic : bool
        The exponent also carries :math:`A|w|^2` with its normaliser
        :math:`(1-4A)^{d/4}` (a parameter A < 1/8, optimal positive
        features; A = 0 is the plain exponential). One exponential on the
        sum only.

    Raises
    ------
    ValueError
        A combination no closed form or quadrature here serves (a term on
        the difference that is not a cosine, or ``quadratic`` with a
        symmetric term or on the difference).
    """

    on_sum: bool
    symmetric: bool
    quadratic: bool = False

    def __post_init__(self):
        for name in ("on_sum", "symmetric", "quadratic"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"TermForm.{name} must be a bool; got {getattr(self, name)!r}")
        if not self.on_sum and not self.symmetric:
            raise ValueError("TermForm: a term on w.(x - y) is the cosine (symmetric=True); "
                             "one exponential of w.(x - y) has no exact MSE here")
        if self.quadratic and (self.symmetric or not self.on_sum):
            raise ValueError("TermForm: the A|w|^2 term (quadratic=True) goes with one "
                             "exponential of w.(x + y) only (on_sum=True, symmetric=False)")

    def arrays(self, geom):
        """``(d, q, log prefactor^2)`` of a Geometry, broadcast to its batch shape.

        ``q`` is ``s`` on the sum, ``t`` on the difference; the squared
        prefactor is :math:`\\Lambda^{\\pm 2}`, i.e. ``-2 half_sq`` or ``2 half_sq``.
        """
        d, half_sq, s, t = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in geom))
        if not self.on_sum:
            return d, t, 2.0 * half_sq
        return d, s, -2.0 * half_sq


__all__ = ["TermForm"]
