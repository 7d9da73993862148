"""Record what vLLM's own `/server_info` (dev mode) answers for a server of the tiny target and draft:
tests/data/vllm_server_info_{standard,synthetic}.json.

    .venv/bin/python tests/vllm_oracle/record_server_info.py [--check]

vLLM serves `GET /server_info` only with VLLM_SERVER_DEV_MODE=1 (vllm/entrypoints/serve/__init__.py
register_vllm_dev_api_routers); its handler (vllm/entrypoints/serve/dev/server_info/api_router.py show_server_info)
answers `{"vllm_config": <the VllmConfig>, "vllm_env": <every VLLM_* variable>, "system_env": <collect_env>}`, the
config as `pydantic.TypeAdapter(VllmConfig).dump_python(mode="json", fallback=str)` under `?config_format=json`.
Here that handler itself runs (vLLM 0.32.0 as installed), awaited with a request whose app state holds the
VllmConfig that `EngineArgs(...).create_engine_config()` builds for the line below, once as written and once with
InferenceX's forced acceptance (`rejection_sample_method: synthetic`, `synthetic_acceptance_length: 3.24`, its PR
#2286). vLLM's CPU build builds that config (it refuses synthetic only when it samples, vllm/utils/cpu_triton_utils.py).
No engine is started. `system_env` (collect_env's description of this machine: CPU, packages) is replaced by `{}`:
kconvert reads nothing of it. ~30 s per config on a cold vLLM cache.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
LINE = {"model": "examples/tiny/target", "max_model_len": 512, "enforce_eager": True,
        "speculative_config": {"model": "examples/tiny/drafts/llama-specforge", "method": "eagle3",
                               "num_speculative_tokens": 3}}
VARIANTS = {"standard": {}, "synthetic": {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.24}}

CHILD = r'''
import asyncio, json, sys
from types import SimpleNamespace
from vllm.engine.arg_utils import EngineArgs
from vllm.entrypoints.serve.dev.server_info import api_router

line = json.loads(sys.argv[1])
config = EngineArgs(**line).create_engine_config()
api_router._get_system_env_info_cached = lambda: {}  # collect_env: this machine's facts, not read by kconvert
request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(vllm_config=config)))
response = asyncio.run(api_router.show_server_info(request, config_format="json"))
sys.stdout.write(response.body.decode())
'''


def record(variant: str) -> dict:
    line = json.loads(json.dumps(LINE))
    line["speculative_config"].update(VARIANTS[variant])
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR",
           "VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(line)], capture_output=True, text=True, env=env,
                       cwd=str(ROOT), timeout=900)
    if p.returncode:
        raise SystemExit(p.stderr[-3000:])
    return json.loads(p.stdout)


def main() -> int:
    check = "--check" in sys.argv[1:]
    differ = False
    for variant in VARIANTS:
        out = DATA / f"vllm_server_info_{variant}.json"
        answer = record(variant)
        if check:
            differ |= json.loads(out.read_text())["vllm_config"]["speculative_config"] != \
                answer["vllm_config"]["speculative_config"]
        else:
            out.write_text(json.dumps(answer, indent=1, sort_keys=True) + "\n")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
