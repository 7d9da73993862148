"""Read inside vLLM's worker processes: which attention backend each model's layers run on.

vLLM mixes this class into its worker class (engine arg `worker_extension_cls`,
vllm/v1/worker/worker_base.py WorkerWrapperBase.init_worker), so the live worker can ask every rank by name
(`LLM.collective_rpc("kconvert_attention_backends")`) without sending code (a callable needs
VLLM_ALLOW_INSECURE_SERIALIZATION). Every attention layer registers itself in the compilation config's
`static_forward_context` with its backend (`Attention` / `MLAAttention.get_attn_backend`); the V1 proposer
names its draft's layers (`_draft_attn_layer_names`, vllm/v1/spec_decode/llm_base_proposer.py). Imports nothing
from vLLM: it only reads the worker's objects.
"""
from __future__ import annotations

WORKER_EXTENSION = "kconvert.runners.worker_probe.AttentionBackendProbe"


class AttentionBackendProbe:
    def kconvert_attention_backends(self) -> dict[str, list[str]]:
        """``{"target": [...], "draft": [...]}``: the backend names the layers were built with. Where the model
        runner does not name the draft's layers (Model Runner V2), every layer is listed under "target"."""
        ctx = self.vllm_config.compilation_config.static_forward_context  # type: ignore[attr-defined]
        drafter = getattr(getattr(self, "model_runner", None), "drafter", None)
        draft_names = set(getattr(drafter, "_draft_attn_layer_names", None) or ())
        found: dict[str, set[str]] = {"target": set(), "draft": set()}
        for name, layer in ctx.items():
            get = getattr(layer, "get_attn_backend", None)
            if get is None:
                continue
            try:
                backend = get().get_name()
            except Exception:  # a layer kind without a backend class
                continue
            found["draft" if name in draft_names else "target"].add(str(backend))
        return {k: sorted(v) for k, v in found.items()}
