"""Ask the installed vLLM which method it gives a speculative_config without `method`: its own
`SpeculativeConfig.__post_init__` runs in a child process on the line's `model` string as written, with the draft's
config read by vLLM's own `get_config` (and vLLM's own `hf_config_override` applied, as for any draft).

Only the draft's `ModelConfig` is stood in for, since the production path (`/models/kimi-eagle-draft`) does not
exist on this machine: the stand-in carries that string as `.model` and the config of the draft under test as
`.hf_config` / `.architectures`, which is all the detection reads (config/speculative.py, "Automatically detect the
method"). The run stops at the first line after the detection chain and reports `self.method` there, so what
follows (the EAGLE config wrap, the draft's parallel config) never runs. vLLM 0.32 and 0.33 detect inline there;
another structure (0.34 moved detection to v1/worker/gpu/spec_decode/speculator_config.py) answers None and the
caller uses kconvert's table (kconvert/engines/method_detection.py). ~5 s: the import of vllm.config.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Sequence

CHILD = r'''
import ast, copy, inspect, json, sys
from types import SimpleNamespace
import vllm, vllm.config.speculative as S
from vllm.transformers_utils.config import get_config

cases = json.load(sys.stdin)
path = inspect.getsourcefile(S.SpeculativeConfig)
tree = ast.parse(open(path, encoding="utf-8").read())
chain = None
for node in ast.walk(tree):
    if isinstance(node, ast.FunctionDef) and node.name == "__post_init__":
        for sub in ast.walk(node):
            if (isinstance(sub, ast.If) and ast.unparse(sub.test).startswith("self.method in ('eagle', 'eagle3'")
                    and "eagle-" in ast.unparse(sub)):
                chain = sub
                break
if chain is None:
    print(json.dumps({"version": vllm.__version__, "methods": None}))
    raise SystemExit(0)
first, last = chain.lineno, chain.end_lineno
code = S.SpeculativeConfig.__post_init__.__code__
FOLDERS = {}
READ = {}

class Stop(Exception):
    pass

class DraftModelConfig:
    """Stands in for ModelConfig(model=..., runner="draft", hf_overrides=...): the path as written, the config of
    the draft under test through vLLM's own reader and override."""
    def __init__(self, model=None, hf_overrides=None, **kw):
        self.model = model
        folder = FOLDERS[model]
        if folder not in READ:  # read once per folder; each case gets its own copy (the override edits it)
            READ[folder] = get_config(folder, trust_remote_code=False)
        cfg = copy.deepcopy(READ[folder])
        if callable(hf_overrides):
            cfg = hf_overrides(cfg)
        self.hf_config = cfg
        self.architectures = list(getattr(cfg, "architectures", None) or [])

class Target(SimpleNamespace):
    def __getattr__(self, name):
        return None

S.ModelConfig = DraftModelConfig
seen = {}

def local(frame, event, arg):
    if event == "line":
        if first <= frame.f_lineno <= last:
            seen["in"] = True
        elif seen.get("in") and frame.f_lineno > last:
            seen["method"] = frame.f_locals["self"].method
            raise Stop()
    return local

def tracer(frame, event, arg):
    return local if frame.f_code is code else None

out = []
for case in cases:
    FOLDERS[case["model"]] = case["folder"]
    seen.clear()
    target = Target(model="target", max_model_len=4096, hf_config=SimpleNamespace(model_type="llama"),
                    tokenizer="target", tokenizer_mode="auto", dtype="bfloat16", seed=0, max_logprobs=20,
                    config_format="auto", allowed_local_media_path="", trust_remote_code=False,
                    using_transformers_backend=lambda: False)
    sys.settrace(tracer)
    try:
        S.SpeculativeConfig(model=case["model"], num_speculative_tokens=3, target_model_config=target,
                            target_parallel_config=SimpleNamespace(tensor_parallel_size=1))
        error = None
    except Stop:
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        sys.settrace(None)
    out.append(seen.get("method") if "method" in seen else {"error": error})
print(json.dumps({"version": vllm.__version__, "methods": out,
                  "where": f"vllm {vllm.__version__} config/speculative.py:{first}-{last}"}))
'''


def detect_with_vllm(cases: Sequence[dict[str, str]], *, python: str | None = None,
                     pythonpath: str | None = None, timeout: float = 300.0) -> dict[str, Any] | None:
    """For each case `{"model": <path as written>, "folder": <a draft folder with config.json>}` the method the
    installed vLLM's own detection gives (a str), or `{"error": ...}` when it raised before it decided; None when
    vLLM cannot be run here or detects elsewhere. Returns `{"version", "methods", "where"}`."""
    env = dict(os.environ)
    env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    env["HF_HUB_OFFLINE"] = "1"
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    try:
        p = subprocess.run([python or sys.executable, "-c", CHILD], input=json.dumps(list(cases)),
                           capture_output=True, text=True, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    try:
        answer = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return answer if answer.get("methods") is not None else None
