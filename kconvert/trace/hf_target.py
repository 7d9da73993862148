"""The target in HF transformers, for `kconvert trace --engine hf`.

The target is built from its own `config.json` by transformers' built-in classes (never remote code: a
model type transformers does not ship is refused) and its safetensors weights only (the loader is given a
folder that holds nothing else, so no pickle can be read). Wrappers such as Kimi-K2.5 keep their text model
under `text_config` and prefix its weights (`language_model.`): the text model is loaded on its own.
`resolve_folder` and `weight_prefix` are shared with the recorders that read the target's files themselves.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kconvert.errors import InputError, MissingPackageError, UsageError
from kconvert.source.names import CONFIG_NAME, INDEX_NAME

# Model types whose weights transformers loads under another model type's classes (same architecture).
MODEL_TYPE_ALIASES = {"kimi_k2": "deepseek_v3"}
TOKEN_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
               "generation_config.json", "chat_template.jinja", "chat_template.json")


def load_torch():
    """torch, or MissingPackageError naming `kconvert trace` and the extra that installs it."""
    try:
        import torch
    except ModuleNotFoundError:
        raise MissingPackageError("kconvert trace", "torch", "trace") from None
    return torch


@dataclass
class LoadedTarget:
    model: Any
    tokenizer: Any
    config: dict[str, Any]  # the target's config.json as given
    text_config: dict[str, Any]
    root: Path
    weight_files: list[dict[str, Any]]
    eos_ids: list[int]
    source: str
    revision: str | None = None
    commit: str | None = None


def resolve_folder(ref: str) -> tuple[Path, str | None, str | None]:
    p = Path(ref).expanduser()
    if os.path.isdir(p):  # os.path: a too long name is no folder, where Path.is_dir raises ENAMETOOLONG
        return p, None, None
    from kconvert.source.hub import is_hub_id, split_hub_id

    if not is_hub_id(ref):
        raise InputError(f"{ref}: not a folder or a Hub id")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    repo_id, revision = split_hub_id(ref)
    try:
        # safetensors, configs and tokenizer only: never a pickle, never code
        path = snapshot_download(repo_id, revision=revision, allow_patterns=["*.safetensors", "*.json",
                                                                           "tokenizer.model", "*.jinja"])
    except LocalEntryNotFoundError:
        raise InputError(f"{ref}: not in the Hugging Face cache and the Hub is not reachable") from None
    except (HfHubHTTPError, OSError) as e:
        raise InputError(f"{ref}: {e}") from None
    return Path(path), revision, Path(path).name


def load_target_model(ref: str, dtype: str, device: Any, *, need_tokenizer: bool = True) -> LoadedTarget:
    torch = load_torch()
    try:
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ModuleNotFoundError:
        raise MissingPackageError("kconvert trace", "transformers", "trace") from None
    from kconvert.source.checkpoint import load_folder

    root, revision, commit = resolve_folder(ref)
    ckpt = load_folder(root, ref=ref)  # validated file list, config and safetensors headers
    if not ckpt.tensors:
        raise InputError(f"{ref}: no safetensors weights (kconvert never loads pickled weights)")
    cfg = ckpt.config
    text = dict(cfg["text_config"]) if isinstance(cfg.get("text_config"), dict) else dict(cfg)
    mt = text.get("model_type")
    text["model_type"] = MODEL_TYPE_ALIASES.get(mt, mt)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if text["model_type"] not in CONFIG_MAPPING:
        raise UsageError(f"{ref}: model type {mt!r} is not built into transformers {transformers.__version__}; "
                         "kconvert never runs a checkpoint's own code (record the trace where the target runs, "
                         "or from an offline dump with `kconvert trace <target> --from-dump <dump-dir> -o <trace-dir>`)")
    names = list(ckpt.tensors)
    prefix = weight_prefix(names)
    with tempfile.TemporaryDirectory(prefix="kconvert-trace-target-") as tmp:
        t = Path(tmp)
        (t / CONFIG_NAME).write_text(json.dumps(text))
        for rel in ckpt.safetensors_files:
            dst = t / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.symlink((root / rel).resolve(), dst)
        if ckpt.index is not None:
            os.symlink((root / INDEX_NAME).resolve(), t / INDEX_NAME)
        hf_cfg = AutoConfig.from_pretrained(str(t), trust_remote_code=False)
        kw: dict[str, Any] = {"config": hf_cfg, "dtype": getattr(torch, dtype), "trust_remote_code": False,
                              "use_safetensors": True}
        if prefix:
            kw["key_mapping"] = {"^" + prefix.replace(".", r"\."): ""}
        try:
            model = AutoModelForCausalLM.from_pretrained(str(t), **kw)
        except (OSError, ValueError, RuntimeError) as e:
            raise InputError(f"{ref}: transformers could not load the target: {str(e).splitlines()[0]}") from None
    model.eval().to(device)
    tok = None
    try:
        tok = AutoTokenizer.from_pretrained(str(root), trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - a tokenizer that needs code, or none at all
        if need_tokenizer:
            raise InputError(f"{ref}: the tokenizer cannot be loaded without running the checkpoint's code "
                             f"({type(e).__name__}); give token ids with --continuations") from None
    from kconvert.source import hashcache

    files = []
    for rel in ckpt.safetensors_files:
        p = root / rel
        files.append({"name": rel, "size": p.stat().st_size, "sha256": hashcache.lookup(p)})
    return LoadedTarget(model, tok, cfg, text, root, files, target_eos_ids(root, tok), ref, revision, commit)


def target_eos_ids(root: Path, tokenizer: Any) -> list[int]:
    """The tokens that end a greedy output: the tokenizer's EOS and generation_config.json's eos_token_id."""
    from kconvert.source.checkpoint import read_json_file

    eos: set[int] = set()
    if isinstance(getattr(tokenizer, "eos_token_id", None), int):
        eos.add(tokenizer.eos_token_id)
    gen = root / "generation_config.json"
    if gen.is_file():
        g = read_json_file(gen, "generation_config.json")
        e = g.get("eos_token_id") if isinstance(g, dict) else None
        eos.update([e] if isinstance(e, int) else [i for i in (e or []) if isinstance(i, int)])
    return sorted(eos)


def weight_prefix(names: list[str]) -> str:
    for cand in ("", "language_model.", "model.language_model.", "text_model."):
        if f"{cand}model.embed_tokens.weight" in names:
            return cand
    for n in names:
        if n.endswith("model.embed_tokens.weight"):
            return n[: -len("model.embed_tokens.weight")]
    raise InputError("cannot find the text model's embed_tokens among the target's tensors")
