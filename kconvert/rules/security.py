"""Security: what a checkpoint could run if an engine were careless (pickles, remote code)."""
from __future__ import annotations

from typing import Iterator

from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule
from kconvert.writer.ops import DeleteConfig


@rule("K001", "warning",
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


@rule("K002", "warning",
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
