"""Integrity and security: what is in the folder before anything is interpreted."""
from __future__ import annotations

from typing import Iterator

from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule, skipped_without_target
from kconvert.writer.ops import DeleteConfig


@rule("K000", "target-checks-skipped", "config-hygiene", "info",
      fix_availability=FixAvailability.NEVER,
      summary="Checks that compare the draft with its target were skipped because no --target was given.",
      why="Aux-id range, fc width, vocabulary, embeddings, positions and rope can only be judged against the "
          "target's config; without it kconvert says what it did not check rather than pass silently.",
      fix="Nothing to fix: pass --target (a profile such as kimi-k2.5, a folder, or a Hub id).")
def target_skipped(ctx: Context) -> Iterator[Finding]:
    skipped = skipped_without_target(ctx)
    if skipped:
        yield target_skipped.finding(
            f"no --target given: {len(skipped)} checks that compare with the target were skipped "
            f"({', '.join(skipped)})", evidence=[Evidence("--target", None, "a profile, folder or Hub id")])


@rule("K005", "values-unreadable", "integrity", "warning",
      fix_availability=FixAvailability.NEVER,
      summary="Some small tensors (d2t, t2d, norms, embedding rows) could not be read, so the checks of their "
              "values were skipped.",
      why="The header describes them, but their bytes are not available here (a Hub draft read without the "
          "network, a file that changed since its header was read). kconvert says which checks did not run "
          "rather than pass them silently.",
      fix="Nothing to fix in the draft: make the files available (download them, or allow the Hub) and rerun.",
      runs_last=True, any_method=True)
def values_unreadable(ctx: Context) -> Iterator[Finding]:
    if ctx.unreadable:
        names = sorted(ctx.unreadable)
        yield values_unreadable.finding(
            f"the values of {', '.join(names[:5])} could not be read, so the checks on them were skipped: "
            f"{ctx.unreadable[names[0]]}", evidence=[Evidence(n, "unreadable", "readable") for n in names[:10]])


@rule("K001", "pickle-weights", "security", "warning",
      fix_availability=FixAvailability.ALWAYS,
      summary="Pickle files (.bin/.pt/.pth/.ckpt/.pkl/.pickle: weights, optimizer or trainer state) are present.",
      why="Unpickling executes code chosen by whoever wrote the file. kconvert never unpickles them: PyTorch weight "
          "files are described by walking their pickle opcodes without executing any (kconvert.source.torch_zip; "
          "see SECURITY.md), other pickles are only listed. Engines load *.bin/*.pt when no safetensors file is "
          "present (vLLM's fallback), with whatever unpickler they use.",
      fix="fix does not copy them into its output; safe. Keep only the safetensors files.", any_method=True)
def pickle_weights(ctx: Context) -> Iterator[Finding]:
    files = ctx.draft.checkpoint.pickle_files
    if files:
        yield pickle_weights.finding(
            f"{len(files)} pickle file(s) present, never unpickled by kconvert: {', '.join(files[:5])}",
            evidence=[Evidence(f, "pickle", "safetensors") for f in files[:10]], fixable=True)


@rule("K002", "remote-code", "security", "warning",
      fix_availability=FixAvailability.SOMETIMES,
      summary="The config asks for remote code (auto_map / trust_remote_code).",
      why="Remote code runs Python from the repository inside the engine when --trust-remote-code is given. "
          "EAGLE-3 drafts need none: vLLM and SGLang implement them natively.",
      fix="fix removes auto_map from the draft config (safe: both engines map EAGLE-3 drafts natively). The "
          "`auto_map` that speculators writes itself ({\"\": \"eagle3.Eagle3SpeculatorConfig\"}, naming a module "
          "the folder does not hold) is reported as info and left alone: nothing can be imported from it.")
def remote_code(ctx: Context) -> Iterator[Finding]:
    cfg = ctx.draft.checkpoint.config
    keys = [k for k in ("auto_map", "trust_remote_code") if k in cfg]
    py = [f for f in ctx.draft.checkpoint.files if f.endswith(".py")]
    if keys == ["auto_map"] and not py and ctx.draft.is_speculators and _speculators_own_auto_map(cfg["auto_map"]):
        yield remote_code.finding(
            f"auto_map {cfg['auto_map']} is the one speculators writes itself; it names a module this folder does "
            "not hold, so nothing can be imported, and vLLM reads the speculators format natively", severity="info",
            evidence=[Evidence("auto_map", cfg["auto_map"], None)])
        return
    if keys or py:
        yield remote_code.finding(
            "remote code is referenced (never imported by kconvert): "
            + ", ".join([f"config '{k}'" for k in keys] + py[:5]),
            evidence=[Evidence(k, cfg[k], None) for k in keys] + [Evidence(f, "python file", None) for f in py[:5]],
            ops=[DeleteConfig((k,), "EAGLE-3 drafts need no remote code") for k in keys])


def _speculators_own_auto_map(auto_map: object) -> bool:
    """speculators' save_pretrained writes {"": "<algorithm>.<Name>SpeculatorConfig"} (its registry key)."""
    if not isinstance(auto_map, dict) or not auto_map:
        return False
    return all(isinstance(k, str) and isinstance(v, str) and v.count(".") == 1 and v.endswith("SpeculatorConfig")
               for k, v in auto_map.items())


@rule("K003", "no-tensors", "integrity", "error",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="No tensor was found (neither safetensors nor a PyTorch weight file kconvert can read statically); "
              "or the weights are PyTorch pickle files (info).",
      why="Without weights an engine fails. A draft that ships only `pytorch_model.bin` (the EAGLE reference "
          "trainer's deepspeed save_16bit_model, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B) is loaded by vLLM and "
          "SGLang from the .bin; kconvert describes it statically (kconvert.source.torch_zip: the pickle's "
          "opcodes are walked, never executed) and says so.",
      fix="`kconvert fix --from-pickle` converts PyTorch weight files to safetensors through "
          "torch.load(weights_only=True), only when asked; with no weights at all nothing can be fixed.",
      any_method=True)
def no_tensors(ctx: Context) -> Iterator[Finding]:
    ck = ctx.draft.checkpoint
    if ck.torch_files:
        yield no_tensors.finding(
            f"the weights are PyTorch pickle files ({', '.join(ck.torch_files[:3])}), described statically and "
            "never unpickled; engines load them when no safetensors file is present; `kconvert fix --from-pickle` "
            "converts them to safetensors", severity="info",
            evidence=[Evidence(ck.torch_files[0], "PyTorch zip", "safetensors")])
    elif not ck.tensors and not any(
            "not in the cache" in n or "tensor checks are skipped" in n for n in ck.notes):
        yield no_tensors.finding("the checkpoint holds no safetensors tensor",
                                 evidence=[Evidence("*.safetensors", 0, ">= 1 file")])
    for note in ctx.draft.checkpoint.notes:
        yield no_tensors.finding(note, severity="info")


@rule("K004", "producer-unknown", "architecture", "info",
      fix_availability=FixAvailability.NEVER,
      summary="No known producer (SpecForge, TorchSpec, EAGLE, speculators, ModelOpt) was recognised.",
      why="The producer decides conventions the files do not state (which convention aux ids follow). "
          "With an unknown producer kconvert asks instead of guessing.",
      fix="Nothing to fix; decisions the files cannot settle need flags (--aux-convention, --aux-ids).")
def producer_unknown(ctx: Context) -> Iterator[Finding]:
    if ctx.draft.format.producer == "unknown":
        yield producer_unknown.finding("producer not recognised; conventions will not be assumed",
                                       evidence=[Evidence("architectures", ctx.draft.architectures, None)])
