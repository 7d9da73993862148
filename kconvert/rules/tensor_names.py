"""Tensor names: the key layout, the tensors a draft must have and those it must not."""
from __future__ import annotations

from typing import Iterator

from kconvert.formats.layouts import (
    NORMS,
    TOP_REQUIRED,
    layer_index,
    renames,
    required_layer_tensors,
)
from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule
from kconvert.writer.ops import DropTensor, RenameTensor


def draft_layers(d) -> tuple[int, list[str]]:
    """The decoder layers the draft really has (0..count-1) and the raw names of tensors past them.

    A layer after the first counts when the config declares it or when all its projections are there (a complete
    layer the config forgot: K103 corrects the count); anything else under `layers.N.` is a stray (K203).
    """
    q_lora = "layers.0.self_attn.q_a_proj.weight" in d.tensors or isinstance(d.config.get("q_lora_rank"), int)
    declared = d.num_hidden_layers if isinstance(d.num_hidden_layers, int) and d.num_hidden_layers >= 1 else 1
    count = 1 if d.decoder_layers[:1] == [0] else 0
    for i in d.decoder_layers[1:]:
        if i != count:
            break
        projections = [n for n in required_layer_tensors(d.layer_family, q_lora, layer=i) if n.endswith("_proj.weight")]
        if i < declared or all(n in d.tensors for n in projections):
            count += 1
        else:
            break
    strays = sorted(d.raw_names[c] for c in d.tensors if (li := layer_index(c)) is not None and li >= count)
    return count, strays


def no_aux_head(d) -> bool:
    """eagle_config.use_aux_hidden_state false and no fc: an EAGLE-3 head that reads only the last hidden state."""
    ec = d.config.get("eagle_config") if isinstance(d.config.get("eagle_config"), dict) else {}
    return ec.get("use_aux_hidden_state") is False and "fc.weight" not in d.tensors


@rule("K201", "error",
      fix_availability=FixAvailability.ALWAYS,
      summary="Tensor names are written in a layout the engine version does not load as intended.",
      why="vLLM maps `midlayer.` to `layers.0.` and prefixes `model.` to every name but lm_head "
          "(llama_eagle3.py load_weights), so `model.`-prefixed names become `model.model.*` and do not match. "
          "SGLang's Llama draft held `midlayer` and silently skipped other names until PR #24663, which renamed "
          "it `layers.0` and kept loading `midlayer.*`; its DeepSeek/MLA draft renames `layers.0.` to "
          "`midlayer.` itself (deepseek_eagle3.py load_weights), so `layers.0.*` MLA drafts load there "
          "(lightseekorg/kimi-k2.5-eagle3-mla is served in SGLang's CI). SGLang 0.5.23's Llama draft also loads "
          "`model.`-prefixed names (llama_eagle3.py:372) while its MLA draft skips every one of them "
          "(kimi_k25_eagle3.py:449), as recorded from its own code run on CPU.",
      fix="fix renames every tensor into the engine's layout (headers only, bytes untouched; always safe).")
