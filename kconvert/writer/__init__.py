"""The checkpoint writer behind `kconvert fix`: streams a checkpoint to a new folder with a plan's ops applied.

    write_checkpoint(ckpt, ops, out_dir, *, force=False, provenance=None, progress=None) -> WriteResult

The ops it applies are defined here (`kconvert.writer.ops`: the vocabulary rules and the plan write fixes in);
`writer.config` applies the config ops, `writer.layout` checks the tensor ops and lays out the output shards,
`writer.stream` moves the bytes, `writer.atomic` makes the output appear complete or not at all, and
`writer.write` runs the whole.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kconvert.writer.write import WriteResult, write_checkpoint

__all__ = ["WriteResult", "write_checkpoint"]


def __getattr__(name: str) -> Any:
    """The package's two names, imported when first asked for (PEP 562: Python calls this only for a name the
    module lacks): the rules import `kconvert.writer.ops` (plain data classes) for the fixes they propose, and
    importing the package must not load the byte mover (stream, hash cache, sqlite3: ~25 ms) into
    `kconvert --help` and `kconvert inspect`."""
    if name in __all__:
        from kconvert.writer import write
        return getattr(write, name)
    raise AttributeError(f"module 'kconvert.writer' has no attribute {name!r}")
