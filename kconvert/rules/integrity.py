"""Integrity: a checkpoint whose tensors are missing or whose values cannot be read."""
from __future__ import annotations

from typing import Iterator

from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule


@rule("K005", "warning",
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


@rule("K003", "error",
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
            "tensor checks are skipped" in n for n in ck.notes):
        yield no_tensors.finding("the checkpoint holds no safetensors tensor",
                                 evidence=[Evidence("*.safetensors", 0, ">= 1 file")])
    for note in ctx.draft.checkpoint.notes:
        yield no_tensors.finding(note, severity="info")
