"""Architecture: the draft class an engine maps the checkpoint to, its producer, and other speculative methods."""
from __future__ import annotations

import json
from typing import Iterator

from kconvert.engines.expectations import VLLM_SPECULATORS_LAYERS
from kconvert.formats.speculators import ARCHITECTURES as SPECULATORS_ARCHITECTURES
from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, options_and_sources, rule
from kconvert.targets.families import family_of
from kconvert.writer.ops import DeleteConfig, SetConfig


# the transformer_layer_config.model_type that makes vLLM's speculators config build each layer family
_SPECULATORS_TYPE = {v: k for k, v in VLLM_SPECULATORS_LAYERS.items()}
# the model_type of a flat draft config for each layer family (MLA: `_mla_model_type`, as K102 writes it)
_MODEL_TYPE = {"llama": "llama", "qwen3": "qwen3"}


def _flat_model_type(ctx: Context) -> str:
    """The model_type a flat draft config of this layer family declares (MLA: `_mla_model_type`)."""
    return _MODEL_TYPE.get(ctx.draft.layer_family) or _mla_model_type(ctx)


def _mla_model_type(ctx: Context) -> str:
    """`kimi_k2` next to a Kimi target, else `deepseek_v2`: model types vLLM builds as an EAGLE-3 MLA draft (not
    `deepseek_v3`, which it turns into an MTP model: K102)."""
    tt = (ctx.target.text_model_type or ctx.target.model_type or "") if ctx.target else ""
    return "kimi_k2" if "kimi" in tt else "deepseek_v2"


def _mapped_family(ctx: Context) -> str | None:
    archs = ctx.draft.architectures
    if ctx.draft.is_speculators and ctx.engine.engine == "vllm":
        inner = ctx.draft.checkpoint.config.get("transformer_layer_config")
        if not isinstance(inner, dict):
            return None  # vLLM refuses it (speculators/base.py); K101 says so before asking for a family
        return VLLM_SPECULATORS_LAYERS.get(inner.get("model_type", "llama"))
    for a in archs:
        if a in SPECULATORS_ARCHITECTURES and not ctx.draft.is_speculators:
            # vLLM registers Eagle3Speculator for the speculators format, which rewrites it to the layer's class;
            # named by a flat config it stays, and SpeculativeConfig refuses it ("Model architectures
            # ['Eagle3Speculator'] are not supported for now", 0.34 config/speculative.py)
            continue
        if ctx.engine.engine == "vllm":
            # vLLM prefixes `Eagle3` to names that neither start nor end with it (configs/eagle.py).
            name = a if (a.startswith("Eagle3") or a.endswith("Eagle3")) else f"Eagle3{a}"
            if name in ctx.engine.architectures:
                return ctx.engine.architectures[name]
            if a in ctx.engine.architectures and not (a.startswith("Eagle3") or a.endswith("Eagle3")):
                return ctx.engine.architectures[a]
        elif a in ctx.engine.architectures:
            return ctx.engine.architectures[a]
    return None


@rule("K101", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="The engine does not map the draft's `architectures` to an EAGLE-3 draft of the right family.",
      why="vLLM prefixes `Eagle3` to names that neither start nor end with it and looks the result up in its "
          "registry (LlamaForCausalLMEagle3, Eagle3LlamaForCausalLM, LlamaForCausalLM → Llama draft; "
          "DeepseekV2/V3ForCausalLM → MLA draft); `DeepSeekForCausalLMEagle3` is not mapped and fails to load. "
          "An MLA draft under a Llama architecture loads the wrong layer class. A Qwen3-layer draft (q_norm, "
          "k_norm) is built by Eagle3Qwen3ForCausalLM (qwen3_eagle3.py), which the speculators format selects "
          "with transformer_layer_config.model_type qwen3 (configs/speculators/algos.py). Source: vLLM 0.32 "
          "transformers_utils/configs/eagle.py and model_executor/models/registry.py. SGLang's EAGLE-3 drafts are "
          "llama_eagle3.py (EntryClass LlamaForCausalLMEagle3, which skips names it does not hold, so q_norm and "
          "k_norm would be dropped without a word) and deepseek_eagle3.py; no SGLang source read builds a Qwen3 "
          "layer.",
      fix="fix writes the engine's preferred architecture for the layer family seen in the tensors (safe); a "
          "Qwen3-layer draft on SGLang is not fixable (dropping q_norm/k_norm would make another draft).")
