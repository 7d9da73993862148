"""Hub ids (`org/name[@revision]`) through huggingface_hub: its cache, HF_TOKEN and HF_HUB_OFFLINE.

Only config/index/tokenizer JSON files are downloaded. Tensor headers come from the cache when the
safetensors files are already there (e.g. after a `hf download`), else from huggingface_hub's
safetensors-metadata API, which fetches the headers by HTTP range requests and never the weights.
"""
from __future__ import annotations

import re
from pathlib import Path

from kconvert.errors import HeaderError, InputError
from kconvert.source.checkpoint import Checkpoint, FileEntry, load_folder
from kconvert.source.safetensors_header import parse_header_json

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}(@[A-Za-z0-9._/-]{1,200})?$")

SMALL_FILE_PATTERNS = ["*.json", "*.md", "*.txt", "*.jinja", "*.model", "*.tiktoken", "*.py"]


def is_hub_id(ref: str) -> bool:
    return bool(_HUB_ID.match(ref)) and ".." not in ref


def split_hub_id(ref: str) -> tuple[str, str | None]:
    repo_id, _, revision = ref.partition("@")
    return repo_id, (revision or None)


def load_hub(ref: str) -> Checkpoint:
    from huggingface_hub import HfApi, constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo_id, revision = split_hub_id(ref)
    offline = bool(constants.HF_HUB_OFFLINE)
    try:
        folder = Path(snapshot_download(repo_id, revision=revision, allow_patterns=SMALL_FILE_PATTERNS))
    except LocalEntryNotFoundError:
        raise InputError(
            f"{ref}: not in the Hugging Face cache and the Hub is not reachable"
            + (" (HF_HUB_OFFLINE is set)" if offline else ""),
            hint="download it first with `hf download`, or pass a local folder",
        ) from None
    except RepositoryNotFoundError:
        raise InputError(f"{ref}: no such repository on the Hub (or it is private: set HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise InputError(f"{ref}: no such revision") from None
    except GatedRepoError:
        raise InputError(f"{ref}: gated repository; accept its terms and set HF_TOKEN") from None
    except (HfHubHTTPError, OSError) as e:
        raise InputError(f"{ref}: the Hub could not be reached: {e}") from None

    # folder = <cache>/models--org--name/snapshots/<commit>; its files link into ../../blobs.
    repo_cache = folder.parent.parent
    ckpt = load_folder(folder, ref=ref, kind="hub", allowed_root=repo_cache)
    ckpt.repo_id, ckpt.revision, ckpt.commit = repo_id, revision, folder.name
    if ckpt.tensors or offline:
        if not ckpt.tensors:
            ckpt.notes.append("no safetensors file of this repository is in the cache; tensor checks are skipped")
        return ckpt

    try:
        meta = HfApi().get_safetensors_metadata(repo_id, revision=ckpt.commit)
    except (HfHubHTTPError, OSError) as e:
        raise InputError(f"{ref}: could not read safetensors headers from the Hub: {e}") from None
    except Exception as e:  # NotASafetensorsRepoError / SafetensorsParsingError live in errors too
        raise InputError(f"{ref}: {type(e).__name__}: {e}") from None
    for fname, fmeta in meta.files_metadata.items():
        header = {name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
                  for name, t in fmeta.tensors.items()}
        h = parse_header_json(fname, header, data_start=0, file_size=None)
        for name, info in h.tensors.items():
            if name in ckpt.tensors:
                raise HeaderError(fname, f"tensor is also in {ckpt.tensors[name].file}", tensor=name)
        # Remote offsets are relative to the data section; the header length is unknown here, so byte
        # ranges are fetched through the metadata API's own reader only when small tensors are needed.
        ckpt.tensors.update(h.tensors)
        ckpt.shard_metadata[fname] = dict(fmeta.metadata or {})
        ckpt.files.setdefault(fname, FileEntry(fname, None))
    ckpt.notes.append("tensor headers read from the Hub; small tensors (d2t, t2d, norms) were not downloaded")
    return ckpt
