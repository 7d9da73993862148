"""Where a checkpoint's bytes come from: a local folder or a Hub id, read into one `Checkpoint` (files, config,
validated tensor headers; never the weights). Knows nothing of drafts: a caller that wants some small tensors
read up front (`prefetch`) names them."""
from __future__ import annotations

import os
from pathlib import Path

from kconvert.errors import InputError
from kconvert.source.checkpoint import Checkpoint, Prefetch, load_folder
from kconvert.source.hub import NOT_A_HUB_ID, hub_id_problem, load_hub

def open_checkpoint(ref: str | os.PathLike[str], *, prefetch: Prefetch | None = None) -> Checkpoint:
    """A local folder, or a Hub id `org/name[@revision]` resolved through huggingface_hub.

    prefetch: for a Hub checkpoint whose weights are not in the cache, the small tensors to read by range request
    before this returns, so that a failing or lying server stops here with one line (a local folder reads them
    when they are used)."""
    # fsdecode, not fspath: a bytes path (a non-UTF-8 folder name) becomes a str with surrogate escapes
    # instead of a TypeError from str methods below.
    s = os.fsdecode(ref)
    if not s.strip():
        from kconvert.errors import UsageError

        raise UsageError("the draft argument is empty: give a draft folder (./my-draft) or a Hub id "
                         "(org/name[@revision])")
    p = Path(s)
    # os.path.exists, not Path.exists: a name too long for the file system (ENAMETOOLONG) is no folder here,
    # where Path.exists raises
    if os.path.exists(s) or s.startswith((".", "/", "~")) or os.sep in s.rstrip("/") and s.count("/") != 1:
        return load_folder(p.expanduser(), ref=s)
    problem = hub_id_problem(s)
    if problem is None:
        return load_hub(s, prefetch=prefetch)
    raise InputError(f"{s}: neither a local folder nor a Hub id of the form org/name[@revision]"
                     + ("" if problem == NOT_A_HUB_ID else f" ({problem})"))


__all__ = ["Checkpoint", "Prefetch", "open_checkpoint"]
