"""The Python files of each vLLM release kconvert has a row for, for tests that read a release's own code.

One row per release (`KNOWN["vllm"]`, a Model Runner V1 row `0.33/v1` beside its release's); each maps to its
`.0` release here, and tests/test_arg_policy.py fails when a row has no release in this list. The files come the
way tests/vllm_oracle/record.py and `kconvert engines learn` get them (kconvert/runners/engine_oracle.py
`release_files`): the installed vLLM when it is that release, else the wheel's `vllm/*` minus compiled modules in
the project's `.vllm-oracle/vllm-<version>/` (fetched with `pip download --no-deps` when missing: the package
index, no other network).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".vllm-oracle"
RELEASES = ("0.32.0", "0.33.0", "0.34.0")


def package_root(version: str) -> Path:
    """The `vllm` package folder of a release."""
    from kconvert.runners.engine_oracle import release_files

    folder, _ = release_files("vllm", version, cache=CACHE)
    if folder is not None:
        return folder / "vllm"
    spec = importlib.util.find_spec("vllm")  # the installed release; find_spec does not import it
    assert spec is not None and spec.submodule_search_locations, "vLLM is not installed"
    return Path(list(spec.submodule_search_locations)[0])
