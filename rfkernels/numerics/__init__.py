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
- :mod:`~rfkernels.numerics.oprf_simplex`: the exact MSE of OPRF features
  and of simplex blocks (rows at a fixed cosine, by quadrature), unchecked;
- :mod:`~rfkernels.numerics.antithetic_mse`: the change antithetic norms
  make to it;
- :mod:`~rfkernels.numerics.term_form`: the one thing these know of a kind,
  the shape of its term (:class:`~rfkernels.numerics.term_form.TermForm`;
  with the ensemble's row cosine, what the kinds pass in: no name).
"""
