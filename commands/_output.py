"""Machine-readable output of every subcommand: the strict JSON of :mod:`rfkernels.strict_json`."""

from __future__ import annotations

from ..strict_json import NULL_REASONS, dumps, json_safe, nonfinite_reason

__all__ = ["NULL_REASONS", "dumps", "json_safe", "nonfinite_reason"]
