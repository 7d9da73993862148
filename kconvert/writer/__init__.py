"""The checkpoint writer behind `kconvert fix`: streams a checkpoint to a new folder with a plan's ops applied.

    write_checkpoint(ckpt, ops, out_dir, *, force=False, provenance=None, progress=None) -> WriteResult

See `kconvert.writer.stream` for how bytes move and `kconvert.writer.atomic` for how the output appears.
"""
from kconvert.writer.layout import build_layout
from kconvert.writer.stream import WriteResult, write_checkpoint

__all__ = ["WriteResult", "build_layout", "write_checkpoint"]
