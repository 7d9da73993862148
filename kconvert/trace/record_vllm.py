"""`kconvert trace --engine vllm`: record the trace inside vLLM, as the engine that serves the target computes it.

The run is `kconvert verify`'s run without a draft: the same prompts rendered by the engine's tokenizer with its
chat template, the same dtype, TP, engine arguments and environment (kconvert.runners.vllm_args builds both), in
a child process reaped as verify's is (kconvert.runners.vllm_offline). Instead of an EAGLE-3 draft it runs vLLM's
recording method, `speculative_config={"method": "extract_hidden_states", "num_speculative_tokens": 1}` (vLLM PR
#33736): the model runner hands the residual streams entering the recorded layers of every scheduled token to a
cache-only layer, and the hidden-states connector writes each finished request to one safetensors file,
`token_ids` [T] (the prompt and the output but its last token: with `include_output_tokens`) and
`hidden_states` [T, n, H], the speculators dump format `kconvert trace --from-dump` reads (kconvert.trace.from_dump;
its reader is used here). On vLLM's CPU platform the connector's CUDA-only copy is replaced
(kconvert.runners.hidden_states_connector); the rest is vLLM's, at TP 1 to 8 on CPU and on GPUs alike.

Per position the trace then holds what the engine emitted and computed: its greedy tokens (each output continued
`lookahead` tokens past its end, EOS ignored, as `kconvert trace` does), its states at the recorded layers, and
the target's embedding rows (and lm_head) read from the target's safetensors. The engine computes no logits at
prompt positions: their next_token is the target's argmax over the stream after the last layer when it is
recorded, else the prompt's next token (score never reads them: its walks start at the last prompt position).
Stream 0 (entering the first layer) is the target's embedding row of each token, read from its weights: vLLM's
DeepSeek model cannot capture it (deepseek_v2.py adds a residual that is still None there), and in the models
kconvert reads it is the embedding lookup itself, no arithmetic.
"""
from __future__ import annotations

import hashlib
import tempfile
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Callable

from kconvert._version import __version__
from kconvert.errors import EngineError, UsageError
from kconvert.trace.from_dump import (DumpLayout, Labeller, TargetTensors, dump_layout, finish_from_target,
                                     read_dump_file, target_meta)
from kconvert.trace.hf_target import resolve_folder, target_eos_ids
from kconvert.trace.request import TraceRequest, check_request, resolve_layers
from kconvert.trace.format import TraceMeta, TraceWriter, request_inputs

# vLLM's recording parts (vLLM PR #33736); an installed vLLM without them cannot record. A tuple names the places one
# part has lived: vLLM 0.34 removed Model Runner V1 and with it v1/spec_decode/extract_hidden_states.py; its method
# lives in v1/worker/gpu/spec_decode/extract_hidden_states.py (Model Runner V2's; 0.32 and 0.33 have both).
RECORDING_MODULES = (
    ("v1/spec_decode/extract_hidden_states.py", "v1/worker/gpu/spec_decode/extract_hidden_states.py"),
    "distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py")
HF_HINT = "record the trace in HF transformers instead: kconvert trace TARGET --engine hf (the default)"


def check_recording_vllm() -> str:
    """The installed vLLM's version, when it has the recording method; else EngineError (exit 3). Reads the
    package's files only: importing vLLM in this process would cost seconds and start nothing useful."""
    from kconvert.engines.installed import installed_version
    from kconvert.errors import MissingPackageError

    version = installed_version("vllm")
    spec = find_spec("vllm") if version else None
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError("kconvert trace --engine vllm", "vLLM", "live")
    root = Path(list(spec.submodule_search_locations)[0])
    missing = [" or ".join(m) if isinstance(m, tuple) else m for m in RECORDING_MODULES
               if not any((root / p).is_file() for p in (m if isinstance(m, tuple) else (m,)))]
    if missing:
        raise EngineError(f"vLLM {version} cannot record a trace: it has no {missing[0]} (the extract_hidden_states "
                          "method and its hidden-states connector, vLLM PR #33736)", hint=HF_HINT)
    return version


