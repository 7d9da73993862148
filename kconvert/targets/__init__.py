"""The target's facts: from a built-in profile, or from a target's config.json (local folder or Hub id).

Only `config.json` is read. Kimi-K2.5 wraps its DeepSeek-V3 text model under `text_config` and prefixes its
weights with `language_model.`; both are understood.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kconvert.errors import InputError, KConvertError, UsageError, did_you_mean
from kconvert.schemas import validate
from kconvert.source.checkpoint import read_json_file
from kconvert.source.config_fields import check_sizes, config_architectures
from kconvert.source.hub import hub_errors, hub_file, hub_id_problem, split_hub_id
from kconvert.source.names import CONFIG_NAME


@dataclass
class TargetModel:
    name: str
    origin: str  # "profile" | "folder" | "hub"
    architectures: list[str]
    model_type: str | None
    num_hidden_layers: int
    hidden_size: int
    vocab_size: int
    max_position_embeddings: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    torch_dtype: str | None = None
    rope_theta: float | None = None
    rope_scaling: dict[str, Any] | None = None
    mla: dict[str, Any] | None = None
    text_model_type: str | None = None
    weight_prefix: str = ""
    multimodal: bool = False
    tie_word_embeddings: bool | None = None
    local_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The engine loads the target only with --trust-remote-code (its repository ships the tokenizer's code).
    remote_code: bool = False
    # The code the repository names by auto_map, per file: {"config.json": {"AutoConfig": ...},
    # "tokenizer_config.json": {"AutoTokenizer": [...]}} (kconvert/engines/remote_code.py reads which of it the
    # engine runs)
    auto_maps: dict[str, Any] = field(default_factory=dict)

    @property
    def is_mla(self) -> bool:
        return bool(self.mla)

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name, "origin": self.origin, "architectures": self.architectures,
            "model_type": self.model_type, "text_model_type": self.text_model_type,
            "num_hidden_layers": self.num_hidden_layers, "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size, "max_position_embeddings": self.max_position_embeddings,
            "num_attention_heads": self.num_attention_heads, "torch_dtype": self.torch_dtype,
            "rope_theta": self.rope_theta, "rope_scaling": self.rope_scaling, "mla": self.mla,
            "weight_prefix": self.weight_prefix, "multimodal": self.multimodal,
            **({"unverified": self.extra["unverified"]} if self.extra.get("unverified") else {}),
        }


def profile_names() -> list[str]:
    d = resources.files("kconvert.targets") / "profiles"
    return sorted(p.name[:-5] for p in d.iterdir() if p.name.endswith(".json"))


def profile_hub_id(name: str) -> str | None:
    """The Hub id a built-in profile names (what an engine loads for it), or None when it names none."""
    f = resources.files("kconvert.targets") / "profiles" / f"{name}.json"
    if not f.is_file():
        return None
    return json.loads(f.read_text()).get("hub_id")


def load_profile(name: str) -> TargetModel:
    d = resources.files("kconvert.targets") / "profiles"
    f = d / f"{name}.json"
    if not f.is_file():
        raise UsageError(f"unknown target profile {name!r}{did_you_mean(name, profile_names())}; built-in "
                         f"profiles: {', '.join(profile_names())}")
    data = json.loads(f.read_text())
    validate(data, "target-profile")
    return TargetModel(
        name=data["name"], origin="profile", architectures=data["architectures"], model_type=data["model_type"],
        num_hidden_layers=data["num_hidden_layers"], hidden_size=data["hidden_size"],
        vocab_size=data["vocab_size"], max_position_embeddings=data.get("max_position_embeddings"),
        num_attention_heads=data.get("num_attention_heads"), num_key_value_heads=data.get("num_key_value_heads"),
        head_dim=data.get("head_dim"), torch_dtype=data.get("torch_dtype"), rope_theta=data.get("rope_theta"),
        rope_scaling=data.get("rope_scaling"), mla=data.get("mla"), text_model_type=data.get("text_model_type"),
        weight_prefix=data.get("weight_prefix", ""), multimodal=bool(data.get("multimodal")),
        remote_code=bool(data.get("remote_code")),
        # fields no public source states for this target (left null, so the rules comparing them are skipped)
        extra={"unverified": list(data.get("unverified", []))} if data.get("unverified") else {},
        auto_maps=({"tokenizer_config.json": {"AutoTokenizer": [data["tokenizer_auto_map"], None]}}
                   if data.get("tokenizer_auto_map") else {}),
    )


def _int(cfg: dict[str, Any], key: str) -> int | None:
    v = cfg.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(cfg: dict[str, Any], key: str) -> str | None:
    v = cfg.get(key)
    return v if isinstance(v, str) else None


def from_config(cfg: dict[str, Any], *, name: str, origin: str, local_path: str | None = None,
                tokenizer_config: Any = None) -> TargetModel:
    if not isinstance(cfg, dict):
        raise InputError(f"{name}: config.json is not a JSON object")
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    t = text or cfg
    # bounded sizes (kconvert.source.config_fields), before a size reaches a rule or an allocation
    check_sizes(cfg, f"{name}: config.json")
    if text is not None:
        check_sizes(text, f"{name}: config.json text_config")
    prefix = ""
    if text is not None:
        # Kimi-K2.5 and other wrappers keep the text model under `language_model.`
        prefix = "language_model."
    missing = [k for k in ("num_hidden_layers", "hidden_size", "vocab_size") if _int(t, k) is None]
    if missing:
        raise InputError(f"{name}: config.json lacks {', '.join(missing)} (is this the target model?)")
    mla = None
    if _int(t, "kv_lora_rank") is not None:
        mla = {k: t.get(k) for k in ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                     "v_head_dim")}
    dtype = t.get("torch_dtype") or t.get("dtype") or cfg.get("torch_dtype") or cfg.get("dtype")
    rope_scaling = t.get("rope_scaling") or (t.get("rope_parameters") if isinstance(t.get("rope_parameters"), dict)
                                            and "factor" in t.get("rope_parameters", {}) else None)
    rope_theta = t.get("rope_theta")
    if rope_theta is None and isinstance(t.get("rope_parameters"), dict):
        rope_theta = t["rope_parameters"].get("rope_theta")
    # A stranger's config may put any JSON value anywhere: keep only well-typed values, so that
    # `list(True)` cannot raise TypeError here and rules never meet a string where they expect a number.
    archs = config_architectures(cfg)
    if not (isinstance(rope_theta, (int, float)) and not isinstance(rope_theta, bool)):
        rope_theta = None
    tie = t.get("tie_word_embeddings")
    return TargetModel(
        name=name, origin=origin, architectures=archs,
        model_type=_str(cfg, "model_type"), text_model_type=_str(t, "model_type"),
        num_hidden_layers=t["num_hidden_layers"], hidden_size=t["hidden_size"], vocab_size=t["vocab_size"],
        max_position_embeddings=_int(t, "max_position_embeddings"),
        num_attention_heads=_int(t, "num_attention_heads"), num_key_value_heads=_int(t, "num_key_value_heads"),
        head_dim=_int(t, "head_dim"), torch_dtype=dtype if isinstance(dtype, str) else None,
        rope_theta=rope_theta, rope_scaling=rope_scaling if isinstance(rope_scaling, dict) else None, mla=mla,
        weight_prefix=prefix, multimodal=text is not None and "vision_config" in cfg,
        tie_word_embeddings=tie if isinstance(tie, bool) else None, local_path=local_path,
        # auto_map names code in the target's repository (Kimi-K2.5: configuration_kimi_k25, tokenization_kimi)
        remote_code=isinstance(cfg.get("auto_map"), dict) or _auto_map(tokenizer_config) is not None,
        auto_maps={f: m for f, m in (("config.json", _auto_map(cfg)),
                                     ("tokenizer_config.json", _auto_map(tokenizer_config))) if m is not None},
        # the rope keys as written, so each engine row can read them with its own schema (kconvert/rules/rope.py)
        extra={"rope_config": {k: t[k] for k in ("rope_scaling", "rope_parameters", "rope_theta") if k in t}},
    )


def _auto_map(cfg: Any) -> Any:
    """A config's auto_map (a dict, or the list form transformers reads as a tokenizer's), else None."""
    m = cfg.get("auto_map") if isinstance(cfg, dict) else None
    return m if isinstance(m, (dict, list)) and m else None


def _tokenizer_config(folder: Path) -> Any:
    """The folder's tokenizer_config.json, or None where there is none or it cannot be read (the tokenizer is the
    engine's to load; only its auto_map matters here)."""
    p = folder / "tokenizer_config.json"
    try:
        return read_json_file(p, f"{folder.name}/tokenizer_config.json") if p.is_file() else None
    except KConvertError:
        return None


