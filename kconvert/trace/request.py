"""What `kconvert trace` is asked to record, shared by every recorder (HF transformers, vLLM): the request, its
checks, and the layers it records (all, the ones given, or the engines' aux ids ±1).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kconvert.errors import UsageError
from kconvert.trace.format import HIDDEN_DTYPES


@dataclass
class TraceRequest:
    target: str
    out: str
    prompts: str = "all"
    max_prompts: int | None = None
    max_tokens: int = 64
    layers: list[int] | str | None = None  # None: defaults (aux ids ±1); "all": every stream 0..L
    aux_ids: list[int] | None = None  # centres of the default layers (besides the engine defaults)
    dtype: str = "bfloat16"
    device: str | None = None
    lookahead: int = 8
    batch_size: int = 16
    lm_head: bool = False
    chat_template: bool | None = None
    continuations: list[dict[str, Any]] | None = None  # [{"prompt_token_ids": [...], "output_token_ids": [...]}]
    continuations_from: str | None = None
    force: bool = False
    threads: int | None = None  # torch intra-op threads (1 is fastest on a few shared cores)
    shard_size: int | None = None  # bytes per trace.safetensors shard (None: one file)
    notes: list[str] = field(default_factory=list)
    # `--engine vllm` (kconvert.trace.record_vllm): the engine's tensor parallel size, further engine arguments
    # and environment, as `kconvert verify` takes them, and the hard limit of the run
    tp: int = 1
    engine_args: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 1200.0
    engine: str = "hf"  # the source that records it (kconvert.trace.sources): hf or vllm
    # `--engine vllm`: the target's remote code runs only with this flag (never through engine_args: the
    # engine-argument policy, kconvert/engines/arg_policy.py, refuses trust_remote_code there)
    trust_remote_code: bool = False


def default_layers(num_layers: int, aux_ids: list[int] | None) -> list[int]:
    """The aux ids ±1 (so shifted readings can be tried), around the engines' defaults and any ids given."""
    from kconvert.engines.expectations import EngineRules

    centres = set(EngineRules.default_physical_ids(num_layers)) | set(aux_ids or [])
    return sorted({i + s for i in centres for s in (-1, 0, 1) if 0 <= i + s <= num_layers})


def resolve_layers(req: TraceRequest, L: int) -> list[int]:
    """The streams to record: all 0..L, the ones given, or the defaults (aux ids ±1)."""
    if req.layers == "all":
        layers = list(range(L + 1))
    elif req.layers:
        layers = sorted(set(req.layers))
    else:
        layers = default_layers(L, req.aux_ids)
    bad = [k for k in layers if not 0 <= k <= L]
    if bad:
        raise UsageError(f"--layers {bad}: a {L}-layer target has streams 0..{L} (k = input of layer k)")
    return layers


def check_request(req: TraceRequest) -> None:
    if req.dtype not in HIDDEN_DTYPES:
        raise UsageError(f"--dtype {req.dtype!r}: choose bfloat16, float16 or float32")
    if req.lookahead < 0 or req.max_tokens < 1 or req.batch_size < 1:
        raise UsageError("--max-tokens and --batch-size must be positive, --lookahead not negative")
