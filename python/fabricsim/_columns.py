"""The core's result columns as Arrow tables, without copying numeric data: what a run's
results and a topology's ``links`` table are made of."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["table_from_columns"]


def table_from_columns(columns: list[tuple[str, Any]]) -> pa.Table:
    """A table from the core's (name, column) pairs without copying numeric data. A time
    that never came (NaN in the core: a failed flow's finish, a done flow's failure) and an
    id that does not apply (-1: a collective's flow has no one src or dst) are null, so that
    tables compare equal and null-aware tools see a missing value.

    Example::

        import numpy as np
        t = fs.results.table_from_columns([("finish_s", np.array([1.0, np.nan])), ("src", np.array([3, -1]))])
        t.to_pylist()   # [{'finish_s': 1.0, 'src': 3}, {'finish_s': None, 'src': None}]
    """
    arrays = []
    names = []
    for name, col in columns:
        if isinstance(col, tuple):
            indices, values = col
            arrays.append(
                pa.DictionaryArray.from_arrays(
                    pa.array(indices, mask=indices < 0), pa.array(values, type=pa.string())
                )
            )
        else:
            missing = np.isnan(col) if col.dtype.kind == "f" else col < 0
            arrays.append(pa.array(col, mask=missing) if missing.any() else pa.array(col))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)