def load_target(ref: str) -> TargetModel:
    """A profile name (`kimi-k2.5`), a local folder, or a Hub id; only config.json is read."""
    if ref in profile_names():
        return load_profile(ref)
    p = Path(ref).expanduser()
    if os.path.exists(p):  # not Path.exists: a name too long for the file system (ENAMETOOLONG) is no folder
        cfg_path = p / CONFIG_NAME if p.is_dir() else p
        if not os.path.lexists(cfg_path):  # anything else of that name (a FIFO, a folder) meets the read guard
            raise InputError(f"{ref}: no config.json in the target folder")
        cfg = read_json_file(cfg_path, f"{ref}/config.json")
        folder = p if p.is_dir() else p.parent
        return from_config(cfg, name=ref, origin="folder", local_path=str(p.resolve() if p.is_dir() else p.parent),
                           tokenizer_config=_tokenizer_config(folder))
    problem = hub_id_problem(ref)
    if problem is not None:
        raise UsageError(f"--target {ref!r}: not a profile, folder or Hub id ({problem})"
                         f"{did_you_mean(ref, profile_names())}",
                         hint=f"built-in profiles: {', '.join(profile_names())}")
    repo_id, revision = split_hub_id(ref)
    with hub_errors(f"--target {ref}", what=f"{CONFIG_NAME} ",
                    missing_hint="use a built-in profile (" + ", ".join(profile_names()) + ") or a local folder"):
        path = hub_file(repo_id, CONFIG_NAME, revision=revision)
    cfg = read_json_file(Path(path), f"{ref}/config.json")
    from huggingface_hub.errors import EntryNotFoundError  # deferred: huggingface_hub, only on the Hub's paths

    tok = None
    try:  # the tokenizer's auto_map says whether the engine runs the repository's code (engines/remote_code.py);
        # through hub_file, as config.json: offline, the cached copy at once, never huggingface_hub's retries
        tok = _tokenizer_config(Path(hub_file(repo_id, "tokenizer_config.json", revision=revision)).parent)
    # no such file (EntryNotFoundError), the Hub unreachable (OSError), a bad id (ValueError): config.json's
    # auto_map still says remote code
    except (OSError, ValueError, EntryNotFoundError):
        tok = None
    return from_config(cfg, name=ref, origin="hub", local_path=os.fspath(Path(path).parent), tokenizer_config=tok)