def key_layout(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    want = ctx.engine.layout
    # SGLang 0.5.23's Llama draft loads model.-prefixed names too (EngineRules.model_prefix_ok, recorded), but not
    # model.lm_head.weight (recorded as dropped)
    prefix_ok = (d.key_layout.prefix == "model." and not d.key_layout.lm_head_prefixed
                 and d.layer_family in ctx.engine.model_prefix_ok)
    bad_prefix = bool(d.key_layout.prefix) and not prefix_ok
    accepted = ctx.engine.layer_names.get(d.layer_family, (want.layer,))
    bad_layer = not d.key_layout.layer.startswith(accepted)
    if not (bad_prefix or bad_layer):
        return
    ops = [RenameTensor(old, new, f"{ctx.engine.engine} layout") for old, new in renames(d.raw_names, want)]
    if not ops:
        # No name to rename: a draft without decoder-layer tensors has only the reader's default layer name, and
        # nothing in it loads differently (K202 names the missing layer). Reporting it would promise a fix with
        # no op (FixAvailability.ALWAYS), which Rule.finding refuses as a kconvert bug.
        return
    # The evidence names a tensor the fix renames, the first in sorted order: one with the prefix or under the
    # layer name the engine does not load; `model.lm_head.weight` only when nothing else is renamed (a prefixed
    # lm_head is a layout of its own, and lm_head is often the one tensor written without the prefix).
    olds = sorted(op.old for op in ops)
    example = next((n for n in olds if n != "model.lm_head.weight"), olds[0])
    yield key_layout.finding(
        f"tensor names use the {d.key_layout.name}.* layout; {ctx.engine.engine} loads {want.name}.*",
        evidence=[Evidence(example, d.key_layout.name, want.name)], ops=ops)


@rule("K202", "error",
      fix_availability=FixAvailability.NEVER,
      summary="Tensors the draft layer needs are missing.",
      why="vLLM does not detect missing weights: a missing Linear stays uninitialised memory and a missing norm "
          "stays 1 (vLLM 0.32 llama_eagle3.py/deepseek_eagle3.py load_weights; docs/formats-and-engines.md#vllm-032-loading-rules), so the draft loads and proposes garbage without a word.",
      fix="Not fixable: a missing weight cannot be invented. Re-export the draft from its training checkpoint.")
def missing_tensors(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    if not d.checkpoint.tensors:
        return
    q_lora = "layers.0.self_attn.q_a_proj.weight" in d.tensors or isinstance(d.config.get("q_lora_rank"), int)
    need = list(required_layer_tensors(d.layer_family, q_lora))
    for i in range(1, draft_layers(d)[0]):
        need += required_layer_tensors(d.layer_family, q_lora, layer=i)
    # A head without aux states has no fc (ModelOpt hf_spec_export.py: "fc and hidden_norm are only present
    # when use_aux_hidden_state=True"; vLLM PR #27688 drops fc. for it).
    need += [n for n in TOP_REQUIRED if not (n == "fc.weight" and no_aux_head(d))]
    missing = [n for n in need if n not in d.tensors and n not in NORMS]
    if missing:
        yield missing_tensors.finding(
            f"{len(missing)} required tensor(s) missing: {', '.join(missing[:6])}",
            evidence=[Evidence(n, "absent", "present") for n in missing])


@rule("K203", "error",
      fix_availability=FixAvailability.ALWAYS,
      summary="Tensors that are not part of an EAGLE-3 draft are present.",
      why="vLLM raises on names it cannot place (AutoWeightsLoader) and silently ignores `*.bias`; extra "
          "decoder layers (`layers.1.*`) mean the checkpoint is not a one-layer EAGLE-3 draft.",
      fix="fix drops biases and stray tensors the engine would reject (safe for biases, which vLLM ignores "
          "anyway; other tensors are listed so that you can check they are not needed).")
def unexpected_tensors(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    strays = draft_layers(d)[1]  # none without a decoder layer
    if not d.unmapped and not strays:
        return
    biases = [n for n in d.unmapped if n.endswith(".bias")]
    others = [n for n in d.unmapped if not n.endswith(".bias")] + strays
    if biases:
        yield unexpected_tensors.finding(
            f"{len(biases)} bias tensor(s) that the engine ignores: {', '.join(biases[:4])}", severity="warning",
            evidence=[Evidence(n, "present", "absent") for n in biases[:10]],
            ops=[DropTensor(n, "vLLM ignores *.bias silently") for n in biases])
    if others:
        yield unexpected_tensors.finding(
            f"{len(others)} tensor(s) the engine cannot place: {', '.join(others[:4])}",
            evidence=[Evidence(n, "present", "absent") for n in others[:10]],
            ops=[DropTensor(n, "not part of an EAGLE-3 draft") for n in others])
