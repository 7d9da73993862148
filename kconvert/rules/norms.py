"""Norm tensors and the flags that say where they apply."""
from __future__ import annotations

from typing import Iterator

from kconvert.formats.layouts import NORMS
from kconvert.writer.ops import SetConfig
from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule
from kconvert.rules.tensor_names import no_aux_head


@rule("K601", "error",
      fix_availability=FixAvailability.NEVER,
      summary="A norm tensor (input_layernorm, hidden_norm, post_attention_layernorm or the final norm) is missing.",
      why="vLLM does not report missing weights: a missing RMSNorm keeps its initial weight of 1, so the draft "
          "loads and runs with an unscaled norm (vLLM 0.32 llama_eagle3.py/deepseek_eagle3.py load_weights; docs/formats-and-engines.md#vllm-032-loading-rules). Acceptance drops by however much the "
          "trained norm differed from 1.",
      fix="Not fixable: the trained norm weights cannot be recovered.")
def norms_missing(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if not d.tensors:
        return
    missing = [n for n in NORMS if n not in d.tensors
               and not (n == "layers.0.hidden_norm.weight" and no_aux_head(d))]
    if missing:
        yield norms_missing.finding(f"norm tensor(s) missing, the engine will use weight 1: {', '.join(missing)}",
                                    evidence=[Evidence(n, "absent", "present") for n in missing])


@rule("K602", "error",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="`norm_before_residual` will be read differently from how the draft was trained.",
      why="With norm_before_residual the residual is the normalised fc output instead of the raw one. vLLM "
          "defaults it to true for the speculators format (configs/speculators/algos.py: "
          "config_dict.get('norm_before_residual', True)) while speculators' Eagle3SpeculatorConfig defaults it to "
          "false; SpecForge/EAGLE drafts are trained without it. A wrong reading loads silently.",
      fix="fix writes the flag explicitly with the value the producer's format implies (safe: it states the "
          "format's own default).")
def norm_before_residual(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    cfg = d.checkpoint.config
    if d.is_speculators and "norm_before_residual" not in cfg:
        dflt = ctx.engine.speculators_norm_before_residual_default
        if dflt is True:
            yield norm_before_residual.finding(
                "speculators config without norm_before_residual: vLLM reads true, the speculators format's "
                "default is false", evidence=[Evidence("norm_before_residual", None, False)],
                ops=[SetConfig(("norm_before_residual",), False, "speculators Eagle3SpeculatorConfig default")])
    elif d.format.producer in ("specforge", "eagle") and d.config.get("norm_before_residual") is True:
        # No fix flag sets it (fix has no --set): the files cannot tell how this draft was trained, and score
        # --diagnose measures both readings (kconvert/score/diagnose_offline.py tries norm_before_residual).
        yield norm_before_residual.finding(
            f"norm_before_residual is true but {d.format.producer} trains with the raw fc output as residual; if "
            "this draft was, set it to false in config.json (`kconvert score --diagnose` measures both readings)",
            severity="warning", evidence=[Evidence("norm_before_residual", True, False)])


@rule("K603", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="`norm_before_fc` and the `input_norm` tensor disagree, or the engine version ignores them.",
      why="EAGLE 3.1's norm_before_fc (speculators PR #337, vLLM PR #36545) is one RMSNorm over the concatenated "
          "aux states. vLLM 0.32/0.33 build it for Llama drafts only when the flag is set (eagle_config first, "
          "then top level; the speculators adapter propagates it, algos.py) and drop an `input_norm.weight` "
          "otherwise (llama_eagle3.py load_weights); its MLA draft (deepseek_eagle3.py) has no input_norm and "
          "rejects the tensor. SGLang ignored flag and tensor until PR #32334: nvidia/gpt-oss-120b-Eagle3-v3 then "
          "loaded but acceptance stayed low; after it, accept length 2.720 on MT-Bench.",
      fix="fix sets norm_before_fc when the tensor is present (safe: the trained norm is then applied); a flag "
          "without its tensor is not fixable, nor is an engine version that ignores it (use one that honours it).")
def norm_before_fc(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    ec = d.config.get("eagle_config") if isinstance(d.config.get("eagle_config"), dict) else {}
    flag = bool(ec.get("norm_before_fc", d.config.get("norm_before_fc", False)))
    has = "input_norm.weight" in d.tensors
    if has and not flag:
        # written where the engine reads it first: an eagle_config that holds the key wins over the top level
        path = ("eagle_config", "norm_before_fc") if "norm_before_fc" in ec else ("norm_before_fc",)
        yield norm_before_fc.finding("input_norm.weight is present but norm_before_fc is not set: the engine drops it",
                                     evidence=[Evidence(".".join(path), flag, True)],
                                     ops=[SetConfig(path, True, "input_norm.weight is present")])
    elif flag and not has:
        yield norm_before_fc.finding("norm_before_fc is set but input_norm.weight is missing: it stays 1",
                                     evidence=[Evidence("input_norm.weight", "absent", "present")])
    if has:
        honoured = ctx.engine.norm_before_fc.get(d.layer_family)
        if honoured is False:
            yield norm_before_fc.finding(
                f"{ctx.engine.key} does not apply norm_before_fc/input_norm.weight to a {d.layer_family} draft: the "
                "draft runs without the norm it was trained with (sglang PR #32334: acceptance stayed low)",
                evidence=[Evidence("input_norm.weight", "present", f"an engine version that applies it")],
                fixable=False)
        elif honoured is None:
            yield norm_before_fc.finding(
                f"no source kconvert read shows {ctx.engine.key} applying norm_before_fc to a {d.layer_family} draft; "
                "`kconvert verify` measures it", severity="warning",
                evidence=[Evidence("input_norm.weight", "present", None)], fixable=False)


@rule("K604", "error",
      fix_availability=FixAvailability.SOMETIMES,
      summary="`fc_norm` and the per-aux-state `fc_norm.*` tensors disagree, or the engine's support is unknown.",
      why="EAGLE 3.1's per-state fc_norm (speculators PR #610's follow-up; Inferact/MiniMax-M3-EAGLE3, tokenspeed "
          "PR #751). vLLM 0.32/0.33 build one RMSNorm per aux state when the top-level fc_norm is set (Llama and "
          "MLA drafts; the speculators adapter propagates it); the tensors are otherwise unknown names, and a flag "
          "without tensors leaves the norms at 1. No SGLang source kconvert read applies fc_norm.",
      fix="fix sets fc_norm when the tensors are present (safe); a flag without tensors is not fixable.")
def fc_norm(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    flag = bool(d.config.get("fc_norm", False))
    has = [n for n in d.tensors if n.startswith("fc_norm.")]
    if has and not flag:
        yield fc_norm.finding(f"{len(has)} fc_norm tensors but fc_norm is not set",
                              evidence=[Evidence("fc_norm", flag, True)],
                              ops=[SetConfig(("fc_norm",), True, "fc_norm tensors are present")])
    elif flag and not has:
        yield fc_norm.finding("fc_norm is set but no fc_norm.* tensor exists", evidence=[Evidence("fc_norm.0.weight",
                                                                                                 "absent", "present")])
    if has and ctx.engine.fc_norm is None:
        yield fc_norm.finding(
            f"{len(has)} fc_norm tensors: no source kconvert read shows {ctx.engine.key} applying them; "
            "`kconvert verify` measures it", severity="warning",
            evidence=[Evidence("fc_norm", d.config.get("fc_norm"), None)], fixable=False)


@rule("K605", "warning",
      fix_availability=FixAvailability.NEVER,
      summary="`norm_output` is set; what it means depends on who wrote it and which engine reads it.",
      why="In vLLM and speculators (PR #610, EAGLE 3.1) norm_output feeds the post-norm hidden state to the next "
          "draft step; vLLM 0.32/0.33 read it at top level (llama_eagle3.py, deepseek_eagle3.py) and the "
          "speculators adapter propagates it (vLLM PR #46488, in 0.32's algos.py). SpecForge's flag of the same "
          "name meant neither EAGLE 3 nor 3.1 when false until SpecForge PR #879 (2026-09) aligned it. SGLang "
          "0.5.23 reads it at top level like vLLM (llama_eagle3.py:207: the post-norm state feeds the next step); "
          "older SGLang rows are not pinned.",
      fix="Not decided by the files: check how the producer meant it and set it for the engine yourself.")
def norm_output(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    # false is every engine's default reading (speculators' field default, SGLang's, vLLM's getattr): no finding.
    if d.config.get("norm_output"):
        sure = d.format.producer in ("speculators", "torchspec", "modelopt", "eagle") and ctx.engine.norm_output
        yield norm_output.finding(
            f"norm_output={d.config['norm_output']!r} written by {d.format.producer}; "
            + (f"{ctx.engine.key} reads it as speculators defines it (post-norm state fed forward)" if sure else
               "its meaning differs between SpecForge (before its PR #879) and vLLM/speculators, and "
               f"{ctx.engine.key}'s reading is not pinned"),
            evidence=[Evidence("norm_output", d.config["norm_output"], None)],
            severity="info" if sure else "warning")


@rule("K606", "warning",
      fix_availability=FixAvailability.NEVER,
      summary="ModelOpt's extra layernorm flags are set; vLLM and SGLang ignore them.",
      why="use_input_layernorm_in_first_layer, use_last_layernorm and use_mtp_layernorm change the draft's math in "
          "ModelOpt/TensorRT-LLM; vLLM's and SGLang's EAGLE-3 layers never read them.",
      fix="Not fixable by a config edit: check that the flags' defaults match the engine's fixed layout.")
def modelopt_flags(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    odd = {k: v for k, v in d.extra_flags.items()
           if (k == "use_input_layernorm_in_first_layer" and v is not True) or (k != "use_input_layernorm_in_first_layer" and v)}
    if odd:
        yield modelopt_flags.finding(f"flags the engine ignores: {odd}",
                                     evidence=[Evidence(f"eagle_config.{k}", v, None) for k, v in odd.items()])
