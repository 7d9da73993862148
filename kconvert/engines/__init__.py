"""The engines: what each engine version does with a draft (`expectations`, the facts the rules consult), and
live runs in a real engine with the draft next to its target, read from the engine's own counters.

vLLM offline: `vllm_args` builds the engine's arguments, `vllm_offline` runs `vllm_worker` in a child process,
`engine_log` reads its log, `processes` reaps it. Running servers: `vllm_server`, `sglang_server` (with
`metrics` for vLLM's Prometheus counters). `acceptance` turns counters into figures; `live_run` holds the
engine-neutral request and result; `installed` says what is installed here; `serve_lines` prints the commands
that serve a draft.
"""
