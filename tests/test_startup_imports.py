"""The command line imports only what a command uses (issue 23 item 2): `python -X importtime` of a child process
lists every module it imported; the heavy packages must not be among them. bench/startup.py times the same commands
(outside the suite: wall time moves with the machine's load, the import set does not)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "examples" / "tiny"


def _imported_top_level(*args: str) -> set[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "kconvert", *args], env=env, cwd=REPO,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    # CPython's format: "import time: <self us> | <cumulative us> | <indent><dotted name>"
    names = {line.rsplit("|", 1)[1].strip() for line in p.stderr.splitlines()
             if line.startswith("import time:") and "self [us]" not in line}
    assert "kconvert.cli" in names, "importtime output not parsed: " + p.stderr[:500]
    return {n.split(".")[0] for n in names}


def test_inspect_of_a_local_draft_loads_no_torch_vllm_or_transformers():
    loaded = _imported_top_level("inspect", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TINY / "target"))
    assert "numpy" in loaded  # the d2t rule decodes the tiny draft's d2t: proves the rules really ran
    assert not loaded & {"torch", "vllm", "transformers", "safetensors", "huggingface_hub", "jsonschema",
                         "prometheus_client", "pydantic"}  # pydantic: typer's adapters (kconvert/cli/_coercion.py)


def test_help_loads_no_hub_client_schema_validator_numpy_or_rules():
    loaded = _imported_top_level("--help")
    assert not loaded & {"huggingface_hub", "jsonschema", "numpy", "torch", "vllm", "transformers", "safetensors",
                         "prometheus_client", "pydantic", "pygments"}


def test_help_does_not_import_the_rules_or_the_writer():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "kconvert", "--help"], env=env, cwd=REPO,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    names = {line.rsplit("|", 1)[1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
    assert not {n for n in names if n.startswith(("kconvert.rules", "kconvert.writer", "kconvert.source"))}


# read at the process's end, from an atexit handler (entry() ends the process: kconvert.cli._finish)
_BLAS_PROBE = r"""
import atexit, ctypes, glob, os, sys
sys.argv = ["kconvert", *sys.argv[1:]]
from kconvert.cli import entry

def probe():
    import numpy
    libs = glob.glob(os.path.join(os.path.dirname(numpy.__file__), os.pardir, "numpy.libs", "*openblas*"))
    fn = getattr(ctypes.CDLL(libs[0]), "scipy_openblas_get_num_threads64_", None) if libs else None
    print(os.environ.get("OPENBLAS_NUM_THREADS"), fn() if fn else "no-openblas")

atexit.register(probe)
entry()
"""


def _blas_after(args: list[str], env_extra: dict[str, str]) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", _BLAS_PROBE, *args], env=env, cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    var, threads = p.stdout.split()[-2:]
    return var, threads


def test_inspect_runs_numpy_openblas_on_one_thread_unless_the_user_says_otherwise():
    """numpy's bundled OpenBLAS would start a spinning thread per core for rules that do no linear algebra
    (kconvert/cli/__init__.py). The count is read from the library itself (its exported getter)."""
    draft = str(TINY / "drafts" / "mla-torchspec")
    var, threads = _blas_after(["inspect", draft, "--target", str(TINY / "target")], {})
    if threads == "no-openblas":
        import pytest
        pytest.skip("this numpy has no bundled OpenBLAS")
    assert (var, threads) == ("1", "1")
    assert _blas_after(["inspect", draft], {"OPENBLAS_NUM_THREADS": "2"}) == ("2", "2")
    # a command that may start an engine leaves its children's environment alone
    assert _blas_after(["verify", "--help"], {})[0] == "None"
