"""kconvert's version, in a module that imports nothing, so that any layer can name it."""
__version__ = "0.1.0"
# The name on the package index (pyproject.toml [project] name; `kconvert` there is another project). The command
# and `import kconvert` keep the short name.
DISTRIBUTION = "kconvert-eagle3"
PYPI_URL = f"https://pypi.org/project/{DISTRIBUTION}/"


def install_hint(extra: str | None = None) -> str:
    """The pip line that installs kconvert, with one extra."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"
