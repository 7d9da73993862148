"""kconvert matrix: many drafts x every engine row (static, scored, live), cached per cell.

The stage above the commands: it runs `inspect`, `score` and `verify` per cell and assembles one document
(`schemas/matrix.schema.json`). Executors (`kconvert.matrix.executors`) decide where each cell runs.
"""
