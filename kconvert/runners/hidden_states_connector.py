"""vLLM's hidden-states connector, able to write on vLLM's CPU platform too (imported inside the engine only).

`kconvert trace --engine vllm` records through vLLM's own `speculative_config={"method": "extract_hidden_states"}`
(vLLM PR #33736): the target's model runner hands the aux hidden states of every scheduled token to a cache-only
attention layer, and `ExampleHiddenStatesConnector` (vllm/distributed/kv_transfer/kv_connector/v1/
example_hidden_states_connector.py) writes each finished request's slots to `<storage>/<req_id>.safetensors`:
`token_ids` [T] and `hidden_states` [T, n, H]. In vLLM 0.32 its write path is CUDA-only: `_submit_async_write`
copies device to host through a CUDA stream into `pin_memory=True` host memory, and on vLLM's CPU build the first
finished request stops the engine with "pin_memory=True requires a CUDA or other accelerator backend".

This subclass changes only that step, and only where the KV cache is not on a CUDA device: the same slots are read
by vLLM's own `extract_from_kv_cache` and written synchronously, in the same format, under the same lock protocol.
On a GPU it is vLLM's connector unchanged (the parent method runs). Everything else (which tokens, which slots,
the scheduler side, TP rank 0 only) is vLLM's.
"""
from __future__ import annotations

import os
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    extract_from_kv_cache,
)


class _Done:
    """Stands for the CUDA event `get_finished` polls: on the CPU path the write is complete when recorded."""

    @staticmethod
    def query() -> bool:
        return True


class CPUCapableHiddenStatesConnector(ExampleHiddenStatesConnector):
    def _submit_async_write(self, pending: Any) -> None:
        if not self._is_tp_rank_zero:
            return
        assert self._kv_cache is not None
        if self._kv_cache.device.type == "cuda":
            super()._submit_async_write(pending)
            return
        import torch
        from safetensors.torch import save_file

        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(self._block_size, dtype=torch.long)
        slots = (offsets[None, :] + blocks[:, None] * self._block_size).flatten()
        hidden = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).clone()
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        try:
            tmp = pending.filename + ".tmp"
            save_file({"hidden_states": hidden, "token_ids": pending.token_ids.clone()}, tmp)
            os.replace(tmp, pending.filename)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)  # releases LOCK_EX, as vLLM's writer thread does
        self._req_copy_events[pending.req_id] = _Done()
