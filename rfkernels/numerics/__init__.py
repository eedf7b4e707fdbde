"""The mathematics below every estimator: the layer the registry's kinds build on.

- :mod:`~rfkernels.numerics.elementary`: ``exp``, ``log`` and ``sincos`` in
  NumPy/CuPy, the same bits as their Numba twins in
  :mod:`~rfkernels.numerics.elementary_numba`;
- :mod:`~rfkernels.numerics.scalar`: one scalar source, two compile
  targets (Numba CPU and CUDA);
- :mod:`~rfkernels.numerics.hypergeometric`: the series of the exact MSE;
- :mod:`~rfkernels.numerics.closed_form`: the closed forms of the paper's
  kinds, log domain, unchecked (the public, validated entry is
  :mod:`rfkernels.theory`);
- :mod:`~rfkernels.numerics.beyond`: the exact MSE beyond the paper
  (simplex, OPRF, norm laws), unchecked.
"""
