"""The checkpoint writer behind `kconvert fix`: streams a checkpoint to a new folder with a plan's ops applied.

    write_checkpoint(ckpt, ops, out_dir, *, force=False, provenance=None, progress=None) -> WriteResult

(`WriteResult` is `kconvert.writer.write.WriteResult`.)

The ops it applies are defined here (`kconvert.writer.ops`: the vocabulary rules and the plan write fixes in);
`writer.config` applies the config ops, `writer.layout` checks the tensor ops and lays out the output shards,
`writer.stream` moves the bytes, `writer.atomic` makes the output appear complete or not at all, and
`writer.write` runs the whole.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kconvert.writer.write import WriteResult

__all__ = ["write_checkpoint"]


def write_checkpoint(*args: Any, **kwargs: Any) -> WriteResult:
    """`kconvert.writer.write.write_checkpoint` (its parameters and result, `WriteResult`, are defined there)."""
    # deferred: the rules import `kconvert.writer.ops` (plain data classes) for the fixes they propose, and
    # importing the package must not load the byte mover (stream, hash cache, sqlite3: ~25 ms) into
    # `kconvert --help` and `kconvert inspect`
    from kconvert.writer import write

    return write.write_checkpoint(*args, **kwargs)
