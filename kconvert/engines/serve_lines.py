"""The command lines that serve a target with an EAGLE-3 draft on vLLM, SGLang and tokenspeed, ready to paste.

Every argument is quoted with :func:`shlex.quote`, so paths with spaces and the JSON of vLLM's
``--speculative-config`` survive a POSIX shell. The aux-id note says where each engine reads the draft's
aux layer ids and in which numbering (docs/formats-and-engines.md#aux-layer-ids).
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

VLLM_AUX_NOTE = (
    "vLLM reads the aux layer ids from the draft's top-level `eagle_aux_hidden_state_layer_ids`, else "
    "`eagle_config.eagle_aux_hidden_state_layer_ids` (0.32 V1 runner; the V2 runner reads the top-level key or "
    "`eagle_config.layer_ids`); id k = the residual stream entering layer k (input-of-layer), no shift applied; "
    "default (2, L//2, L-3)."
)
SGLANG_AUX_NOTE = (
    "SGLang reads `eagle_config.eagle_aux_hidden_state_layer_ids` in the output-of-layer numbering: the target's "
    "set_eagle3_layers_to_capture adds +1 to every explicit id on Llama, Qwen, GLM-4-MoE and MiniMax targets; on "
    "DeepSeek/Kimi targets since sglang PR #25454 only when the first id is 1; on GPT-OSS since PR #32334 unless "
    "the largest id is the layer count (sglang 0.5.23's own code: llama.py:941, deepseek_v2.py:3470, gpt_oss.py:1349)."
)

TOKENSPEED_AUX_NOTE = (
    "tokenspeed 0.1.1 reads `eagle_config.eagle_aux_hidden_state_layer_ids` when the draft has an eagle_config (the "
    "top-level key is then ignored), else the top-level key (execution/factory.py _eagle_aux_layer_ids), unless "
    "--eagle3-layers-to-capture is given; +1 on every explicit id, no first-id rule (models/base/causal_lm.py, "
    "models/deepseek_v3.py set_eagle3_layers_to_capture); default: the inputs of (2, L//2, L-3)."
)


# Engine arguments the serve line already spells (the target, TP, the speculative config) or that have no `vllm serve`
# flag of the same meaning (`disable_log_stats` is an LLM() argument; serve logs stats unless --disable-log-stats).
SERVE_LINE_OWN = frozenset({"model", "tensor_parallel_size", "speculative_config", "disable_log_stats"})


def engine_arg_flags(engine_args: Mapping[str, Any] | None) -> list[str]:
    """vLLM engine arguments as `vllm serve` flags (vLLM's EngineArgs.add_cli_args: `--dtype float32`,
    `--enforce-eager`, JSON for dict values), in key order; False booleans are vLLM's defaults and left out."""
    out: list[str] = []
    for key, value in sorted((engine_args or {}).items()):
        if key in SERVE_LINE_OWN or value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                out.append(flag)
        elif isinstance(value, (dict, list)):
            out += [flag, json.dumps(value, sort_keys=True)]
        else:
            out += [flag, str(value)]
    return out