# The fields a target profile copies from the public config, which an engine's config class reads (the rest stays
# the class's default).
ENGINE_CONFIG_KEYS = ("num_hidden_layers", "hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads",
                      "head_dim", "max_position_embeddings", "rms_norm_eps", "torch_dtype", "rope_theta",
                      "rope_scaling", "first_k_dense_replace")


def engine_config(target: TargetModel) -> dict[str, Any] | None:
    """The text model's config.json an engine builds for this target where no folder holds one (a profile: the
    fields it copies from the public config; a Hub target: the fields kconvert read), for an engine's own config
    code to read (`--oracle`, tests/vllm_oracle/record.py). A multimodal wrapper (Kimi-K2.5) gives its text model,
    which sets the context the engine serves. None for a local folder: its own config.json is the one."""
    if target.origin == "folder" and target.local_path:
        return None
    raw: dict[str, Any] = {}
    if target.origin == "profile":
        f = resources.files("kconvert.targets") / "profiles" / f"{target.name}.json"
        raw = json.loads(f.read_text()) if f.is_file() else {}
    cfg = {k: raw.get(k, getattr(target, k, None)) for k in ENGINE_CONFIG_KEYS}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    cfg.update(target.mla or {})
    if target.text_model_type and target.text_model_type != target.model_type:
        cfg.update(architectures=["DeepseekV3ForCausalLM"] if target.mla else target.architectures,
                   model_type=target.text_model_type)
    else:
        cfg.update(architectures=target.architectures, model_type=target.model_type)
    return cfg
