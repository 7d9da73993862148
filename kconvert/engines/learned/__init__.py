"""What each engine release's own code answered: one file per release (`vllm-0.34.0.json`), written by
`kconvert engines learn` (kconvert/runners/engine_oracle.py runs the release's functions over the probe set of
kconvert/engines/probes.py; kconvert/engines/derive.py reads the answers as row facts), committed and reviewed as a
diff. The engine rows (kconvert/engines/expectations.py) take every fact these files hold from them, and say so
(`EngineRules.provenance`); what the code cannot answer stays read by hand, with its source.

A release learned on a user's machine lands in kconvert's cache (`$KCONVERT_ENGINES_CACHE`, else
`$XDG_CACHE_HOME/kconvert/engines`, else `~/.cache/kconvert/engines`) under `learned/`; its row is built the same way,
its hand-read facts carried from the newest committed row of that engine (and said to be carried).
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

HERE = Path(__file__).resolve().parent
ENV_CACHE = "KCONVERT_ENGINES_CACHE"
# The engines whose releases `kconvert engines learn` and `--oracle` can ask (kconvert/runners/engine_oracle.py)
LEARNABLE = ("vllm",)

# How each learned fact becomes an EngineRules field. PER_RUNNER facts hold one value per model runner.
PER_RUNNER = frozenset({"aux_read_paths", "no_aux_heads", "limits_served_to_draft"})
_CONVERT: dict[str, Any] = {
    "aux_rule": dict,
    "aux_read_paths": lambda v: tuple(tuple(p) for p in v),
    "no_aux_heads": str,
    "reads_num_aux_from": str,
    "layer_names": lambda v: {f: tuple(p) for f, p in v.items()},
    "multi_layer": frozenset,
    "norm_before_fc": dict,
    "fc_norm": bool,
    "norm_output": bool,
    "model_prefix_ok": frozenset,
    "ignored_tensors": tuple,
    "architectures": dict,
    "mla_model_type_refused": tuple,
    "reads_speculators_format": bool,
    "speculators_norm_before_residual_default": lambda v: v,
    "raises_max_positions": bool,
    "raises_max_positions_rope": lambda v: frozenset(v) if v is not None else None,
    "limits_served_to_draft": bool,
    "refuses": dict,
    "runners": tuple,
    "v1_refused": lambda v: v,
}
# learned fact name -> EngineRules field (the same name unless listed)
FIELD = {"runners": "release_runners"}


@dataclass(frozen=True)
class Source:
    """Where one fact of a row came from: a release's code (the functions that answered, and the learned file that
    holds their answers) or a hand reading (its source)."""

    learned: bool
    where: str  # "vllm/<file>.py:<line> <function>; ..." or the hand reading's source
    file: str | None = None  # the learned file
    release: str | None = None  # "vllm 0.34.0"

    def __str__(self) -> str:
        if self.learned:
            return f"learned from {self.release}'s code: {self.where} ({self.file})"
        return f"read by hand: {self.where}"


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """kconvert's engine cache (the XDG base-directory habit, as pip and huggingface_hub keep theirs; no library
    for one path)."""
    env = os.environ if environ is None else environ
    if env.get(ENV_CACHE):
        return Path(env[ENV_CACHE]).expanduser()
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "kconvert" / "engines"


def file_name(engine: str, release: str) -> str:
    return f"{engine}-{release}.json"


def committed(engine: str | None = None) -> list[tuple[str, str]]:
    """(engine, release) of every learned file kconvert ships, oldest release first."""
    out = []
    for p in HERE.glob("*.json"):
        eng, _, rel = p.stem.partition("-")
        if engine in (None, eng):
            out.append((eng, rel))
    return sorted(out, key=lambda er: (er[0], tuple(int(x) if x.isdigit() else x for x in er[1].split("."))))


def cached(engine: str | None = None, environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(engine, release) of the learned files in the user's cache (`kconvert engines learn`)."""
    folder = cache_root(environ) / "learned"
    out = []
    for p in folder.glob("*.json") if folder.is_dir() else ():
        eng, _, rel = p.stem.partition("-")
        if engine in (None, eng):
            out.append((eng, rel))
    return sorted(out)


