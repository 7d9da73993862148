"""The residual streams of an HF transformers target, captured by forward hooks on its decoder layers: the stream
entering each recorded layer k, and (k = L) the one after the last layer, from the same forwards that produce each
greedy token.
"""
from __future__ import annotations

from typing import Any

from kconvert.errors import UsageError


def decoder_layers(model: Any) -> list[Any]:
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise UsageError(f"{type(model).__name__}: no model.layers to hook (decoder-only causal LMs only)")
    return list(layers)


class Capture:
    """Forward hooks that keep the residual stream entering each recorded layer (and after the last one)."""

    def __init__(self, layers_mod: list[Any], wanted: list[int]):
        self.wanted = wanted
        self.out: dict[int, Any] = {}
        self.handles = []
        L = len(layers_mod)
        for k in wanted:
            if k < L:
                self.handles.append(layers_mod[k].register_forward_pre_hook(self._pre(k), with_kwargs=True))
            else:
                self.handles.append(layers_mod[L - 1].register_forward_hook(self._post(k)))

    def _pre(self, k: int):
        def hook(mod, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            self.out[k] = h.detach()
        return hook

    def _post(self, k: int):
        def hook(mod, args, output):
            h = output[0] if isinstance(output, tuple) else output
            self.out[k] = h.detach()
        return hook

    def close(self) -> None:
        for h in self.handles:
            h.remove()
