"""The speculative method vLLM gives a `speculative_config` that names no `method`, per release, as data.

A production line such as `{"model": "/models/kimi-eagle-draft", "num_speculative_tokens": 3}` is served with the
method vLLM detects from the draft's path *as written* and its config: `eagle-` in the path is EAGLE-1, so an EAGLE-3
draft under that path is served as EAGLE-1 with no error (the SGLang equivalent measured an acceptance length of
exactly 1.0: sglang issue #21272). kconvert replays such a line with the method the engine would pick
(`resolve`), and K109 fails an EAGLE-3 draft the line would serve otherwise, with the corrected line.

Read in each release's own code:

- vLLM 0.32.0 and 0.33.0: `config/speculative.py` `SpeculativeConfig.__post_init__`: a dotted import path with no `/`
  is a custom proposer (`_is_custom_proposer_path`), `ngram` is n-gram, anything else starts as `draft_model` and
  goes down the chain under "Automatically detect the method" (path substrings lower-cased, architectures, the
  draft's model_type after vLLM's own `hf_config_override`, which turns e.g. `deepseek_v3` into `deepseek_mtp`).
  0.33 dropped medusa / mlp_speculator detection and added MuseSparkDSparkModel.
- vLLM 0.34.0: `v1/worker/gpu/spec_decode/speculator_config.py` `_resolve_checkpoint_config_class`: the config
  class the draft's model class declares (`speculator_config_class`: DFlash, DSpark, XPress, LiLiCorr, Gemma4 MTP
  classes; no EAGLE-3 draft class declares one), else `_CHECKPOINT_DETECTION_ORDER` = eagle (`eagle-` in the
  path), eagle3 (`eagle3`), dflash, dspark (path), mtp (model_type); else `draft_model`.

tests/test_method_detection.py checks the 0.32 table against vLLM 0.32's own `__post_init__` (installed) over
generated paths and configs, and the 0.33 and 0.34 tables against those releases' code. Pure: no engine import.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

# SpeculativeConfig's MTPModelTypes (config/speculative.py), per release
_MTP_0_32 = ("deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp",
             "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp",
             "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp",
             "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp",
             "hy_v4_mtp", "gemma4_mtp", "inkling_mtp", "glm5_next_mtp")
_MTP_0_33 = _MTP_0_32 + ("step5_mtp",)
_MTP_0_34 = _MTP_0_33 + ("nemotron3_5_transcribe_mtp",)
# The draft model types vLLM's SpeculativeConfig.hf_config_override rewrites into an MTP model type before the
# detection reads them (config/speculative.py hf_config_override: `deepseek_v3` -> `deepseek_mtp`, ...); the draft
# ModelConfig gets that override whenever the target's hf_overrides is not a callable (compose_draft_hf_overrides).
_REWRITTEN_TO_MTP = ("deepseek_v3", "deepseek_v32", "glm_moe_dsa", "deepseek_v4", "deepseek_v41", "dots3_note",
                     "pangu_ultra_moe", "kimi_k3", "ernie4_5_moe", "qwen3_next", "qwen4_exp", "qwen4_exp_text")


@dataclass(frozen=True)
class Step:
    """One detection rule: `method` when the line's `model` / the draft's config matches `values` by `kind`:
    "dotted" (a dotted import path without `/`), "model_is" (the whole string), "path_contains" (a lower-cased
    substring of the path as written), "architecture", "architecture_and_model_type" (values: arch, model type),
    "model_type" (after hf_config_override), "otherwise"."""

    method: str
    kind: str
    values: tuple[str, ...] = ()
    source: str = ""

    def matches(self, model: str, architectures: tuple[str, ...], model_type: str | None) -> bool:
        if self.kind == "dotted":
            return _dotted_import_path(model)
        if self.kind == "model_is":
            return model in self.values
        if self.kind == "path_contains":
            return any(v in model.lower() for v in self.values)
        if self.kind == "architecture":
            return any(a in architectures for a in self.values)
        if self.kind == "architecture_and_model_type":
            return self.values[0] in architectures and model_type == self.values[1]
        if self.kind == "model_type":
            return model_type in self.values
        return self.kind == "otherwise"

    def describe(self) -> str:
        if self.kind == "path_contains":
            return f"the path contains {' or '.join(repr(v) for v in self.values)}"
        if self.kind == "dotted":
            return "the model is a dotted import path without '/' (a custom proposer class)"
        if self.kind == "model_is":
            return f"the model is {' or '.join(repr(v) for v in self.values)}"
        if self.kind == "architecture":
            return f"the draft's architectures include {' or '.join(self.values)}"
        if self.kind == "architecture_and_model_type":
            return f"the draft's architectures include {self.values[0]} with model_type {self.values[1]}"
        if self.kind == "model_type":
            return "the draft's model_type (after vLLM's hf_config_override) is an MTP model type"
        return "no rule matched"


def _dotted_import_path(model: str) -> bool:
    """config/speculative.py SpeculativeConfig._is_custom_proposer_path (0.32, 0.33)."""
    if model.startswith(("http://", "https://", "file://")) or "/" in model:
        return False
    parts = model.split(".")
    return len(parts) >= 2 and all(p.isidentifier() for p in parts)


_SRC_32 = "vllm 0.32.0 config/speculative.py SpeculativeConfig.__post_init__ ('Automatically detect the method')"
_SRC_33 = _SRC_32.replace("0.32.0", "0.33.0")
_SRC_34 = ("vllm 0.34.0 v1/worker/gpu/spec_decode/speculator_config.py _resolve_checkpoint_config_class "
           "(_CHECKPOINT_DETECTION_ORDER; v1/worker/gpu/spec_decode/eagle/config.py, v1/worker/gpu/spec_decode/dflash/config.py, v1/worker/gpu/spec_decode/dspark/config.py, v1/worker/gpu/spec_decode/mtp/config.py matches)")

DETECTION: dict[str, tuple[Step, ...]] = {
    "0.32": (
        Step("custom_class", "dotted", (), _SRC_32),
        Step("ngram", "model_is", ("ngram", "[ngram]"), _SRC_32),
        Step("eagle", "path_contains", ("eagle-",), _SRC_32),
        Step("eagle3", "path_contains", ("eagle3",), _SRC_32),
        Step("dflash", "path_contains", ("dflash",), _SRC_32),
        Step("dflash", "architecture", ("MuseGlimmerAssistantModel",), _SRC_32),
        Step("dspark", "path_contains", ("dspark",), _SRC_32),
        Step("dspark", "architecture", ("Qwen3DSparkModel", "Qwen3OmniDSparkModel", "Gemma4DSparkModel"), _SRC_32),
        Step("dspark", "architecture_and_model_type", ("DSparkDraftModel", "qwen3"), _SRC_32),
        Step("medusa", "model_type", ("medusa",), _SRC_32),
        Step("mlp_speculator", "model_type", ("mlp_speculator",), _SRC_32),
        Step("mtp", "model_type", _MTP_0_32, _SRC_32),
        Step("draft_model", "otherwise", (), _SRC_32),
    ),
    "0.33": (
        Step("custom_class", "dotted", (), _SRC_33),
        Step("ngram", "model_is", ("ngram", "[ngram]"), _SRC_33),
        Step("eagle", "path_contains", ("eagle-",), _SRC_33),
        Step("eagle3", "path_contains", ("eagle3",), _SRC_33),
        Step("dflash", "path_contains", ("dflash",), _SRC_33),
        Step("dflash", "architecture", ("MuseGlimmerAssistantModel",), _SRC_33),
        Step("dspark", "path_contains", ("dspark",), _SRC_33),
        Step("dspark", "architecture", ("Qwen3DSparkModel", "Qwen3OmniDSparkModel", "MuseSparkDSparkModel",
                                        "Gemma4DSparkModel"), _SRC_33),
        Step("dspark", "architecture_and_model_type", ("DSparkDraftModel", "qwen3"), _SRC_33),
        Step("mtp", "model_type", _MTP_0_33, _SRC_33),
        Step("draft_model", "otherwise", (), _SRC_33),
    ),
    "0.34": (
        Step("ngram", "model_is", ("ngram", "[ngram]"), _SRC_34),
        Step("eagle", "path_contains", ("eagle-",), _SRC_34),
        Step("eagle3", "path_contains", ("eagle3",), _SRC_34),
        Step("dflash", "path_contains", ("dflash",), _SRC_34),
        Step("dspark", "path_contains", ("dspark",), _SRC_34),
        Step("mtp", "model_type", _MTP_0_34, _SRC_34),
        Step("draft_model", "otherwise", (), _SRC_34),
    ),
}
# model types each release's hf_config_override rewrites into an MTP type (the same list in 0.32-0.34)
REWRITTEN_TO_MTP: dict[str, tuple[str, ...]] = {v: _REWRITTEN_TO_MTP for v in DETECTION}


@dataclass(frozen=True)
class Resolution:
    """The method a replayed line gets: the line's own, or the one the engine detects from its `model` as written
    (`rule` says which rule fired and where that is in the engine's code; `by` whether vLLM's own code answered)."""

    method: str
    given: str | None
    model: str | None
    rule: str
    by: str
    line: Mapping[str, Any] | None = None

    @property
    def detected(self) -> bool:
        return self.given is None

    def corrected_line(self, method: str = "eagle3") -> dict[str, Any]:
        return {**dict(self.line or {}), "method": method}

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "given": self.given, "model": self.model, "rule": self.rule, "by": self.by}


def release_key(version: str | None) -> str | None:
    """`0.33` for 0.33.0, 0.33/v1, 0.33.1; None for a release without a table."""
    if not version:
        return None
    parts = str(version).split("/")[0].split(".")
    key = ".".join(parts[:2])
    return key if key in DETECTION else None


def _effective_model_type(model_type: str | None, release: str) -> str | None:
    """The model_type the detection reads: hf_config_override's MTP rewrite ("mtp" stands for whichever MTP
    type it writes: only membership of MTPModelTypes matters to the detection)."""
    return "mtp" if model_type in REWRITTEN_TO_MTP[release] else model_type


def detect(release: str, model: str, draft_config: Mapping[str, Any] | None) -> tuple[str, Step]:
    """The method `release` detects for a speculative_config without `method` whose `model` is `model` (as written)
    and whose draft has `draft_config` (its config.json)."""
    cfg = draft_config or {}
    archs = tuple(a for a in (cfg.get("architectures") or []) if isinstance(a, str))
    mt = cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else None
    if mt is None and cfg.get("speculators_config") is not None:
        mt = "speculators"  # transformers_utils/config.py HFConfigParser: a speculators config's model_type
    effective = _effective_model_type(mt, release)
    for step in DETECTION[release]:
        if step.matches(model, archs, effective):
            return step.method, step
    raise AssertionError("the table ends with an 'otherwise' step")


def resolve(line: Mapping[str, Any], draft_config: Mapping[str, Any] | None, engine_version: str | None, *,
            engine_answer: tuple[str, str] | None = None) -> Resolution:
    """The method a replayed `line` (a speculative_config as written) is served with on `engine_version`: its own
    `method`, else vLLM's own detection when the caller ran it (`engine_answer`: method, where), else the table of
    the release. A release without a table keeps eagle3 and says so."""
    given = line.get("method")
    model = line.get("model")
    if given is not None:
        return Resolution(str(given), str(given), model, "the line states it", "the line", line)
    if model is None:
        return Resolution("eagle3", None, None, "the line names no model: kconvert's draft, served as eagle3",
                          "kconvert", line)
    if engine_answer is not None:
        return Resolution(engine_answer[0], None, str(model), engine_answer[1], "vLLM's own detection", line)
    release = release_key(engine_version)
    if release is None:
        return Resolution("eagle3", None, str(model), f"kconvert has no detection table for vLLM {engine_version}",
                          "kconvert", line)
    method, step = detect(release, str(model), draft_config)
    return Resolution(method, None, str(model), f"{step.describe()} ({step.source})", f"kconvert's table of vLLM "
                      f"{release}", line)


__all__ = ["DETECTION", "REWRITTEN_TO_MTP", "Resolution", "Step", "detect", "release_key", "resolve"]