@functools.lru_cache(maxsize=None)
def load(engine: str, release: str) -> dict[str, Any] | None:
    """A committed learned file, else the user's cached one, else None."""
    for p in (HERE / file_name(engine, release), cache_root() / "learned" / file_name(engine, release)):
        if p.is_file():
            doc = json.loads(p.read_text())
            doc["_path"] = f"kconvert/engines/learned/{p.name}" if p.parent == HERE else str(p)
            return doc
    return None


def fields(doc: Mapping[str, Any], runner: str | None) -> tuple[dict[str, Any], dict[str, Source]]:
    """The EngineRules fields a learned file holds for `runner`'s row, and where each came from."""
    out: dict[str, Any] = {}
    prov: dict[str, Source] = {}
    where = doc.get("_path", file_name(doc["engine"], doc["release"]))
    for name, fact in doc["facts"].items():
        if name not in _CONVERT:
            continue
        value = fact["value"]
        if name in PER_RUNNER:
            if runner not in value:
                continue
            value = value[runner]
        out[FIELD.get(name, name)] = _CONVERT[name](value)
        prov[FIELD.get(name, name)] = Source(True, "; ".join(fact["from"]), where,
                                             f"{doc['engine']} {doc['release']}")
    return out, prov


def _compact(answer: Mapping[str, Any]) -> dict[str, Any]:
    """A probe's answers as the learned file keeps them: the parameter list left out (the names each checkpoint
    tensor reached are kept as the names that loaded)."""
    out = dict(answer)
    m = out.get("model")
    if isinstance(m, dict):
        m = {k: v for k, v in m.items() if k != "params"}
        if isinstance(m.get("loaded"), dict):
            m["loaded"] = sorted(m["loaded"])
        out["model"] = m
    return out


def document(raw: Mapping[str, Any], *, engine: str, release: str, learned_from: str) -> dict[str, Any]:
    """The learned file of one release: its facts (kconvert/engines/derive.py), the functions that answered, what
    the code cannot tell, and each probe's answers."""
    from kconvert.engines.derive import NOT_LEARNED, derive_vllm
    from kconvert.engines.probes import vllm_probes

    probes = vllm_probes()
    doc = {"about": "what this release's own code answered for kconvert's probe set (kconvert engines learn; "
                    "kconvert/engines/learned/__init__.py)",
           "engine": engine, "release": release, "learned_from": learned_from,
           "versions": raw["versions"], "functions": raw["functions"], "patched": raw.get("patched", []),
           "facts": derive_vllm(raw), "not_learned": list(NOT_LEARNED),
           "release_answers": raw["release"],
           "answers": {k: _compact(v) for k, v in sorted(raw["drafts"].items()) if k in probes}}
    return doc


def document_sglang(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The learned file of an SGLang release, from what tests/sglang_oracle/record.py recorded of its own code (its
    loaders' load_weights and each target family's set_eagle3_layers_to_capture, run on CPU in a venv of their own:
    SGLang's imports need more than the learner's child offers, so `kconvert engines learn` does not fetch SGLang)."""
    from kconvert.engines.derive import derive_sglang

    functions = {f"capture {fam}": c["source"] for fam, c in sorted(rec["capture"].items())}
    functions.update({d["draft_class"]: d["loader"] for d in rec["drafts"].values() if d.get("loader")})
    return {"about": "what this release's own code answered (tests/sglang_oracle/record.py; "
                     "kconvert/engines/learned/__init__.py document_sglang)",
            "engine": "sglang", "release": rec["versions"]["sglang"],
            "learned_from": "tests/sglang_oracle/record.py: SGLang's own code installed --no-deps in a venv of its "
                            "own, run on CPU (tests/data/sglang_oracle.json)",
            "versions": rec["versions"], "functions": dict(sorted(functions.items())),
            "facts": derive_sglang(rec),
            "not_learned": ["whether the stream after the last layer is captured (the hook runs in a forward pass)",
                            "the embedding replacement the worker makes after load",
                            "acceptance: only a live run measures it"],
            "answers": {"capture": rec["capture"], "config_probes": rec["config_probes"],
                        "name_probes": rec["name_probes"]}}


def comparable(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What two learnings of one release must agree on (no path, no timing)."""
    return {k: v for k, v in doc.items() if k not in ("_path", "learned_from", "times")}