def record_trace_vllm(req: TraceRequest, progress: Callable[[str], None] | None = None) -> Path:
    """Record a trace folder inside vLLM; returns its path."""
    from kconvert.engines.live_messages import LiveRequest
    from kconvert.prompts import load_prompts
    from kconvert.runners.vllm_offline import run_vllm

    from kconvert.runners.vllm_args import check_live_request

    say = progress or (lambda _s: None)
    check_request(req)
    # the engine-argument policy before anything is read (run_vllm checks it again where it builds the arguments)
    check_live_request(LiveRequest(target=req.target, engine_args=dict(req.engine_args), env=dict(req.env),
                                   record_layers=[]))
    if req.continuations is not None:
        raise UsageError("--continuations teacher-forces given tokens, which HF transformers does (--engine hf); "
                         "with --engine vllm the engine generates the tokens itself")
    check_recording_vllm()
    from kconvert.trace.format import check_trace_destination

    check_trace_destination(req.out, force=req.force, inputs=request_inputs(req))  # before minutes of engine
    t0 = time.perf_counter()
    # the engine loads the target as verify gives it; the embedding rows come from the same files, fetched here
    root, revision, commit = resolve_folder(req.target)
    tgt = TargetTensors(str(root))
    L = int(tgt.text["num_hidden_layers"])
    layers = resolve_layers(req, L)
    set_name, prompts = load_prompts(req.prompts)
    prompts = prompts[: req.max_prompts or None]
    # verify's run (its max_tokens sets the engine's max_model_len on CPU), each output continued past its end
    sampling = {"max_tokens": req.max_tokens + req.lookahead + 1, "ignore_eos": True,
                "extra_args": {"kv_transfer_params": {"include_output_tokens": True}}}
    with tempfile.TemporaryDirectory(prefix="kconvert-record-") as dump:
        live = _run(run_vllm, LiveRequest(
            target=req.target, prompts=prompts, tp=req.tp, chat_template=req.chat_template, max_tokens=req.max_tokens,
            engine_args={"dtype": req.dtype, **req.engine_args}, env=dict(req.env), timeout_s=req.timeout_s,
            trust_remote_code=req.trust_remote_code,
            record_layers=[k for k in layers if k > 0], record_dir=dump, sampling_extra=sampling), say)
        files = _dump_paths(live, Path(dump))
        lay = dump_layout(files[0], tgt, [k for k in layers if k > 0])
        meta = _engine_meta(req, tgt, live, lay, layers, prompts, set_name, revision, commit)
        with TraceWriter(req.out, meta, force=req.force, shard_size=req.shard_size,
                     inputs=request_inputs(req)) as writer:
            _add_engine_sequences(writer, live, files, lay, tgt, req, say)
            meta.recorder["seconds"] = round(time.perf_counter() - t0, 3)
            return finish_from_target(writer, tgt, req.lm_head)


def _run(run_vllm: Callable, live_req: Any, say: Callable[[str], None]) -> Any:
    try:
        return run_vllm(live_req, progress=say)
    except EngineError as e:  # the engine could not run or record: its own lines, and the other recorder
        e.hint = f"{e.hint}; {HF_HINT}" if e.hint else HF_HINT
        raise


def _dump_paths(live: Any, dump: Path) -> list[Path]:
    paths = live.hidden_states_paths
    if len(paths) != len(live.output_token_ids) or not all(paths):
        raise EngineError("vLLM ran but its hidden-states connector reported no file for some requests "
                          f"({sum(1 for p in paths if p)} of {len(live.output_token_ids)})", hint=HF_HINT)
    files = [Path(p) for p in paths]
    for f in files:
        if f.parent.resolve() != dump.resolve() or not f.is_file():
            raise EngineError(f"vLLM's hidden-states connector did not write {f} in the run's folder", hint=HF_HINT)
    return files


