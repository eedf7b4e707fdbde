"""The projection ensembles: how the rows of W are coupled (the pair law's first half).

Drawing whole matrices is :func:`rfkernels.draw_projections`; the reduced
engine's laws of the scalar projections are in :mod:`rfkernels.engine`
(its kernels use :attr:`Ensemble.code`).
"""

from __future__ import annotations

from . import registry

#: The literal-only ensembles' reason for the reduced engine.
_LITERAL = "use method='literal'"

IID = registry.register("ensemble", registry.Ensemble(
    name="iid", seed_index=0, summary="independent Gaussian rows", blocked=False, cosine=None, code=0))

ORTHOGONAL = registry.register("ensemble", registry.Ensemble(
    name="orthogonal", seed_index=1, summary="Haar-orthogonal blocks of d rows (QR with the sign fix)",
    blocked=True, cosine=lambda d: 0.0, code=1))

UNFIXED_QR = registry.register("ensemble", registry.Ensemble(
    name="orthogonal-unfixed-qr", seed_index=2,
    summary="the reference code's QR without the sign fix (not Haar: biased)",
    blocked=True, cosine=None,
    reduced_reason=("method='reduced' has no sampler for ensemble='orthogonal-unfixed-qr': its "
                    "projections are not rotation invariant, so the scalar projections cannot be "
                    f"drawn on their own; {_LITERAL}"),
    theory_reason="no closed form for the orthogonal-unfixed-qr ensemble (Monte Carlo only)"))

SIMPLEX = registry.register("ensemble", registry.Ensemble(
    name="simplex", seed_index=3, summary="simplex random features: blocks with pairwise cosine -1/(d-1)",
    blocked=True, cosine=lambda d: -1.0 / (d - 1.0), min_d=2,
    min_d_note=" (a regular simplex of d unit vectors with pairwise cosine -1/(d-1))", code=2))

SORF = registry.register("ensemble", registry.Ensemble(
    name="sorf", seed_index=4, summary="structured orthogonal random features (Hadamard-diagonal products)",
    blocked=True, cosine=None,
    reduced_reason=f"method='reduced': no reduced sampler yet for ensemble='sorf'; {_LITERAL}",
    theory_reason="no closed form for the sorf ensemble (Monte Carlo only)"))

#: xformers' FAVOR feature maps (SMOrf, SMHyperbolic, SMReg at commit 279e0833;
#: :func:`rfkernels.projections.xformers_features`): every row is coupled to every
#: other (a column of a slice of m x m blocks), hence not ``blocked``.
XFORMERS = registry.register("ensemble", registry.Ensemble(
    name="orthogonal-xformers", seed_index=5,
    summary=("xformers' feature maps: columns of a slice of m x m QR blocks, "
             "signs on the rows (not Gaussian: biased)"),
    blocked=False, cosine=None,
    reduced_reason=("method='reduced' has no sampler for ensemble='orthogonal-xformers': its "
                    "projections are not rotation invariant, so the scalar projections cannot be "
                    f"drawn on their own; {_LITERAL}"),
    theory_reason="no closed form for the orthogonal-xformers ensemble (Monte Carlo only)"))
