"""The checkpoint writer behind `kconvert fix`: streams a checkpoint to a new folder with a plan's ops applied.

    write_checkpoint(ckpt, ops, out_dir, *, force=False, provenance=None, progress=None) -> WriteResult

The ops it applies are defined here (`kconvert.writer.ops`: the vocabulary rules and the plan write fixes in);
`writer.config` applies the config ops, `writer.layout` checks the tensor ops and lays out the output shards,
`writer.stream` moves the bytes, `writer.atomic` makes the output appear complete or not at all, and
`writer.write` runs the whole.
"""
from kconvert.writer.write import WriteResult, write_checkpoint

__all__ = ["WriteResult", "write_checkpoint"]
