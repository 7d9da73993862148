"""kconvert's version, in a module that imports nothing, so that any layer can name it."""
__version__ = "0.1.0"
# The name on the package index (pyproject.toml [project] name; `kconvert` there is another project). The command
# and `import kconvert` keep the short name.
DISTRIBUTION = "kconvert-eagle3"
PYPI_URL = f"https://pypi.org/project/{DISTRIBUTION}/"


def install_hint(extra: str | None = None) -> str:
    """The pip line that installs kconvert, with one extra."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"


def vllm_install_hint() -> str:
    """The pip lines that install vLLM with kconvert: its CUDA build (the `gpu` extra) on an NVIDIA GPU, its CPU
    build (`live`) elsewhere. One sentence for every place that finds vLLM missing (a live verify, a dry run's note,
    `trace --engine vllm`, `matrix --live`): with no vLLM installed, nothing here tells which machine the user
    means to serve on, and a dry run and a live run once named different extras for the same machine (issue #48)."""
    return f"{install_hint('gpu')} on an NVIDIA GPU, {install_hint('live')} (vLLM's CPU build) elsewhere"