def recorded_speculative(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """The speculative_config keys of a measurement's recorded identity (kconvert.engines.arg_policy
    settings_from_config: `speculative_config.draft_sample_method` ...) that a serve line states, with the values
    the engine ran (its defaults included: the sampling methods change what acceptance means); the draft's path
    stays the line's own."""
    prefix = "speculative_config."
    return {k[len(prefix):]: v for k, v in (settings or {}).items()
            if k.startswith(prefix) and k != prefix + "model" and v is not None}


def vllm_serve_argv(draft_ref: str, target_ref: str, *, k: int, tp: int, draft_tp: int | None = None,
                    extra: Mapping[str, Any] | None = None, engine_args: Mapping[str, Any] | None = None,
                    env: Mapping[str, str] | None = None, method: str = "eagle3",
                    recorded: Mapping[str, Any] | None = None) -> list[str]:
    """`vllm serve` with the draft; the speculative config always states its method (a line without one gets
    the method vLLM detects from the path: kconvert/engines/method_detection.py) and every recorded
    speculative key of `recorded` as the engine ran it."""
    spec: dict[str, object] = {"model": draft_ref, "method": method, "num_speculative_tokens": int(k)}
    if draft_tp is not None:
        spec["draft_tensor_parallel_size"] = int(draft_tp)
    spec.update(extra or {})
    spec.update(recorded_speculative(recorded))
    spec["model"] = draft_ref
    # the recorded environment variables the engine ran with (`$NAME` in the recorded identity) beside kconvert's own
    env = {**{k[1:]: str(v) for k, v in (recorded or {}).items() if k.startswith("$")}, **dict(env or {})}
    prefix = [f"{k}={v}" for k, v in sorted(env.items())]
    return prefix + ["vllm", "serve", target_ref, "--tensor-parallel-size", str(int(tp)), "--speculative-config",
                     json.dumps(spec)] + engine_arg_flags(engine_args)


# Keys of vLLM's `--speculative-config` that kconvert maps to its own settings; every other key is passed to the
# engine as written (vLLM validates them: config/speculative.py SpeculativeConfig).
MAPPED_SPEC_KEYS = ("model", "method", "num_speculative_tokens", "draft_tensor_parallel_size")
EAGLE3_METHODS = ("eagle3",)


@dataclass
class ServeReplay:
    """What a production `vllm serve` line asks of the draft, read from its `--speculative-config` JSON and
    `--tensor-parallel-size`: the same values kconvert's own flags set, plus the keys passed through as written."""

    num_speculative_tokens: int | None = None
    tp: int | None = None
    draft_tp: int | None = None
    production_draft: str | None = None  # the "model" of the serve line (replaced by the draft under test)
    extra: dict[str, Any] = field(default_factory=dict)
    method: str | None = None  # the line's own method; None: vLLM detects one (engines/method_detection.py)
    line: dict[str, Any] = field(default_factory=dict)  # the speculative_config as written


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer, not {value!r}")
    return value


def parse_speculative_config(text: str | Mapping[str, Any] | None, tensor_parallel_size: int | None = None
                             ) -> ServeReplay:
    """Read vLLM's `--speculative-config` JSON (as pasted from a serve line) and `--tensor-parallel-size`.

    Raises ``ValueError`` with a one-line reason for JSON that is not an object, a method other than eagle3,
    or sizes that are not positive integers.
    """
    out = ServeReplay()
    if tensor_parallel_size is not None:
        out.tp = _positive_int(tensor_parallel_size, "--tensor-parallel-size")
    if text is None:
        return out
    if isinstance(text, Mapping):
        spec = dict(text)
    else:
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"--speculative-config is not valid JSON ({e.msg} at character {e.pos}); quote it "
                             f"as in a shell: --speculative-config '{{\"method\": \"eagle3\", ...}}'") from None
    if not isinstance(spec, dict):
        raise ValueError(f"--speculative-config must be a JSON object, not {type(spec).__name__}")
    spec = {str(k).replace("-", "_"): v for k, v in spec.items()}  # as vLLM reads it (create_speculative_config)
    out.line = dict(spec)
    method = spec.get("method")
    if method is not None and method not in EAGLE3_METHODS:
        raise ValueError(f"--speculative-config method {method!r}: kconvert verifies EAGLE-3 drafts (method eagle3)")
    out.method = method
    if "num_speculative_tokens" in spec:
        out.num_speculative_tokens = _positive_int(spec["num_speculative_tokens"], "num_speculative_tokens")
    if spec.get("draft_tensor_parallel_size") is not None:
        out.draft_tp = _positive_int(spec["draft_tensor_parallel_size"], "draft_tensor_parallel_size")
    if spec.get("model") is not None:
        out.production_draft = str(spec["model"])
    out.extra = {k: v for k, v in spec.items() if k not in MAPPED_SPEC_KEYS}
    return out


def _eagle3_chain_flags(draft_ref: str, *, k: int) -> list[str]:
    """SGLang's speculative flags, which tokenspeed's engine takes as SGLang spells them (tokenspeed 0.1.1
    utils/server_args.py add_cli_args): EAGLE3 with the draft, a chain of k tokens (topk 1) verified as k + 1
    tokens (the chain plus the root), the setting whose accept_length compares to vLLM's mean acceptance length at
    num_speculative_tokens = k."""
    return [
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", draft_ref,
        "--speculative-num-steps", str(int(k)),
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(int(k) + 1),
    ]


def sglang_launch_argv(draft_ref: str, target_ref: str, *, k: int, tp: int) -> list[str]:
    return ["python", "-m", "sglang.launch_server", "--model-path", target_ref, "--tp", str(int(tp)),
            *_eagle3_chain_flags(draft_ref, k=k)]


# Where `python -m sglang.launch_server` listens unless told otherwise (ServerArgs: host 127.0.0.1, port 30000).
SGLANG_DEFAULT_URL = "http://127.0.0.1:30000"
DEFAULT_K = 3  # the lightseekorg/kimi-k2.5-eagle3 card's setting: 3 steps, topk 1, 4 draft tokens


def launch_target(target_ref: str) -> str:
    """What SGLang's --model-path needs for a kconvert target: a profile name becomes its Hub id."""
    # deferred: kconvert.targets loads the checkpoint readers (~9 ms), and `verify --help` loads this module
    from kconvert.targets import profile_hub_id, profile_names

    if target_ref in profile_names():
        return profile_hub_id(target_ref) or target_ref
    return target_ref


