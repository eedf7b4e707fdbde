"""The CSV text of a results row: the columns, and each value as the table writes it."""

from __future__ import annotations

import csv
import io
import math

import numpy as np

from ..comparison import ESTIMATOR_COLUMNS, RESULT_COLUMNS
from ..points import DEFAULT_KERNEL, GRID_AXES, KERNEL_AXES, output_dimension

#: Columns of the results table.
COLUMNS = ("point_id",) + GRID_AXES + ESTIMATOR_COLUMNS + RESULT_COLUMNS
#: The header line of a results table.
HEADER = ",".join(COLUMNS) + "\n"
#: Columns of a table written before the target-kernel axes: no ``kernel``, ``gamma``
#: or ``output_dimension`` (its rows are softmax rows; :func:`upgrade_fields`).
LEGACY_COLUMNS = tuple(c for c in COLUMNS if c not in KERNEL_AXES + ESTIMATOR_COLUMNS)
LEGACY_HEADER = ",".join(LEGACY_COLUMNS) + "\n"


def upgrade_fields(fields):
    """The fields of a row of a legacy table (:data:`LEGACY_COLUMNS`) as :data:`COLUMNS` has them.

    ``kernel`` is softmax, ``gamma`` empty and ``output_dimension`` that of
    the row's kind and m (empty where those are not valid: the row's check
    names them).
    """
    row = dict(zip(LEGACY_COLUMNS, fields))
    row["kernel"], row["gamma"] = DEFAULT_KERNEL, ""
    try:
        row["output_dimension"] = str(output_dimension(row["kind"], row["m"]))
    except (ValueError, TypeError, KeyError):
        row["output_dimension"] = ""
    return [row[c] for c in COLUMNS]


def format_value(v):
    """A value as a field of the table (``repr`` for floats; empty for None and NaN)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):  # missing / not applicable
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def row_line(row):
    """The line of the table (newline included) holding ``row``, a dict of :data:`COLUMNS`.

    A row without ``output_dimension`` gets its kind's at its m, one
    without ``kernel`` the softmax kernel.
    """
    buf = io.StringIO()
    row = dict(row)
    if row.get("output_dimension") is None:
        row["output_dimension"] = output_dimension(row["kind"], row["m"])
    if row.get("kernel") is None:
        row["kernel"] = DEFAULT_KERNEL
    fields = [format_value(row.get(c)) for c in COLUMNS]
    fields[COLUMNS.index("note")] = one_line(fields[COLUMNS.index("note")])
    csv.writer(buf, lineterminator="\n").writerow(fields)
    return buf.getvalue()


def one_line(text):
    """A note on one line (a table row is one line of the file)."""
    return text.replace("\r", " ").replace("\n", " ")


def csv_field(text):
    """``text`` as :func:`row_line` writes it (quoted where the csv module quotes)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([text, ""])
    return buf.getvalue()[:-2]


def float_texts(values, same=None, same_texts=None):
    """``format_value`` of each float of an array (NaN: empty), without a call per value.

    Where ``values`` equals ``same`` (an array already formatted as
    ``same_texts``) the text is reused.
    """
    out = [""] * values.size
    todo = ~np.isnan(values)
    if same is not None:
        reuse = todo & (values.view(np.int64) == same.view(np.int64))  # same bits: same text
        for i in np.flatnonzero(reuse).tolist():
            out[i] = same_texts[i]
        todo &= ~reuse
    where = np.flatnonzero(todo).tolist()
    for i, text in zip(where, map(repr, values[todo].tolist())):
        out[i] = text
    return out
