"""The zoo: replicas of published EAGLE-3 drafts and what the public record says engines did with them.

One folder per draft: `build.py` (the replica: its config as published or as its producer's code writes it, real
tensor names, shapes and dtypes, large tensors as holes of sparse files), `RECORD.md` (what happened with that
draft in public, per engine and version, with sources) and `expect.json` (the verdict and finding ids kconvert
must give per engine row, the fix outcome, and the public record's outcome the verdict is checked against).
`tests/test_zoo.py` runs every case on every engine row.
"""
