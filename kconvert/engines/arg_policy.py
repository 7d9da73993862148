"""The engine-argument policy, as data: every key that can reach an engine, classified (issue #46).

A live figure is only worth its name if the engine measured the draft under test, beside the target under test,
with a sampler that decides acceptance from the two models. Every key that can reach vLLM through kconvert is one of

- ``allowed``: changes how fast or where the engine runs, not what it accepts;
- ``refused``: makes the figure something else: forced or lossy acceptance, another draft or target (or another
  commit of one), code loaded outside ``--trust-remote-code``, a replaced worker, scheduler or logits, a setting
  kconvert owns under its own flag; ``refused_values`` refuses some values of an otherwise allowed key;
- ``recorded``: allowed, and part of the measurement's identity (the sampling methods, quantization, dtype, KV
  cache dtype, backends, max length, ...): the report's live block, its Markdown and the printed serve line show it
  as the engine got it (``engine_path``: where vLLM's own ``VllmConfig`` holds the value the engine resolved, as
  ``/server_info`` dumps it; ``default``: vLLM's default where it changes what acceptance means, shown when the
  user set nothing).

The tables cover vLLM 0.32, 0.33 and 0.34: `EngineArgs` (vllm/engine/arg_utils.py), `LLM.__init__`'s own keyword
arguments (vllm/entrypoints/llm.py), `SpeculativeConfig` (config/speculative.py), the environment variables kconvert
sets or passes, and the forced-acceptance knobs of the other engines. tests/test_arg_policy.py enumerates the
dataclass fields of each release's own files: a key a new release adds fails that test until it is classified
here. Pure: no engine import, no file read.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from kconvert.errors import UsageError, did_you_mean

ALLOWED, REFUSED, RECORDED = "allowed", "refused", "recorded"
KINDS = (ALLOWED, REFUSED, RECORDED)
_UNSET = object()


@dataclass(frozen=True)
class Rule:
    kind: str
    why: str
    # value -> why that value is refused (the key itself is allowed or recorded)
    refused_values: Mapping[Any, str] = field(default_factory=dict)
    # recorded: the engine's resolved value in VllmConfig as /server_info's config_format=json dumps it
    # (vllm/entrypoints/serve/dev/server_info/api_router.py); None: shown as given
    engine_path: str | None = None
    # recorded: vLLM's default, shown when the user set nothing (it changes what acceptance means)
    default: Any = _UNSET
    # the values kconvert has classified as fine; any other value (one a new release adds) is refused until it is
    # classified here (None: any value)
    values: tuple[Any, ...] | None = None

    def refusal(self, value: Any) -> str | None:
        """Why this value must not reach the engine, or None."""
        if self.kind == REFUSED:
            return self.why
        for bad, why in self.refused_values.items():
            if _same(value, bad):
                return why
        if self.values is not None and not any(_same(value, ok) for ok in self.values):
            return (f"{json.dumps(value)} is not a value kconvert has classified (known: "
                    f"{', '.join(map(str, self.values))}; refused: {', '.join(map(str, self.refused_values)) or 'none'})")
        return None


def _same(value: Any, bad: Any) -> bool:
    if isinstance(bad, bool) or isinstance(value, bool):
        return value is bad or (isinstance(value, str) and value.strip().lower() == str(bad).lower())
    if isinstance(value, str) and isinstance(bad, str):
        return value.strip().lower() == bad.lower()
    return value == bad


def _group(kind: str, why: str, keys: Iterable[str]) -> dict[str, Rule]:
    return {k: Rule(kind, why) for k in keys}


# ---------------------------------------------------------------------------------------------- reasons
_REPLACES_TARGET = ("replaces the target under test: the report, the serve line and push name --target's files, "
                    "the engine would load {what}; pass the target you mean as --target")
_OWNED = "kconvert sets it from {flag}; give {flag} instead, so the report states the value the engine ran"
_IMPORTS = ("imports a class by name into the engine: {what}, so the counters would no longer be vLLM's own "
            "measurement of the draft")
_PERF = "changes where or how fast the engine runs, not which draft tokens it accepts"
_OBS = "logging, metrics, tracing or profiling: observes the run, changes no token"
_MM = "multimodal inputs only: kconvert's prompts are text"
_LORA = "LoRA adapters apply only to requests that name one, and kconvert's requests name none"
_DIST = "parallelism and placement: the same model split or placed differently"
_MEM = "memory, cache and scheduling limits: the same tokens, batched or cached differently"
_LOAD = "how the same weight files are fetched and read"
_NUMERICS = "changes the numerics of the target or draft (kernels, precision): acceptance depends on it"
_NOT_SPEC = "applies to another speculative method (n-gram, suffix, MTP, DSpark, XPress), not to an EAGLE-3 draft"


def _hf_overrides_refusal(value: Any) -> str | None:
    """A dict hf_overrides that names what picks the target's class or shapes replaces the target (vLLM merges it
    into the target's config: transformers_utils/config.py HFConfigParser; dict overrides stay target-only,
    config/speculative.py compose_draft_hf_overrides); other keys (rope, lengths) are recorded."""
    structural = {"architectures", "model_type", "num_hidden_layers", "hidden_size", "vocab_size",
                  "num_attention_heads", "num_key_value_heads", "intermediate_size", "quantization_config",
                  "auto_map", "text_config", "torch_dtype", "dtype"}
    if not isinstance(value, Mapping):
        return "hf_overrides must be a JSON object of config keys here (a callable is a library-only override)"
    hit = sorted(set(value) & structural)
    if hit:
        return (f"hf_overrides {', '.join(hit)} rewrites what the target is (its class, shapes or weights' "
                "format): the engine would build another model than --target's config.json describes")
    return None


# ---------------------------------------------------------------------------------------------- EngineArgs
# vLLM EngineArgs (vllm/engine/arg_utils.py) of 0.32, 0.33, 0.34 and LLM.__init__'s own keyword arguments
# (vllm/entrypoints/llm.py): kconvert's live run calls `vllm.LLM(**engine_args)` (kconvert/runners/vllm_worker.py).
ENGINE_ARGS: dict[str, Rule] = {
    # --- the target and the code that builds it
    "model": Rule(REFUSED, _REPLACES_TARGET.format(what="another model")),
    "model_weights": Rule(REFUSED, _REPLACES_TARGET.format(what="weights from another path (ModelConfig.model_weights)")),
    "hf_config_path": Rule(REFUSED, _REPLACES_TARGET.format(what="another config.json (ModelConfig.hf_config_path)")),
    "tokenizer": Rule(REFUSED, _REPLACES_TARGET.format(what="another tokenizer: the prompts' token ids and the "
                                                            "vocabulary the draft's d2t maps into are the target's")),
    "revision": Rule(REFUSED, _REPLACES_TARGET.format(what="another commit of the target (download that revision and "
                                                            "pass its folder)")),
    "tokenizer_revision": Rule(REFUSED, _REPLACES_TARGET.format(what="another commit of the target's tokenizer")),
    "code_revision": Rule(REFUSED, "selects another commit of the target's remote code; the target's code is "
                                   "loaded only with --trust-remote-code, from the files kconvert names"),
    "trust_remote_code": Rule(REFUSED, "remote code is turned on only by --trust-remote-code, the one switch "
                                       "SECURITY.md names and the report records"),
    "model_class_overrides": Rule(REFUSED, _REPLACES_TARGET.format(what="another model class for its architecture "
                                                                        "(ModelConfig.model_class_overrides)")),
    "hf_overrides": Rule(RECORDED, "merged into the target's config (transformers_utils/config.py); keys that pick "
                                   "its class or shapes are refused (see _hf_overrides_refusal)",
                         engine_path="model_config.hf_overrides"),
    "load_format": Rule(RECORDED, "how the weights are read; `dummy` and `tensorizer` replace them "
                                  "(model_executor/model_loader: DummyModelLoader fills random values, "
                                  "TensorizerLoader reads tensorizer_uri)",
                        refused_values={"dummy": _REPLACES_TARGET.format(what="random weights (DummyModelLoader)"),
                                        "tensorizer": _REPLACES_TARGET.format(
                                            what="weights from model_loader_extra_config.tensorizer_uri")},
                        engine_path="load_config.load_format"),
    "model_loader_extra_config": Rule(RECORDED, "the weight loader's options", engine_path="load_config.model_loader_extra_config"),
    "runner": Rule(ALLOWED, "the model runner kind; anything but generation starts no speculative decoding and fails"),
    "convert": Rule(ALLOWED, "converts a model to pooling, which generates nothing to measure and fails"),
    "model_impl": Rule(RECORDED, "vLLM's own implementation or the Transformers backend: another code path for "
                                 "the same weights", engine_path="model_config.model_impl"),
    "config_format": Rule(RECORDED, "which config file describes the target (hf config.json or mistral "
                                    "params.json)", engine_path="model_config.config_format"),
    "tokenizer_mode": Rule(RECORDED, "which tokenizer implementation turns the prompts into ids",
                           engine_path="model_config.tokenizer_mode"),
    "skip_tokenizer_init": Rule(ALLOWED, "without a tokenizer kconvert cannot render its prompts and the run fails"),
    "chat_template": Rule(REFUSED, "LLM()'s chat template serves LLM.chat(); kconvert renders its prompts with the "
                                   "target tokenizer's own template (kconvert/runners/vllm_worker.py), so the report "
                                   "would claim a template the prompts never saw"),
    "hf_token": Rule(REFUSED, "a credential: engine arguments are written into the report and the serve line; set "
                              "HF_TOKEN in the environment instead"),
    # --- precision and kernels: recorded
    "dtype": Rule(RECORDED, _NUMERICS, engine_path="model_config.dtype"),
    "quantization": Rule(RECORDED, _NUMERICS, engine_path="model_config.quantization"),
    "quantization_config": Rule(RECORDED, _NUMERICS),
    "allow_deprecated_quantization": Rule(ALLOWED, "only lets a deprecated method load; quantization is recorded"),
    "kv_cache_dtype": Rule(RECORDED, _NUMERICS, engine_path="cache_config.cache_dtype"),
    "kv_cache_dtype_skip_layers": Rule(RECORDED, _NUMERICS, engine_path="cache_config.kv_cache_dtype_skip_layers"),
    "attention_backend": Rule(RECORDED, _NUMERICS, engine_path="attention_config.backend"),
    "attention_config": Rule(RECORDED, _NUMERICS, engine_path="attention_config"),
    "moe_backend": Rule(RECORDED, _NUMERICS, engine_path="kernel_config.moe_backend"),
    "linear_backend": Rule(RECORDED, _NUMERICS, engine_path="kernel_config.linear_backend"),
    "sparse_indexer_topk_backend": Rule(RECORDED, _NUMERICS, engine_path="kernel_config.sparse_indexer_topk_backend"),
    "ir_op_priority": Rule(RECORDED, _NUMERICS, engine_path="kernel_config.ir_op_priority"),
    "kernel_config": Rule(RECORDED, _NUMERICS, engine_path="kernel_config"),
    "monokernel": Rule(RECORDED, _NUMERICS, engine_path="kernel_config.monokernel"),
    "gdn_prefill_backend": Rule(RECORDED, _NUMERICS),
    "kda_prefill_backend": Rule(RECORDED, _NUMERICS),
    "kda_decode_backend": Rule(RECORDED, _NUMERICS),
    "mamba_cache_dtype": Rule(RECORDED, _NUMERICS, engine_path="cache_config.mamba_cache_dtype"),
    "mamba_ssm_cache_dtype": Rule(RECORDED, _NUMERICS, engine_path="cache_config.mamba_ssm_cache_dtype"),
    "mamba_backend": Rule(RECORDED, _NUMERICS),
    "mamba_ssu_algorithm": Rule(RECORDED, _NUMERICS),
    "enable_mamba_cache_stochastic_rounding": Rule(RECORDED, _NUMERICS,
                                                   engine_path="mamba_config.enable_stochastic_rounding"),
    "mamba_cache_philox_rounds": Rule(RECORDED, _NUMERICS,
                                      engine_path="mamba_config.stochastic_rounding_philox_rounds"),
    "use_fp64_gumbel": Rule(RECORDED, "the sampler's noise precision (ModelConfig.use_fp64_gumbel)",
                            engine_path="model_config.use_fp64_gumbel"),
    "disable_sliding_window": Rule(RECORDED, "attends over the whole context where the model slides a window",
                                   engine_path="model_config.disable_sliding_window"),
    "kv_sharing_fast_prefill": Rule(RECORDED, "some layers skip prefill tokens (CacheConfig.kv_sharing_fast_prefill)",
                                    engine_path="cache_config.kv_sharing_fast_prefill"),
    "max_model_len": Rule(RECORDED, "the served context: the draft's positions are clamped to it",
                          engine_path="model_config.max_model_len"),
    "seed": Rule(RECORDED, "the sampler's seed (greedy runs do not depend on it)", engine_path="model_config.seed"),
    "additional_config": Rule(RECORDED, "platform plugins read it; its meaning is the plugin's",
                              engine_path="additional_config"),
    "watermark_config": Rule(RECORDED, "a watermark biases the target's sampling (EngineArgs.create_watermark_config)",
                             engine_path="watermark_config"),
    # --- what would replace vLLM's own measurement
    "worker_cls": Rule(REFUSED, _IMPORTS.format(what="a worker class in place of vLLM's, which runs the models "
                                                     "and the rejection sampler")),
    "worker_extension_cls": Rule(REFUSED, _IMPORTS.format(what="a class mixed into vLLM's worker (kconvert sets "
                                                               "its own, kconvert/runners/worker_probe.py), whose "
                                                               "methods can override the worker's")),
    "scheduler_cls": Rule(REFUSED, _IMPORTS.format(what="a scheduler class in place of vLLM's, which counts the "
                                                        "accepted tokens (v1/core/sched/scheduler.py "
                                                        "make_spec_decoding_stats)")),
    "logits_processors": Rule(REFUSED, _IMPORTS.format(what="logits processors that rewrite the target's "
                                                            "distribution, which decides what is accepted")),
    "disable_log_stats": Rule(ALLOWED, "kconvert sets it false: the engine's counters are the measurement",
                              refused_values={True: "disable_log_stats=true leaves the engine without the "
                                                    "spec-decode counters kconvert reads (LLM.get_metrics)"}),
    "kv_transfer_config": Rule(REFUSED, "a KV connector loads or saves KV caches outside the engine (and its "
                                        "kv_connector_module_path imports code); kconvert's trace recorder sets its "
                                        "own"),
    "tensor_parallel_size": Rule(REFUSED, _OWNED.format(flag="--tp")),
    "speculative_config": Rule(ALLOWED, "each of its keys is classified in SPECULATIVE_CONFIG (as "
                                        "`--engine-arg speculative_config=JSON`, `model` and kconvert's own keys are "
                                        "refused; a production line is replayed with --speculative-config)"),
    "spec_method": Rule(REFUSED, "another spelling of speculative_config.method (EngineArgs.create_speculative_config): "
                                 "kconvert serves the draft with the method the line resolves to"),
    "spec_model": Rule(REFUSED, "another spelling of speculative_config.model: replaces the draft under test"),
    "spec_tokens": Rule(REFUSED, _OWNED.format(flag="-k")),
    # --- requests kconvert does not make
    "enable_trace_replay": Rule(ALLOWED, "lets a request force its tokens (SamplingParams.trace_decode_token_ids); "
                                         "kconvert's requests never set it"),
    "generation_config": Rule(ALLOWED, "request defaults from generation_config.json; kconvert's requests state "
                                       "their sampling (SamplingParams)"),
    "override_generation_config": Rule(ALLOWED, "request defaults; kconvert's requests state their sampling"),
    "structured_outputs_config": Rule(ALLOWED, "applies to requests that ask for structured output; kconvert's do not"),
    "reasoning_parser": Rule(ALLOWED, "parses the text of answers, changes no token"),
    "reasoning_parser_plugin": Rule(ALLOWED, "parses the text of answers, changes no token"),
    "reasoning_config": Rule(ALLOWED, "reasoning budgets apply to requests that set them; kconvert's do not"),
    "io_processor_plugin": Rule(ALLOWED, "pooling input/output processing, not generation"),
    "pooler_config": Rule(ALLOWED, "pooling models only"),
    "diffusion_config": Rule(ALLOWED, "diffusion language models only"),
    "engram_config": Rule(ALLOWED, "where Engram embedding tables are stored; the same values"),
    "aux_output_config": Rule(ALLOWED, "auxiliary outputs (routed experts) returned beside the tokens"),
    "enable_return_routed_experts": Rule(ALLOWED, "returns routing beside the tokens"),
    "return_sampling_mask": Rule(ALLOWED, "returns the sampler's token support beside the tokens"),
    "max_logprobs": Rule(ALLOWED, "caps logprobs returned, not tokens sampled"),
    "logprobs_mode": Rule(ALLOWED, "which logprobs are returned, not which tokens are sampled"),
    "enable_prompt_embeds": Rule(ALLOWED, "allows embedding inputs; kconvert sends token ids"),
    "served_model_name": Rule(ALLOWED, "the name the server answers to"),
    "tokens_only": Rule(ALLOWED, "an API front-end mode; the engine generates the same tokens"),
    "per_request_spec_decode_metrics": Rule(ALLOWED, "adds per-request acceptance records beside the counters"),
    "enable_batch_sharded_sampling": Rule(ALLOWED, "splits sampling across TP ranks; the same sampler"),
    "weight_transfer_config": Rule(ALLOWED, "weights change only through explicit update calls kconvert never makes"),
}
ENGINE_ARGS.update(_group(ALLOWED, _PERF, (
    "enforce_eager", "compilation_config", "cudagraph_capture_sizes", "max_cudagraph_capture_size",
    "optimization_level", "performance_mode", "async_scheduling", "stream_interval", "enable_flashinfer_autotune",
    "enable_dbo", "ubatch_size", "dbo_decode_token_threshold", "dbo_prefill_token_threshold",
    "disable_custom_all_reduce", "enable_shm_tensor_arena", "disable_cascade_attn", "enable_hc_sp",
    "shutdown_timeout", "fail_on_environ_validation", "watchdog_config", "fault_tolerance_config",
    "enable_fault_tolerance", "checkpoint_prepare_on_startup", "enable_sleep_mode", "sleep_mode_backend",
    "sleep_mode_offload_cudagraph", "sleep_preserve_parameter_names", "enable_cumem_allocator",
    "enable_nccl_comm_suspend", "swa_bounded_replay")))
ENGINE_ARGS.update(_group(ALLOWED, _DIST, (
    "distributed_executor_backend", "pipeline_parallel_size", "master_addr", "master_port", "nnodes", "node_rank",
    "distributed_timeout_seconds", "cpu_distributed_timeout_seconds", "numa_bind", "numa_bind_nodes",
    "numa_bind_cpus", "device_ids", "prefill_context_parallel_size", "decode_context_parallel_size",
    "dcp_comm_backend", "dcp_q_replicate", "dcp_kv_cache_interleave_size", "cp_kv_cache_interleave_size",
    "data_parallel_size", "data_parallel_rank", "data_parallel_start_rank", "data_parallel_size_local",
    "data_parallel_address", "data_parallel_rpc_port", "data_parallel_hybrid_lb", "data_parallel_external_lb",
    "data_parallel_multi_port_external_lb", "data_parallel_backend", "enable_expert_parallel",
    "enable_ep_weight_filter", "all2all_backend", "enable_elastic_ep", "elastic_ep_max_dp_size", "dp_sync_interval",
    "disable_nccl_for_dp_synchronization", "eplb_config", "enable_eplb", "expert_placement_strategy",
    "_api_process_count", "_api_process_rank", "ray_workers_use_nsight")))
ENGINE_ARGS.update(_group(ALLOWED, _MEM, (
    "block_size", "enable_prefix_caching", "prefix_caching_hash_algo", "prefix_cache_retention_interval",
    "offload_backend", "cpu_offload_gb", "cpu_offload_params", "offload_group_size", "offload_num_in_group",
    "offload_prefetch_step", "offload_params", "gpu_memory_utilization", "kv_cache_memory_bytes",
    "max_num_batched_tokens", "max_num_scheduled_tokens", "long_prefill_token_threshold",
    "long_prefill_token_threshold_adaptive", "max_num_seqs", "max_num_active_seqs", "max_num_queued_reqs",
    "max_num_queued_tokens", "num_gpu_blocks_override", "enable_chunked_prefill", "disable_chunked_mm_input",
    "scheduler_reserve_full_isl", "prefill_schedule_interval", "watermark", "disable_hybrid_kv_cache_manager",
    "scheduling_policy", "kv_events_config", "ec_transfer_config", "ec_manager_config", "kv_offloading_size",
    "kv_offloading_backend", "mamba_block_size", "prefix_match_unit", "mamba_cache_mode",
    "enable_mamba_shared_prefix_checkpoint", "replayssm_buffer_len", "use_replayssm", "mamba_config",
    "enable_extensible_kv_cache", "max_num_inflight_kv_loads", "cache_aware_admission_window",
    "cache_aware_admission_threshold")))
ENGINE_ARGS.update(_group(ALLOWED, _LOAD, (
    "download_dir", "safetensors_load_strategy", "safetensors_prefetch_num_threads", "safetensors_prefetch_block_size",
    "max_parallel_loading_workers", "ignore_patterns", "use_tqdm_on_load", "pt_load_map_location",
    "shuffle_safetensors_files")))
ENGINE_ARGS.update(_group(ALLOWED, _OBS, (
    "aggregate_engine_logging", "show_hidden_metrics_for_version", "otlp_traces_endpoint", "collect_detailed_traces",
    "kv_cache_metrics", "kv_cache_metrics_sample", "custom_histogram_buckets", "cudagraph_metrics",
    "enable_layerwise_nvtx_tracing", "enable_mfu_metrics", "enable_logging_iteration_details", "jit_monitor_mode",
    "jit_monitor_verbose", "enable_mm_processor_stats", "profiler_config", "logging_config", "log_level",
    "log_config_file")))
ENGINE_ARGS.update(_group(ALLOWED, _MM, (
    "allowed_local_media_path", "allowed_media_domains", "language_model_only", "limit_mm_per_prompt",
    "enable_mm_embeds", "interleave_mm_strings", "media_io_kwargs", "mm_processor_kwargs", "mm_processor_cache_gb",
    "mm_processor_cache_type", "mm_hasher_algorithm", "mm_shm_cache_max_object_size_mb", "mm_encoder_only",
    "mm_encoder_tp_mode", "mm_encoder_attn_backend", "mm_encoder_attn_dtype", "mm_encoder_fp8_scale_path",
    "mm_encoder_fp8_scale_save_path", "mm_encoder_fp8_scale_save_margin", "renderer_num_workers",
    "skip_mm_profiling", "video_pruning_rate", "video_pruning_method", "mm_tensor_ipc", "mm_processor_device",
    "mm_ipc_gpu_memory_gb", "mm_device_do_normalize")))
ENGINE_ARGS.update(_group(ALLOWED, _LORA, (
    "enable_lora", "max_loras", "max_lora_rank", "default_mm_loras", "fully_sharded_loras", "max_cpu_loras",
    "lora_dtype", "lora_target_modules", "enable_tower_connector_lora", "specialize_active_lora",
    "enable_mixed_moe_lora_format", "enable_moe_shared_loras", "max_lora_cls_labels")))

# ---------------------------------------------------------------------------------------------- SpeculativeConfig
# vLLM SpeculativeConfig (config/speculative.py) of 0.32, 0.33, 0.34. vLLM reads `-` as `_` in its keys
# (EngineArgs.create_speculative_config), and so does the policy.
_FORCED = ("forced acceptance: vLLM accepts draft tokens at a calibrated rate (rejection_sample_method synthetic, "
           "config/speculative.py; PR #38045, #40662), so its counters measure nothing of the draft")
SPECULATIVE_CONFIG: dict[str, Rule] = {
    "model": Rule(RECORDED, "the draft: DRAFT under test; a replayed line's `model` is the production path, recorded "
                            "and read for the method vLLM would pick from it (engines/method_detection.py)",
                  engine_path="speculative_config.model"),
    "method": Rule(RECORDED, "EAGLE-3 drafts are served with method eagle3; a line without it gets the method vLLM "
                             "detects from its model path (engines/method_detection.py)",
                   engine_path="speculative_config.method"),
    "num_speculative_tokens": Rule(RECORDED, "k, set by -k (a replayed line's value sets -k)",
                                   engine_path="speculative_config.num_speculative_tokens"),
    "draft_tensor_parallel_size": Rule(RECORDED, "the draft's TP, set by --draft-tp (a replayed line's value sets it)",
                                       engine_path="speculative_config.draft_tensor_parallel_size"),
    "tensor_parallel_size": Rule(REFUSED, "vLLM keeps this key only to reject it (SpeculativeConfig: 'Users should "
                                          "pass draft_tensor_parallel_size'); give --draft-tp"),
    "rejection_sample_method": Rule(
        RECORDED, "how draft tokens are verified: standard (lossless rejection sampling) or block (Sun et al., "
                  "lossless); changes what an acceptance figure means",
        refused_values={"synthetic": _FORCED,
                        "fly": ("lossy acceptance: FLy accepts draft tokens the target would not have produced "
                                "(config/speculative.py, 0.33+: 'FLy's lossy, entropy-gated deferred window'), so "
                                "the figure is not the draft's lossless acceptance")},
        engine_path="speculative_config.rejection_sample_method", default="standard", values=("standard", "block")),
    "synthetic_acceptance_rates": Rule(REFUSED, _FORCED),
    "synthetic_acceptance_length": Rule(REFUSED, _FORCED),
    "draft_sample_method": Rule(RECORDED, "greedy drafts count as one-hot in rejection sampling, probabilistic ones "
                                          "use the draft's logits: acceptance differs",
                                engine_path="speculative_config.draft_sample_method", default="greedy",
                                values=("greedy", "probabilistic")),
    "quantization": Rule(RECORDED, _NUMERICS, engine_path="speculative_config.quantization"),
    "draft_lm_head_quantization": Rule(RECORDED, _NUMERICS),
    "moe_backend": Rule(RECORDED, _NUMERICS, engine_path="speculative_config.moe_backend"),
    "attention_backend": Rule(RECORDED, _NUMERICS, engine_path="speculative_config.attention_backend"),
    "kv_cache_dtype": Rule(RECORDED, _NUMERICS, engine_path="speculative_config.kv_cache_dtype"),
    "max_model_len": Rule(RECORDED, "the draft's context (clamps the served max_model_len)",
                          engine_path="speculative_config.max_model_len"),
    "parallel_drafting": Rule(RECORDED, "drafts all k tokens in one pass (P-EAGLE) instead of a chain",
                              engine_path="speculative_config.parallel_drafting"),
    "num_speculative_tokens_per_batch_size": Rule(RECORDED, "changes k by batch size: per-position rates then mix "
                                                            "several k", engine_path="speculative_config."
                                                                                     "num_speculative_tokens_per_batch_size"),
    "use_local_argmax_reduction": Rule(RECORDED, "another argmax path for greedy drafts (vocab-parallel local argmax)",
                                       engine_path="speculative_config.use_local_argmax_reduction"),
    "enable_adaptive_verification": Rule(RECORDED, "sizes the verified draft by confidence (DSpark only)",
                                         engine_path="speculative_config.enable_adaptive_verification"),
    "disable_eagle_block_drop": Rule(RECORDED, "reuses the trailing prefix-cache block for EAGLE drafts; vLLM calls it "
                                               "an option 'for measuring the acceptance-rate impact'",
                                     engine_path="speculative_config.disable_eagle_block_drop"),
    "revision": Rule(REFUSED, "selects another commit of the draft than the files under test"),
    "code_revision": Rule(REFUSED, "selects another commit of the draft's remote code"),
    "draft_load_config": Rule(REFUSED, "replaces how the draft's weights are loaded (a LoadConfig: load_format dummy "
                                       "gives random weights)"),
    "target_model_config": Rule(REFUSED, "vLLM fills it with the target's ModelConfig (EngineArgs."
                                         "create_speculative_config); given here it would replace the target"),
    "target_parallel_config": Rule(REFUSED, "vLLM fills it with the target's ParallelConfig"),
    "draft_model_config": Rule(REFUSED, "vLLM builds it from `model`; given here it replaces the draft's config "
                                        "(kconvert's trace recorder sets its own for extract_hidden_states)"),
    "draft_parallel_config": Rule(REFUSED, "vLLM builds it from draft_tensor_parallel_size"),
    "custom_method": Rule(REFUSED, "a registered custom speculator replaces EAGLE-3's drafting (0.34: "
                                   "v1/worker/gpu/spec_decode/speculator_config.py register_speculative_method)"),
    "speculator_options": Rule(REFUSED, "options of a custom speculator, which replaces EAGLE-3's drafting"),
    "enforce_eager": Rule(ALLOWED, _PERF),
    "disable_padded_drafter_batch": Rule(ALLOWED, _PERF),
    "disable_lookahead_block_hashes": Rule(ALLOWED, _MEM),
    "draft_decode_context_parallel_size": Rule(ALLOWED, _DIST),
    "use_heterogeneous_vocab": Rule(ALLOWED, "method draft_model only (a draft with another vocabulary); an EAGLE-3 "
                                             "draft maps its vocabulary with d2t"),
}
SPECULATIVE_CONFIG.update(_group(ALLOWED, _NOT_SPEC, (
    "index_share_for_mtp_iteration", "prompt_lookup_max", "prompt_lookup_min", "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob",
    "suffix_decoding_corpus_tokens", "dspark_draft_topk", "xpress_topc", "fly_window_size", "fly_entropy_threshold",
    "fly_entropy_top_k")))

# The speculative_config keys kconvert sets from its own flags and the draft under test.
KCONVERT_SPEC_KEYS = {"model": "DRAFT", "method": "the method the line resolves to",
                      "num_speculative_tokens": "-k", "draft_tensor_parallel_size": "--draft-tp"}

# ---------------------------------------------------------------------------------------------- environment
# The variables kconvert sets (kconvert/runners/vllm_args.py, vllm_offline.py _rpc_env, an engine row's serve_env),
# names in its hints, or refuses for the forced acceptance they switch on in other engines.
ENVIRONMENT: dict[str, Rule] = {
    "VLLM_CPU_KVCACHE_SPACE": Rule(ALLOWED, "the KV cache size on vLLM's CPU platform (docs/vllm-cpu.md)"),
    "VLLM_CPU_OMP_THREADS_BIND": Rule(ALLOWED, "which cores the CPU workers use"),
    "VLLM_RPC_BASE_PATH": Rule(ALLOWED, "where vLLM puts its IPC sockets"),
    "VLLM_MLA_DISABLE": Rule(RECORDED, "runs an MLA target without MLA attention (vllm/envs.py)"),
    "VLLM_USE_V2_MODEL_RUNNER": Rule(RECORDED, "which model runner serves the draft (config/vllm.py "
                                               "use_v2_model_runner; 0.34 refuses 0)"),
    "VLLM_BATCH_INVARIANT": Rule(RECORDED, "batch-invariant kernels: other numerics"),
    "VLLM_USE_FLASHINFER_SAMPLER": Rule(RECORDED, "another sampler implementation"),
    "VLLM_SERVER_DEV_MODE": Rule(ALLOWED, "exposes /server_info, where kconvert reads a server's sampler"),
    "SGLANG_EXPOSE_OWN_ENV_VARS": Rule(ALLOWED, "exposes SGLang's own variables in /server_info's internal_states "
                                                "(srt/managers/scheduler_components/internal_state.py _add_env_vars)"),
    "SGLANG_SIMULATE_ACC_LEN": Rule(
        REFUSED, "forced acceptance: SGLang accepts draft tokens to a target length (srt/environ.py, "
                 "srt/speculative/spec_utils.py SIMULATE_ACC_LEN; a value <= 0 turns it off)"),
    "SGLANG_SIMULATE_ACC_METHOD": Rule(ALLOWED, "how SGLANG_SIMULATE_ACC_LEN draws; inert without it"),
    "SGLANG_SIMULATE_ACC_TOKEN_MODE": Rule(ALLOWED, "which tokens SGLANG_SIMULATE_ACC_LEN accepts; inert without it"),
    "SGLANG_SIMULATE_ACC_GREEDY": Rule(ALLOWED, "DSpark option of SGLANG_SIMULATE_ACC_LEN; inert without it"),
    "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": Rule(
        REFUSED, "forced acceptance: TensorRT-LLM accepts this many draft tokens per step (AL - 1) whatever the "
                 "draft proposes"),
}
# Forced acceptance in the engines kconvert does not start, by how each is switched on (issue #46).
OTHER_ENGINE_KNOBS: dict[str, dict[str, Rule]] = {
    "sglang": {"env SGLANG_SIMULATE_ACC_LEN": ENVIRONMENT["SGLANG_SIMULATE_ACC_LEN"]},
    "trtllm": {"env TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS":
               ENVIRONMENT["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"]},
    "atom": {"--spec-decode-acceptance-length": Rule(REFUSED, "forced acceptance: ATOM accepts draft tokens to "
                                                              "this mean length")},
}


def _env_is_on(name: str, value: Any) -> bool:
    """SGLang turns simulation off at a value <= 0 (spec_utils.py: `turn off if < 0`; `SIMULATE_ACC_LEN > 0`)."""
    if value is None or str(value).strip() == "":
        return False
    if name == "SGLANG_SIMULATE_ACC_LEN":
        try:
            return float(value) > 0
        except ValueError:
            return True
    return True


# ---------------------------------------------------------------------------------------------- checks
def normalize_keys(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """Keys as vLLM reads them: `-` becomes `_` (EngineArgs.create_speculative_config; `--max-model-len`)."""
    return {str(k).strip().lstrip("-").replace("-", "_"): v for k, v in mapping.items()}


@dataclass
class Refusal:
    where: str  # "--engine-arg", "--speculative-config", "speculative_config (--engine-arg)", "environment"
    key: str
    value: Any
    why: str

    def line(self) -> str:
        shown = json.dumps(self.value) if not isinstance(self.value, str) else self.value
        return f"{self.where} {self.key}={shown}: {self.why}"


def engine_arg_refusals(engine_args: Mapping[str, Any]) -> list[Refusal]:
    """What of `--engine-arg` (or VerifySettings.engine_args) must not reach the engine, including the keys of a
    `speculative_config` given there."""
    out: list[Refusal] = []
    for key, value in normalize_keys(engine_args).items():
        rule = ENGINE_ARGS.get(key)
        if rule is None:
            out.append(Refusal("--engine-arg", key, value,
                               f"not an engine argument of vLLM 0.32-0.34 (EngineArgs, LLM()), so kconvert cannot say "
                               f"what it changes{did_you_mean(key, ENGINE_ARGS)}"))
            continue
        why = _hf_overrides_refusal(value) if key == "hf_overrides" else rule.refusal(value)
        if why:
            out.append(Refusal("--engine-arg", key, value, why))
        if key == "speculative_config" and not why:
            out += speculative_refusals(value, origin="engine-arg")
    return out


def speculative_refusals(spec: Any, *, origin: str) -> list[Refusal]:
    """What of a speculative_config must not reach the engine. `origin` "replay": a production line's
    `--speculative-config`, whose `model` is recorded and replaced by DRAFT and whose k and draft TP set -k and
    --draft-tp; "engine-arg": `--engine-arg speculative_config=...`, where those keys are kconvert's flags'."""
    where = {"replay": "--speculative-config", "engine-arg": "--engine-arg speculative_config"}.get(
        origin, f"{origin} speculative_config")
    if not isinstance(spec, Mapping):
        return [Refusal(where, "speculative_config", spec, "must be a JSON object")]
    out: list[Refusal] = []
    for key, value in normalize_keys(spec).items():
        rule = SPECULATIVE_CONFIG.get(key)
        if rule is None:
            out.append(Refusal(where, key, value, "not a SpeculativeConfig key of vLLM 0.32-0.34, so kconvert cannot "
                                                  f"say what it changes{did_you_mean(key, SPECULATIVE_CONFIG)}"))
            continue
        if origin == "engine-arg" and key in KCONVERT_SPEC_KEYS:
            why = ("replaces the draft under test (DRAFT is the draft; a production line is replayed with "
                   "--speculative-config, which records its model)" if key == "model" else
                   _OWNED.format(flag=KCONVERT_SPEC_KEYS[key]) + " (or replay the production line with "
                                                                 "--speculative-config)")
            out.append(Refusal(where, key, value, why))
            continue
        why = rule.refusal(value)
        if why:
            out.append(Refusal(where, key, value, why))
    return out


def env_refusals(env: Mapping[str, Any], *, where: str = "environment") -> list[Refusal]:
    """Variables passed to an engine that switch forced acceptance on (any engine's: passing one is asking for it)."""
    out = []
    for name, value in env.items():
        rule = ENVIRONMENT.get(str(name))
        if rule is not None and rule.kind == REFUSED and _env_is_on(str(name), value):
            out.append(Refusal(where, str(name), value, rule.why))
    return out


def refuse(refusals: list[Refusal]) -> None:
    """Raise the one UsageError (exit 2) that names every refused key, before any engine starts."""
    if refusals:
        lines = "; ".join(r.line() for r in refusals)
        raise UsageError(f"refused before any engine starts: {lines}",
                         hint="docs/engine-policy.md lists every key kconvert allows, refuses or records, and why")


def check_request(engine_args: Mapping[str, Any] | None = None, *, speculative: Mapping[str, Any] | None = None,
                  env: Mapping[str, Any] | None = None) -> None:
    """The one check every live path runs (verify, its dry run, matrix live cells, the trace recorder, the library):
    `engine_args` as given, a replayed `speculative` config, and the environment kconvert passes."""
    found = engine_arg_refusals(engine_args or {})
    if speculative is not None:
        found += speculative_refusals(speculative, origin="replay")
    found += env_refusals(env or {})
    refuse(found)


# ---------------------------------------------------------------------------------------------- recorded identity
def recorded_keys() -> list[str]:
    """Every recorded key, as the report names it: engine arguments bare, speculative_config keys dotted."""
    return ([k for k, r in ENGINE_ARGS.items() if r.kind == RECORDED]
            + [f"speculative_config.{k}" for k, r in SPECULATIVE_CONFIG.items() if r.kind == RECORDED])


def _dig(tree: Any, path: str) -> Any:
    node = tree
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _UNSET
        node = node[part]
    return node


def settings_from_config(config_dump: Mapping[str, Any] | None, engine_args: Mapping[str, Any] | None = None,
                         env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The measurement's identity: every recorded key the engine resolved, read from `config_dump` (a VllmConfig as
    /server_info?config_format=json dumps it: `pydantic.TypeAdapter(VllmConfig).dump_python(mode="json",
    fallback=str)`, which kconvert's worker also writes), else as given in `engine_args`; the recorded environment
    variables as `$NAME`. Without a dump (a dry run) the speculative keys that change what acceptance means show
    vLLM's default when not given."""
    args = normalize_keys(engine_args or {})
    given_spec = normalize_keys(args.get("speculative_config") or {}) if isinstance(
        args.get("speculative_config"), Mapping) else {}
    out: dict[str, Any] = {}
    for table, prefix, given in ((ENGINE_ARGS, "", args), (SPECULATIVE_CONFIG, "speculative_config.", given_spec)):
        for key, rule in table.items():
            if rule.kind != RECORDED:
                continue
            value = _dig(config_dump, rule.engine_path) if config_dump is not None and rule.engine_path else _UNSET
            if value is _UNSET and key in given:
                value = given[key]
            if value is _UNSET and config_dump is None and rule.default is not _UNSET and (
                    prefix == "" or "speculative_config" in args):
                value = rule.default
            if value is not _UNSET and not (value is None and key not in given):
                out[prefix + key] = value
    for name, rule in ENVIRONMENT.items():
        if rule.kind == RECORDED and env and env.get(name) not in (None, ""):
            out[f"${name}"] = env[name]
    return out


def forced_acceptance(config_dump: Mapping[str, Any] | None = None, env: Mapping[str, Any] | None = None
                      ) -> list[str]:
    """What in a server's revealed configuration forces or loosens acceptance: the speculative_config of a vLLM
    /server_info dump, the variables of its environment (vLLM's vllm_env, SGLang's env_vars)."""
    found: list[str] = []
    spec = _dig(config_dump, "speculative_config") if config_dump is not None else _UNSET
    if isinstance(spec, Mapping):
        for r in speculative_refusals({k: v for k, v in spec.items() if k in (
                "rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length")
                and v is not None}, origin="server"):
            found.append(f"speculative_config.{r.key}={json.dumps(r.value)}: {r.why}")
    for r in env_refusals(env or {}, where="env"):
        found.append(f"{r.key}={r.value}: {r.why}")
    return found


# ---------------------------------------------------------------------------------------------- servers
# How each server reveals its sampler, and how to make it reveal it. vLLM: GET /server_info?config_format=json under
# VLLM_SERVER_DEV_MODE=1 (vllm/entrypoints/serve/__init__.py register_vllm_dev_api_routers; the handler,
# vllm/entrypoints/serve/dev/server_info/api_router.py show_server_info, answers the whole VllmConfig and every VLLM_*
# variable; /metrics does not show the sampler). SGLang: /server_info is ServerArgs.resolved_dict() and scheduler
# state (srt/utils/common.py build_server_info), which hold no environment; its internal_states carry the server's
# own SGLANG_* variables only under SGLANG_EXPOSE_OWN_ENV_VARS=1 (srt/managers/scheduler_components/
# internal_state.py _add_env_vars, srt/environ.py exportable_env_vars), and SGLANG_SIMULATE_ACC_LEN is one.
HOW_TO_REVEAL = {
    "vllm": "start the server with VLLM_SERVER_DEV_MODE=1 (it serves /server_info; a development endpoint, so only "
            "where you trust the callers) and measure again",
    "sglang": "start the server with SGLANG_EXPOSE_OWN_ENV_VARS=1 (its /server_info then lists its SGLANG_* "
              "variables, SGLANG_SIMULATE_ACC_LEN among them) and measure again",
    # tokenspeed 0.1.1 answers /get_server_info on its control server (entrypoints/control_server.py, the engine's
    # server_args) but kconvert has read none of its settings for what forces acceptance
    "tokenspeed": "kconvert has not read which tokenspeed 0.1.1 settings force acceptance: check the serve line "
                  "(entrypoints/control_server.py /get_server_info lists its server_args)",
}


def sampler_verdict(engine: str, *, config_dump: Mapping[str, Any] | None = None,
                    env: Mapping[str, Any] | None = None, revealed: bool, source: str) -> dict[str, Any]:
    """What a server revealed about its sampler: `forced` lists what forces or loosens acceptance (a figure from
    such a server never passes); `settings` the recorded keys it shows; where it revealed nothing, `note` says the
    figure is only as honest as the server's sampler, and how to expose it."""
    forced = forced_acceptance(config_dump, env) if revealed else []
    out: dict[str, Any] = {"revealed": revealed, "source": source, "forced": forced,
                           "settings": settings_from_config(config_dump, None, {str(k): str(v) for k, v in
                                                                                  (env or {}).items()})
                           if revealed and config_dump is not None else {}}
    if not revealed:
        out["note"] = (f"the server does not show its sampler ({source}), so this figure is only as honest as the "
                       f"server's sampler: a forced acceptance knob would go unseen; {HOW_TO_REVEAL[engine]}")
    elif forced:
        out["note"] = ("the server forces or loosens acceptance, so its counters measure the knob, not the draft: "
                       "no pass")
    return out


__all__ = ["ALLOWED", "ENGINE_ARGS", "ENVIRONMENT", "HOW_TO_REVEAL", "KINDS", "OTHER_ENGINE_KNOBS", "RECORDED",
           "REFUSED", "Refusal", "Rule", "SPECULATIVE_CONFIG", "check_request", "engine_arg_refusals", "env_refusals",
           "forced_acceptance", "normalize_keys", "recorded_keys", "refuse", "sampler_verdict",
           "settings_from_config", "speculative_refusals"]
