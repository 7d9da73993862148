"""The engine runners: the code that starts, drives and measures a real engine for a live run.

vLLM offline: `engine_setup` reads the configs and prepares the draft, `vllm_args` computes the engine's arguments
from them (pure), `vllm_offline` runs `vllm_worker` in a child process, `engine_log` reads its log, `processes`
reaps it. Running servers: `vllm_server` (its Prometheus counters, through `kconvert.engines.metrics`) and
`sglang_server`. The facts they rely on (the engine rows, the acceptance math, the request and result shapes)
are `kconvert.engines`, which the rules consult and which imports nothing from here.
"""
