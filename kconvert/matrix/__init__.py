"""kconvert matrix: many drafts x every engine row (static, scored, live), cached per cell.

The stage above the commands: it runs `inspect`, `score` and `verify` per cell and assembles one document
(`schemas/matrix.schema.json`). Executors (`kconvert.matrix.executors`) decide where each cell runs; the cell
functions (`kconvert.matrix.cells`) take one picklable `kconvert.matrix.spec.CellSpec`. `matrix()`
(`kconvert.matrix.command`) is the whole command as one call: the project configuration, the executor by name,
the cache.
"""
from __future__ import annotations

from kconvert.matrix.build import MatrixRequest, engine_rows, run_matrix
from kconvert.matrix.cache import CellCache
from kconvert.matrix.command import matrix
from kconvert.matrix.spec import CellSpec

__all__ = ["CellCache", "CellSpec", "MatrixRequest", "engine_rows", "matrix", "run_matrix"]