def sglang_next_lines(draft_ref: str, target_ref: str, *, k: int = DEFAULT_K, tp: int = 1,
                      url: str = SGLANG_DEFAULT_URL) -> list[str]:
    """SGLang's next step as two command lines: the launch line as the lightseekorg model card writes it, then
    `kconvert verify --server` against that server with the same k."""
    return [shlex.join(sglang_launch_argv(draft_ref, launch_target(target_ref), k=k, tp=tp)),
            shlex.join(["kconvert", "verify", "--server", url, "--engine", "sglang", "-k", str(int(k))])]


def tokenspeed_launch_argv(draft_ref: str, target_ref: str, *, k: int, tp: int) -> list[str]:
    # tokenspeed 0.1.1's own front end: `tokenspeed serve TARGET` (cli/__main__.py; cli/_argsplit.py split_argv
    # rewrites the leading positional to --model and routes --tp to the engine), the engine flags of
    # utils/server_args.py add_cli_args. A chain of k draft tokens (topk 1) verifies k + 1 tokens: ServerArgs'
    # __post_init__ refuses any other --speculative-num-draft-tokens for EAGLE3 at topk 1. --enable-metrics turns on
    # the tokenspeed:spec_decode_* counters (metrics/collector.py EngineMetrics, enabled only with it).
    return ["tokenspeed", "serve", target_ref, "--tp", str(int(tp)), *_eagle3_chain_flags(draft_ref, k=k),
            "--enable-metrics"]


# Where `tokenspeed serve` listens unless told otherwise (cli/serve_smg.py DEFAULT_GATEWAY_PORT 8000).
TOKENSPEED_DEFAULT_URL = "http://127.0.0.1:8000"


def tokenspeed_next_lines(draft_ref: str, target_ref: str, *, k: int = DEFAULT_K, tp: int = 1,
                          url: str = TOKENSPEED_DEFAULT_URL) -> list[str]:
    """tokenspeed's next step as two command lines: its serve line, then `kconvert verify --server` against it
    with the same k (the server's tokenspeed:spec_decode_* counters)."""
    return [shlex.join(tokenspeed_launch_argv(draft_ref, launch_target(target_ref), k=k, tp=tp)),
            shlex.join(["kconvert", "verify", "--server", url, "--engine", "tokenspeed", "-k", str(int(k))])]


# The engines kconvert does not start: their next step is the serve line and `kconvert verify --server` against it.
# One entry per engine; verify's refusal, inspect's `next:` lines and the serve lines of verify --dry-run read it.
SERVER_NEXT_LINES = {"sglang": sglang_next_lines, "tokenspeed": tokenspeed_next_lines}
SERVER_LABEL = {"sglang": "SGLang", "tokenspeed": "tokenspeed"}  # as ENGINE_LABELS names them (tests hold it)


def serve_lines(
    draft_ref: str,
    target_ref: str,
    *,
    k: int,
    tp: int,
    draft_tp: int | None = None,
    engine_aux_note: bool = True,
    extra: Mapping[str, Any] | None = None,
    engine_args: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    method: str = "eagle3",
    recorded: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """``{"vllm": ..., "sglang": ..., "tokenspeed": ...}`` command lines, plus an ``<engine>_aux_ids`` note each when
    ``engine_aux_note`` is true.

    ``draft_ref``/``target_ref`` are hub ids (``org/name``) or local paths, passed as given. ``draft_tp``
    sets vLLM's ``draft_tensor_parallel_size`` (omitted: vLLM uses the target's); SGLang has no separate
    draft TP. ``engine_args`` / ``env``: what verify passes to the engine besides those (``--engine-arg``, the
    platform's settings, and an engine row's ``serve_env``: ``VLLM_USE_V2_MODEL_RUNNER=0`` for a Model Runner V1
    row, config/vllm.py use_v2_model_runner), so the line serves what verify ran. Raises ``ValueError`` for k or tp below 1.
    """
    if int(k) < 1 or int(tp) < 1 or (draft_tp is not None and int(draft_tp) < 1):
        raise ValueError("k, tp and draft_tp must be at least 1")
    out = {
        "vllm": shlex.join(vllm_serve_argv(draft_ref, target_ref, k=k, tp=tp, draft_tp=draft_tp, extra=extra,
                                           engine_args=engine_args, env=env, method=method, recorded=recorded)),
        "sglang": shlex.join(sglang_launch_argv(draft_ref, target_ref, k=k, tp=tp)),
        "tokenspeed": shlex.join(tokenspeed_launch_argv(draft_ref, target_ref, k=k, tp=tp)),
    }
    if engine_aux_note:
        out["vllm_aux_ids"] = VLLM_AUX_NOTE
        out["sglang_aux_ids"] = SGLANG_AUX_NOTE
        out["tokenspeed_aux_ids"] = TOKENSPEED_AUX_NOTE
    return out
