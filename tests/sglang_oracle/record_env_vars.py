"""Record what SGLang 0.5.23's own code puts in `/server_info` about its environment: tests/data/sglang_env_vars.json.

    .venv/bin/python tests/sglang_oracle/record_env_vars.py [--wheel PATH]

SGLang's /server_info carries, per DP rank, the scheduler's `get_internal_state` answer
(srt/entrypoints/http_server.py server_info -> tokenizer_manager.get_internal_state), to which
srt/managers/scheduler_components/internal_state.py `_add_env_vars` adds `env_vars = exportable_env_vars()` only
when SGLANG_EXPOSE_OWN_ENV_VARS is on. `exportable_env_vars` (srt/environ.py) lists every SGLang variable set in the
server's environment that is not a secret. srt/environ.py imports only the standard library, so it runs here from
the sglang 0.5.23 wheel (fetched with pip if --wheel is not given), once per environment below:

- `simulated`: InferenceX's forced acceptance (SGLANG_SIMULATE_ACC_LEN=3.24) with the variables exposed;
- `exposed`: the variables exposed, nothing forced;
- `hidden`: SGLANG_SIMULATE_ACC_LEN set but SGLANG_EXPOSE_OWN_ENV_VARS not: `_add_env_vars` adds nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "sglang_env_vars.json"
VERSION = "0.5.23"
ENVIRONMENTS = {
    "simulated": {"SGLANG_EXPOSE_OWN_ENV_VARS": "1", "SGLANG_SIMULATE_ACC_LEN": "3.24"},
    "exposed": {"SGLANG_EXPOSE_OWN_ENV_VARS": "1"},
    "hidden": {"SGLANG_SIMULATE_ACC_LEN": "3.24"},
}
CHILD = r'''
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("sglang_environ", sys.argv[1])
environ = importlib.util.module_from_spec(spec)
spec.loader.exec_module(environ)
# internal_state.py _add_env_vars: `if envs.SGLANG_EXPOSE_OWN_ENV_VARS.get(): state["env_vars"] = exportable_env_vars()`
state = {}
if environ.envs.SGLANG_EXPOSE_OWN_ENV_VARS.get():
    state["env_vars"] = environ.exportable_env_vars()
print(json.dumps(state))
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel
        if wheel is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
                            f"sglang=={VERSION}", "-d", tmp], check=True)
            wheel = next(str(p) for p in Path(tmp).glob("sglang-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            z.extract("sglang/srt/environ.py", tmp)
        environ_py = str(Path(tmp) / "sglang" / "srt" / "environ.py")
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
        out = {"sglang": VERSION, "environments": ENVIRONMENTS, "internal_state": {}}
        for name, env in ENVIRONMENTS.items():
            p = subprocess.run([sys.executable, "-c", CHILD, environ_py], capture_output=True, text=True,
                               env={**clean, **env}, check=True)
            out["internal_state"][name] = json.loads(p.stdout)
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
