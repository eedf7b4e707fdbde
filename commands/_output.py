"""Machine-readable output of every subcommand: the strict JSON of :mod:`rfkernels.strict_json`."""

from __future__ import annotations

from ..strict_json import NULL_REASONS, dumps, json_safe, nonfinite_reason

__all__ = ["NULL_REASONS", "dumps", "json_safe", "nonfinite_reason", "write_texts"]


def write_texts(folder, texts):
    """Write ``{name: text}`` into ``folder`` (created if missing), each atomically, in order;
    returns the paths. The caller has checked the folder (its command's folder rule)."""
    import os

    from ..storage import atomic_write

    os.makedirs(folder, exist_ok=True)
    paths = []
    for name, text in texts.items():
        paths.append(os.path.join(folder, name))
        atomic_write(paths[-1], text)
    return paths
