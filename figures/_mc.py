"""Monte Carlo points for the figures, through the analysis layer's evaluate_point.

Every kernel-level point runs with ``proposal="auto"`` (:data:`PROPOSAL`):
where a plain pilot run finds a heavy tail, the trials come from the tilted
importance-sampling proposal with exact weights, so that a point where
theory exists is drawn with a trustworthy error bar (the report counts the
tilted points and the points still drawn hollow).
"""

from __future__ import annotations

from rfkernels.analysis.comparison import evaluate_point
from rfkernels.analysis.points import point_seed

#: Trials per Monte Carlo point: the default run and ``--quick``. 250,000 trials leave
#: the relative standard error of every point of these figures at most 1.4% (0.17-0.69% at
#: 1,000,000, measured), so that a 95% interval is at most about 2.7% of the value: smaller
#: than a marker on their log axes. More trials (1,000,000 until issue 37) only narrowed
#: bars too short to see, and took most of the figures' time.
TRIALS = {False: 250_000, True: 4_000}
#: The Monte Carlo backend of every point.
BACKEND = "numba"
#: The Monte Carlo proposal of every point (:func:`rfkernels.analysis.monte_carlo.monte_carlo_mse`).
PROPOSAL = "auto"


def run_info(quick):
    """How a figure's Monte Carlo points are run (for the report): trials per point, backend."""
    return {"trials": TRIALS[bool(quick)], "unit": "trials per point", "backend": BACKEND,
            "proposal": PROPOSAL}


#: Columns of a Monte Carlo point kept in the figures' data.
COLUMNS = ("kind", "ensemble", "d", "m", "angle", "trials", "mse_mc", "stderr", "ci_low", "ci_high",
           "mse_exact", "z", "k_hat", "max_share", "tail_ok", "proposal", "ess")


def mc_point(*, kind, ensemble, d, m, angle, norm_x, norm_y, quick, seed, norms="chi",
             backend=BACKEND):
    """One Monte Carlo point (:data:`COLUMNS`: MSE, stderr, 95% interval, tail, proposal, exact MSE)."""
    point = {"kind": kind, "ensemble": ensemble, "norms": norms, "d": int(d), "m": int(m),
             "angle": float(angle), "norm_x": float(norm_x), "norm_y": float(norm_y),
             "norm_sum": None}
    row = evaluate_point(point, trials=TRIALS[bool(quick)], seed=point_seed(seed, point),
                         backend=backend, method="reduced", proposal=PROPOSAL)
    return {k: row[k] for k in COLUMNS}