def _engine_meta(req: TraceRequest, tgt: TargetTensors, live: Any, lay: DumpLayout, layers: list[int],
                 prompts: list[str], set_name: str, revision: str | None, commit: str | None) -> TraceMeta:
    import torch

    args = {k: v for k, v in live.engine_args.items() if k != "kv_transfer_config"}  # its folder was temporary
    return TraceMeta(
        target={**target_meta(req.target, tgt), "revision": revision, "commit": commit},
        dtype={"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[lay.st_dtype], layers=layers,
        hidden_size=lay.hidden_size, vocab_size=lay.vocab_size, num_hidden_layers=int(tgt.text["num_hidden_layers"]),
        prompt_set={"name": set_name, "num_prompts": len(prompts),
                    "sha256": hashlib.sha256("\n".join(prompts).encode()).hexdigest(),
                    "chat_template_applied": bool(live.chat_template_applied)},
        continuation={"source": "greedy", "max_tokens": req.max_tokens, "lookahead": req.lookahead,
                      "eos_token_ids": _eos_ids(tgt), "from": None},
        recorder={"tool": "kconvert trace --engine vllm", "version": __version__,
                  "backend": f"vllm {live.engine_version} (extract_hidden_states)", "torch": torch.__version__,
                  "device": str(live.platform), "tp": int(req.tp), "engine_args": args, "env": _engine_env(live.env),
                  "engine_start_s": live.timings.engine_start_s, "generate_s": live.timings.generate_s},
        notes=list(req.notes) + [
            "recorded inside the engine: tokens it emitted, states it computed (vLLM extract_hidden_states)"
            + ("; stream 0 is the target's embedding rows" if 0 in layers else ""),
            "next_token at prompt positions before the last: "
            + ("the target's argmax over the recorded stream after the last layer"
               if Labeller(tgt, lay.streams, "cpu").on else "the prompt's next token (the engine computes no "
               "logits there; score never reads them)")])


def _engine_env(auto: dict[str, str]) -> dict[str, str]:
    """The engine's environment that can change what it computes: what kconvert set and the caller's VLLM_*."""
    import os

    return {**{k: v for k, v in os.environ.items() if k.startswith("VLLM_")}, **auto}


def _eos_ids(tgt: TargetTensors) -> list[int]:
    tok = None
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(tgt.ckpt.root), trust_remote_code=False)
    except Exception:  # noqa: BLE001 - no tokenizer without code: generation_config.json alone then
        pass
    return target_eos_ids(Path(tgt.ckpt.root), tok)


def _add_engine_sequences(writer: TraceWriter, live: Any, files: list[Path], lay: DumpLayout, tgt: TargetTensors,
                          req: TraceRequest, say: Callable[[str], None]) -> None:
    """One sequence per request: prompt, output (to EOS inclusive or max_tokens) and lookahead, from its dump."""
    import torch

    eos = set(writer.meta.continuation["eos_token_ids"])
    labels = Labeller(tgt, lay.streams, "cpu")
    rows: dict[int, Any] = {}

    def embed(token_ids: list[int]) -> Any:
        for t in set(token_ids) - set(rows):
            rows[t] = tgt.read(tgt.embed, t, 1)[0]
        return torch.stack([rows[t] for t in token_ids])

    for i, f in enumerate(files):
        prompt, out = live.prompt_token_ids[i], live.output_token_ids[i]
        ids, hidden = read_dump_file(f, lay)
        if ids.tolist() != prompt + out[:-1]:
            raise EngineError(f"request {i}: the connector's token_ids are not the prompt and the output the engine "
                              "returned", hint=HF_HINT)
        P = len(prompt)
        out_len = next((j + 1 for j, t in enumerate(out[: req.max_tokens]) if t in eos), min(len(out), req.max_tokens))
        n = min(P + out_len + req.lookahead, ids.shape[0])
        nxt = torch.tensor(prompt[1:] + out)  # the token after each position; at P - 1 on, the engine's own
        if labels.on and P > 1:
            nxt[: P - 1] = labels({k: h[: P - 1] for k, h in hidden.items()})
        states = {k: h[:n] for k, h in hidden.items()}
        if 0 in writer.meta.layers:
            states[0] = embed(ids[:n].tolist())
        writer.add_sequence(ids[:n].tolist(), nxt[:n].tolist(), P, out_len, states)
        if (i + 1) % 16 == 0 or i + 1 == len(files):
            say(f"read {i + 1}/{len(files)} recorded sequences")