def architecture_unmapped(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    fam = _mapped_family(ctx)
    want = ctx.engine.preferred_arch.get(d.layer_family)
    if want is None:
        yield architecture_unmapped.finding(
            f"{ctx.engine.key} builds no {d.layer_family}-layer EAGLE-3 draft (its Llama draft would skip "
            f"q_norm/k_norm silently); serve this draft with vLLM",
            evidence=[Evidence("architectures", d.architectures, "an architecture this engine maps")], fixable=False)
        return
    layer_cfg = d.checkpoint.config.get("transformer_layer_config") if isinstance(d.checkpoint.config, dict) else None
    if d.is_speculators and ctx.engine.engine == "vllm" and not isinstance(layer_cfg, dict):
        # vLLM 0.32 transformers_utils/configs/speculators/base.py: "Must provide transformer_layer_config", and
        # TypeError "'transformer_layer_config' must be a dictionary if provided"
        yield architecture_unmapped.finding(
            "the speculators config has no transformer_layer_config object; vLLM refuses it ('Must provide "
            "transformer_layer_config', which must be a dictionary)",
            evidence=[Evidence("transformer_layer_config", layer_cfg, "an object with the decoder layer's config")],
            fixable=False)
        return
    cfg = d.checkpoint.config if isinstance(d.checkpoint.config, dict) else {}
    if ctx.engine.engine == "vllm" and d.is_speculators and "model_type" in cfg:
        # vLLM reads a config as the speculators format only when it has no model_type (0.32-0.34
        # transformers_utils/config.py HFConfigParser.parse: `model_type = "speculators" if speculators_config`
        # only under `if model_type is None`): with one, it is read as that model's config and its
        # Eagle3Speculator architecture is refused ("Model architectures ['Eagle3Speculator'] are not supported").
        yield architecture_unmapped.finding(
            f"the speculators config also has a top-level model_type {json.dumps(cfg['model_type'])}, so vLLM reads "
            "it as that model's config, not as the speculators format, and refuses architectures Eagle3Speculator",
            evidence=[Evidence("model_type", cfg["model_type"], "absent (the speculators format names none)")],
            ops=[DeleteConfig(("model_type",), "vLLM reads the speculators format only without a model_type")])
        return
    if ctx.engine.engine == "vllm" and not d.is_speculators and not isinstance(cfg.get("model_type"), str):
        # vLLM's config parser takes the model type from model_type, else from a speculators_config, else from a
        # short table of architectures naming no EAGLE-3 class (_ARCHITECTURE_TO_MODEL_TYPE): none here, so
        # get_config raises "Unrecognized model ... Should have a `model_type` key in its config.json" (0.32-0.34).
        want_type = _flat_model_type(ctx)
        yield architecture_unmapped.finding(
            "config.json has no model_type (as a string); vLLM refuses the draft ('Unrecognized model ... Should "
            "have a `model_type` key')",
            evidence=[Evidence("model_type", cfg.get("model_type"), want_type)],
            ops=[SetConfig(("model_type",), want_type, f"the tensors are those of a {d.layer_family} layer")])
        return
    raw = d.checkpoint.config.get("architectures") if isinstance(d.checkpoint.config, dict) else None
    if raw is not None and not (isinstance(raw, list) and all(isinstance(a, str) for a in raw)):
        # HF's PretrainedConfig.architectures is a list of class names. A bare string names one for the registry
        # (kconvert reads it so, kconvert.source.config_fields) but vLLM's EAGLE-3 config iterates it character by
        # character (transformers_utils/configs/eagle.py: `for arch in self.model.architectures`): no class at all
        yield architecture_unmapped.finding(
            f"architectures is {json.dumps(raw)}, "
            f"{'a list holding no class name' if isinstance(raw, list) else 'not a list'}; write [\"{want}\"]",
            evidence=[Evidence("architectures", raw, [want])],
            ops=[SetConfig(("architectures",), [want], "engine maps this architecture")])
    elif fam is None and d.is_speculators and ctx.engine.engine == "vllm" and d.layer_family in _SPECULATORS_TYPE:
        # vLLM's speculators config takes the class from transformer_layer_config.model_type alone and raises
        # "Unsupported model_type" for any other value (0.32 transformers_utils/configs/speculators/algos.py
        # update_eagle3: eagle3_arch_map), so the repair is that key; writing `architectures` changed nothing and
        # fix failed its own self-check. (A layer family the speculators format cannot name, MLA, goes on below: the
        # plan converts it to the flat layout, plan.conversion.)
        declared = layer_cfg.get("model_type", "llama")
        want_type = _SPECULATORS_TYPE[d.layer_family]
        yield architecture_unmapped.finding(
            f"transformer_layer_config.model_type {json.dumps(declared)} is not one vLLM's speculators config maps "
            f"({', '.join(sorted(VLLM_SPECULATORS_LAYERS))}); vLLM refuses the draft ('Unsupported model_type')",
            evidence=[Evidence("transformer_layer_config.model_type", declared, want_type)],
            ops=[SetConfig(("transformer_layer_config", "model_type"), want_type,
                           f"tensors are those of a {d.layer_family} layer")])
    elif fam is None:
        yield architecture_unmapped.finding(
            f"{ctx.engine.engine} does not map architectures {d.architectures} to an EAGLE-3 draft",
            evidence=[Evidence("architectures", d.architectures, [want])],
            # Speculators drafts only reach here on SGLang, where the plan also converts them to the flat layout
            # (plan.conversion); without an op the plan would call this unfixable and refuse the conversion.
            ops=[SetConfig(("architectures",), [want], "engine maps this architecture")])
    elif fam != d.layer_family and d.is_speculators and ctx.engine.engine == "vllm":
        # The speculators format picks the class from transformer_layer_config.model_type (algos.py).
        declared = (d.checkpoint.config.get("transformer_layer_config") or {}).get("model_type", "llama")
        want_type = next((k for k, v in VLLM_SPECULATORS_LAYERS.items() if v == d.layer_family), None)
        yield architecture_unmapped.finding(
            f"transformer_layer_config.model_type {declared!r} makes vLLM build a {fam} layer but the tensors are "
            f"those of a {d.layer_family} layer",
            evidence=[Evidence("transformer_layer_config.model_type", declared, want_type)],
            ops=[SetConfig(("transformer_layer_config", "model_type"), want_type,
                           f"tensors are those of a {d.layer_family} layer")] if want_type else [],
            fixable=None if want_type else False)
    elif fam != d.layer_family:
        yield architecture_unmapped.finding(
            f"architectures {d.architectures} load a {fam} draft but the tensors are those of a {d.layer_family} layer",
            evidence=[Evidence("architectures", d.architectures, [want])],
            ops=[SetConfig(("architectures",), [want], f"tensors are those of a {d.layer_family} layer")])


@rule("K102", "error",
      fix_availability=FixAvailability.ALWAYS,
      summary="A draft declares `model_type` deepseek_v3, which vLLM turns into an MTP model.",
      why="vLLM rewrites a draft config with model_type deepseek_v3 to `Eagle3DeepSeekMTPModel` and refuses it "
          "(vLLM 0.32 config/speculative.py hf_config_override: deepseek_v3 -> deepseek_mtp; seen on the CPU build, "
          "docs/vllm-cpu.md), whatever the draft's layer (a Llama draft declaring it is refused the same way: vLLM "
          "0.34.0's own code, kconvert inspect --oracle). `kimi_k2` or `deepseek_v2` load as EAGLE-3 MLA drafts.",
      fix="fix sets model_type to kimi_k2 for Kimi targets, else deepseek_v2, for an MLA draft; llama or qwen3 for "
          "those layers (safe: the layer is the same).")
def mla_model_type(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if d.model_type in ctx.engine.mla_model_type_refused and not d.is_speculators:
        # any layer family: vLLM's hf_config_override rewrites the model type before it looks at the tensors (a
        # Llama draft declaring deepseek_v3 is refused as Eagle3DeepSeekMTPModel too, vLLM 0.34 as run)
        want = _flat_model_type(ctx)
        yield mla_model_type.finding(
            f"model_type {d.model_type!r} makes vLLM build an MTP model and refuse this EAGLE-3 draft",
            evidence=[Evidence("model_type", d.model_type, want)],
            ops=[SetConfig(("model_type",), want, "vLLM turns deepseek_v3 drafts into MTP models")])


# What each method is, in the words of the code that serves it (vLLM 0.32 and SGLang 0.5.23 as read; see
# kconvert.formats.methods and the engine rows' `methods`).
# Each method as a finding names it; what each is, K105's why says (the evidence says what in the files names it).
METHOD_NAMES = {
    "dflash": "a DFlash block-diffusion drafter",
    "dspark": "a DSpark drafter",
    "peagle": "a P-EAGLE draft",
    "mtp": "a multi-token-prediction (MTP) layer of a DeepSeek-style model",
}


def _mtp_declared(cfg: dict, key: str) -> list[str]:
    inner = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    vals = [cfg.get(key), inner.get(key)]
    out: list[str] = []
    for v in vals:
        out.extend([x for x in v if isinstance(x, str)] if isinstance(v, list) else [v] if isinstance(v, str) else [])
    return out


@rule("K105", "warning",
      fix_availability=FixAvailability.NEVER, any_method=True,
      summary="The checkpoint is for another speculative method (DFlash, DSpark, P-EAGLE, an MTP layer), not an "
              "EAGLE-3 draft: it says which, and what serves it.",
      why="Users take these for EAGLE-3 drafts and get a cascade of \"broken EAGLE-3\" findings. A DFlash "
          "block-diffusion drafter drafts a block of tokens in parallel from mask tokens, conditioned on target "
          "layers `dflash_config.target_layer_ids`; a DSpark drafter adds a Markov logit-bias head to DFlash's "
          "block drafting (target layers `target_layer_ids` = aux ids - 1); a P-EAGLE draft is an EAGLE-3 layer "
          "trained for parallel drafting with a mask token; an MTP layer of a DeepSeek-style model is enorm, "
          "hnorm, eh_proj and shared_head around one decoder layer. vLLM 0.32 "
          "(installed) serves DFlash with method \"dflash\" (config/speculative.py; registry.py DFlashDraftModel "
          "-> qwen3_dflash.py; speculators/algos.py update_dflash: dflash_config.target_layer_ids = aux ids - 1, "
          "mask_token_id; DFlash's first vLLM PRs #32206 and #34014, both closed, before it landed), DSpark with "
          "method \"dspark\" (algos.py update_dspark: target_layer_ids = aux ids - 1; vLLM PRs #46995 and "
          "#47093, speculators-format DSpark checkpoints), P-EAGLE as method \"eagle3\" with parallel_drafting "
          "(speculators/base.py build_vllm_speculative_config for speculators_model_type peagle; vLLM PR #41826 "
          "registers PEagleDraftModel and PeagleLlamaForCausalLM as Eagle3LlamaForCausalLM), which Model Runner V2 does not support (config/vllm.py: \"parallel drafting "
          "for EAGLE speculative decoding\"), and MTP layers with method \"mtp\" for the model types "
          "hf_config_override maps (deepseek_v3 -> DeepSeekMTPModel; none for kimi_k2 / kimi_k25). SGLang 0.5.23 "
          "serves DFLASH, DSPARK and NEXTN (srt/speculative/spec_info.py, spec_registry.py; model_config.py:1032 "
          "loads a DeepseekV3ForCausalLM draft as DeepseekV3ForCausalLMNextN) and no P-EAGLE. The EAGLE-3 rules "
          "are not run on these checkpoints (a P-EAGLE draft on vLLM is loaded by the EAGLE-3 classes, so they "
          "are). vLLM 0.34 refuses P-EAGLE (speculators/algos.py update_peagle: \"P-EAGLE (parallel drafting "
          "EAGLE-3) is not supported.\"; SpeculativeConfig._verify_args allows parallel drafting for dflash and dspark "
          "only; the PEagle architectures left its registry): an error quoting the release's own message, learned "
          "from its code (kconvert/engines/learned/vllm-0.34.0.json).",
      fix="Nothing to fix: it is another method's checkpoint, and turning it into an EAGLE-3 draft would make "
          "another draft. Serve it with the method named (warning), or on an engine release that has it (error: "
          "this release serves none). kconvert verify, score, fix and push refuse it (exit 1, `refused` in the "
          "report, --skip-static too): their EAGLE-3 engine line, arithmetic or conversion would be another "
          "draft's.")
def other_method(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if d.method == "eagle3":
        return
    what = METHOD_NAMES.get(d.method, d.method)
    # where: the key or tensor that names the method; observed: what it says; expected: the method it names (the
    # message names the method only: one fact in one place, issue #48)
    ev = [Evidence(e.split(" ", 1)[0], e.split(" ", 1)[1] if " " in e else e, f"method {d.method}")
          for e in d.method_evidence] or [Evidence("config", d.method, f"method {d.method}")]
    row = ctx.engine.key
    served = ctx.engine.methods
    refused = ctx.engine.refuses.get(d.method)
    if refused:
        # the release's own refusal, learned from its code (vLLM 0.34 speculators/algos.py update_peagle)
        src = ctx.engine.provenance.get("refuses")
        where = src.where.split("; ")[0] if src is not None else ""
        yield other_method.finding(
            f"this is {what}, not an EAGLE-3 draft ({'; '.join(d.method_evidence)}); {row} refuses it: "
            f"\"{refused}\"" + (f" ({where})" if where else ""), severity="error", evidence=ev)
        return
    if served is None:
        yield other_method.finding(
            f"this is {what}, not an EAGLE-3 draft; kconvert has not read "
            f"whether {row} serves it, and its EAGLE-3 checks do not apply", evidence=ev)
        return
    how = served.get(d.method)
    if how and d.method == "mtp" and ctx.engine.mtp_requires:
        key, accepted = ctx.engine.mtp_requires
        declared = _mtp_declared(d.checkpoint.config, key)
        if not any(v in accepted for v in declared):
            yield other_method.finding(
                f"this is {what}, not an EAGLE-3 draft; {row} serves MTP layers "
                f"only for {key} {', '.join(accepted)}, and this checkpoint declares {declared or 'none'}",
                severity="error", evidence=ev + [Evidence(key, declared, list(accepted))])
            return
    if how is None:
        yield other_method.finding(
            f"this is {what}, not an EAGLE-3 draft; {row} serves no "
            f"{d.method} checkpoint", severity="error", evidence=ev)
        return
    # The row's options for the method stay in the message (a refusal of verify, score, fix or push prints the
    # message alone, and the route is what it owes the user); the engine code they were read from is evidence.
    options, source = options_and_sources(how)
    ev += [Evidence(f"{row} serves it with", options, source)] if source else []
    if d.method == "peagle":
        yield other_method.finding(
            f"this is {what}; {row} loads it with its EAGLE-3 classes and serves it with {options}; the EAGLE-3 "
            "checks below apply", severity="info", evidence=ev)
    else:
        yield other_method.finding(
            f"this is {what}, not an EAGLE-3 draft; {row} serves it with {options}; kconvert's EAGLE-3 checks do "
            "not apply", evidence=ev)


@rule("K107", "error",
      fix_availability=FixAvailability.NEVER, any_method=True,
      summary="With --oracle: the engine's own code, asked about this draft and this target, answers otherwise than "
              "the engine row kconvert judged by (the ids fed, fc width, an error while building or loading, the "
              "context served, the tensors skipped).",
      why="A row states what a release's code does with drafts (kconvert/engines/learned/ holds what each release "
          "answered over kconvert's probe set); --oracle asks that code about this very draft next to this very "
          "target (kconvert/runners/engine_oracle.py: the installed engine, or a learned release's Python files, "
          "its config, loader and runner functions on the meta device, no GPU). Where the two disagree the row is "
          "wrong or stale for this draft, and the engine's answer is what will happen: an error quoting both and the "
          "function that answered (kconvert/rules/engine_oracle.py compares them, the same comparisons the rows are "
          "held to over every shipped draft).",
      fix="Nothing for fix to do: the engine's answer is the fact. Relearn the release (`kconvert engines learn "
          "vllm==X.Y.Z`) or report the row; the other findings are the row's and may be wrong for this draft.")
def engine_oracle_disagrees(ctx: Context) -> Iterator[Finding]:
    if not ctx.oracle:
        return
    from kconvert.rules.engine_oracle import disagreements

    who = f"{ctx.oracle.get('engine', 'vllm')} {ctx.oracle.get('release')}"
    for d in disagreements(ctx):
        yield engine_oracle_disagrees.finding(
            f"{who}'s own code disagrees with the {ctx.engine.key} row on {d.what}: the row says {d.kconvert}; the "
            f"engine's code says {d.engine} ({d.where})",
            evidence=[Evidence(d.what, d.engine, d.kconvert)])


@rule("K004", "info",
      fix_availability=FixAvailability.NEVER,
      summary="No known producer (SpecForge, TorchSpec, EAGLE, speculators, ModelOpt) was recognised.",
      why="The producer decides conventions the files do not state (which convention aux ids follow). "
          "With an unknown producer kconvert asks instead of guessing.",
      fix="Nothing to fix; decisions the files cannot settle need flags (--aux-convention, --aux-ids).")
def producer_unknown(ctx: Context) -> Iterator[Finding]:
    if ctx.draft.format.producer == "unknown":
        yield producer_unknown.finding("producer not recognised; conventions will not be assumed",
                                       evidence=[Evidence("architectures", ctx.draft.architectures, None)])


@rule("K108", "error",
      fix_availability=FixAvailability.NEVER, needs_target=True,
      summary="The target is a family an EAGLE-3 draft cannot serve as written (hyper-connections, NoPE MLA with "
              "KDA, DSpark-only checkpoints): it says what each engine does and what serves the target.",
      why="The draft's checks all pass and the pair still fails or collapses, because the target, not the draft, "
          "is outside what EAGLE-3 serving assumes. GLM-5.3-Flash (glm5_next, hc_mult 4): SGLang feeds the draft "
          "mHC-flattened states, fc width mismatch, acceptance about 1.0 (sglang issue #36829); vLLM 0.32 contracts "
          "them to hidden_size (vllm/models/glm5next/common/model.py). Kimi-K3 (NoPE MLA with KDA): SGLang 0.5.23's "
          "model implements no EAGLE-3 capture and startup raises "
          "(srt/model_executor/model_runner_components/attention_backend_setup.py:55); vLLM 0.32's EAGLE-3 draft "
          "classes rotate what the target never rotates (mla_use_nope unread; NVIDIA-NeMo/Automodel PR #3286). "
          "DeepSeek-V4.1 (DSpark stages under mtp.*): SGLang raises likewise, vLLM raises for method mtp and serves "
          "the stages with method dspark (config/speculative.py). The table is kconvert/targets/families.py.",
      fix="Nothing in the draft can change the target: serve the target with what the finding names (its MTP layer "
          "or DSpark stages), or a draft trained for its states.")
def target_not_served(ctx: Context) -> Iterator[Finding]:
    fam = family_of(ctx.target)
    if fam is None:
        return
    verdict = fam.engines.get(ctx.engine.engine)
    what = verdict.what if verdict else f"no source of {ctx.engine.engine}'s code was read for this target"
    yield target_not_served.finding(
        f"the target is {fam.name}: {fam.why}. On {ctx.engine.key}: {what}. What serves it: {fam.served_by}",
        severity=verdict.severity if verdict else "warning",
        evidence=[Evidence("target model_type", ctx.target.text_model_type or ctx.target.model_type,
                           "a target whose hidden states an EAGLE-3 draft can read as trained")])


@rule("K109", "error",
      fix_availability=FixAvailability.NEVER,
      summary="A replayed production serve line names no `method`, and the engine would serve this EAGLE-3 draft "
              "with another one (EAGLE-1 for a path with `eagle-` in it).",
      why="vLLM infers a missing speculative_config `method` from the draft's path as written: `eagle-` in it is "
          "method eagle (EAGLE-1), `eagle3` is eagle3, `dflash` / `dspark` name those methods, an MTP model type "
          "is mtp, anything else a plain draft_model (vLLM 0.32/0.33 config/speculative.py SpeculativeConfig."
          "__post_init__, 'Automatically detect the method'; 0.34 v1/worker/gpu/spec_decode/speculator_config.py "
          "_CHECKPOINT_DETECTION_ORDER). An EAGLE-3 draft served as EAGLE-1 loads and runs without an error or a "
          "warning, and its acceptance collapses: SGLang measured the lightseekorg Kimi-K2.5 EAGLE-3 draft under "
          "--speculative-algorithm EAGLE at an acceptance length of exactly 1.0 (sglang issue #21272). kconvert "
          "replays such a line with the method the engine picks (vLLM's own detection where the engine is "
          "installed, else kconvert/engines/method_detection.py), so a pass would certify what production does "
          "not run.",
      fix="Nothing in the checkpoint changes: state the method in the serve line (`\"method\": \"eagle3\"`); the "
          "finding prints the corrected --speculative-config. `--skip-static` measures the line as the engine "
          "would serve it.")
def served_as_other_method(ctx: Context) -> Iterator[Finding]:
    served = ctx.decisions.served
    if served is None or not served.detected or served.method == "eagle3" or ctx.engine.engine != "vllm":
        return
    label = {"eagle": "EAGLE-1", "draft_model": "a plain draft model"}.get(served.method, served.method)
    fixed = json.dumps(served.corrected_line())
    yield served_as_other_method.finding(
        f"the replayed --speculative-config names no method, and {served.by} gives it {served.method!r} "
        f"({label}): {served.rule}; this EAGLE-3 draft would be served as {label} from "
        f"{served.model!r}. Serve it with --speculative-config '{fixed}'",
        evidence=[Evidence("speculative_config.method", None, "eagle3"),
                  Evidence("speculative_config.model", served.model, None)])
