"""What a vLLM process for one live request is started with, read from the files: the target's and draft's
config.json (`read_model_config`), a draft copy with config overrides (`patched_draft_folder`), and the engine
arguments `kconvert.runners.vllm_args` computes from them (`setup_engine`)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kconvert.engines.installed import detect_platform
from kconvert.engines.live_messages import LiveRequest
from kconvert.errors import InputError, UsageError
from kconvert.runners.vllm_args import build_engine_args
from kconvert.source.checkpoint import read_json_file
from kconvert.source.names import CONFIG_NAME
from kconvert.writer.config import deep_merge


def read_model_config(path_or_id: str | None, *, revision: str | None = None) -> dict[str, Any] | None:
    """The ``config.json`` of a local folder or, for a hub id, from the hub cache / hub; ``None`` where it cannot be
    had (no such file or repository, the Hub unreachable, not JSON): the engine arguments then keep vLLM's own
    defaults, and the engine reports the real problem when it loads the model."""
    if not path_or_id:
        return None
    p = Path(path_or_id)
    if p.is_dir():
        cfg = p / CONFIG_NAME
        try:
            # the read guard, as for every checkpoint's config: a regular file, bounded, strict JSON
            return read_json_file(cfg, f"{path_or_id}/{CONFIG_NAME}") if cfg.is_file() else None
        except InputError:  # unreadable, not UTF-8 or not JSON
            return None
    # huggingface_hub is imported here only: a local run never needs it
    from huggingface_hub.errors import EntryNotFoundError  # deferred with it

    from kconvert.source.hub import hub_file

    try:
        local = hub_file(path_or_id, CONFIG_NAME, revision=revision)
        return json.loads(Path(local).read_text(encoding="utf-8"))
    # HfHubHTTPError (and RepositoryNotFoundError ...) and LocalEntryNotFoundError are OSErrors; an invalid repo
    # id (HFValidationError) and bad JSON are ValueErrors; a missing file on the Hub is EntryNotFoundError
    except (OSError, ValueError, EntryNotFoundError):
        return None


def patched_draft_folder(draft: str, overrides: Mapping[str, Any], dest: Path) -> Path:
    """A folder that is ``draft`` with ``overrides`` merged into its ``config.json`` (other files symlinked).

    vLLM 0.32's ``SpeculativeConfig`` has no ``hf_overrides`` for the draft: only a *callable* target
    ``hf_overrides`` reaches the draft config, dict overrides stay target-only.
    """
    src = Path(draft)
    if not src.is_dir() or not (src / CONFIG_NAME).is_file():
        raise UsageError(f"draft overrides need a local draft folder with config.json: {draft}")
    dest.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        if entry.name != CONFIG_NAME:
            os.symlink(entry.resolve(), dest / entry.name)
    config = json.loads((src / CONFIG_NAME).read_text(encoding="utf-8"))
    (dest / CONFIG_NAME).write_text(json.dumps(deep_merge(config, overrides), indent=2), encoding="utf-8")
    return dest


@dataclass
class EngineSetup:
    """Everything a vLLM process for one request is started with."""

    platform: str
    engine_args: dict[str, Any]
    env: dict[str, str]
    auto_settings: list[str]
    draft_path: str | None = None  # the patched temporary copy of the draft, when the request overrides its config


def setup_engine(req: LiveRequest, scratch: Path) -> EngineSetup:
    """The engine arguments for `req` on this machine's platform, with the draft's config overrides applied in a
    copy under `scratch` (the caller removes it)."""
    draft_path = None
    if req.draft and req.draft_overrides:
        draft_path = str(patched_draft_folder(req.draft, req.draft_overrides, scratch / "draft"))
    platform = detect_platform()
    draft_config = read_model_config(draft_path or req.draft) if req.draft else None
    engine_args, env, auto = build_engine_args(req, platform=platform, target_config=read_model_config(req.target),
                                               draft_config=draft_config, draft_path=draft_path)
    return EngineSetup(platform, engine_args, env, auto, draft_path)
