"""Ask a vLLM release's own code about drafts: fetch the release's Python files, write the drafts' configs, run
`engine_oracle_child.py` in a child interpreter with those files first on its path, and return its answers.

Used by `kconvert engines learn` (the probe set of `kconvert/engines/probes.py`), by `--oracle` (one draft and its
target) and by `tests/vllm_oracle/record.py` (every draft kconvert ships): one child per release, the same code.

A release's files: the installed vLLM when it is that release; else the wheel's `vllm/*` minus compiled modules
(`pip download --no-deps`, unzipped, the wheel deleted) in kconvert's cache, `$KCONVERT_ENGINES_CACHE`, else
`$XDG_CACHE_HOME/kconvert/engines`, else `~/.cache/kconvert/engines` (one folder per release:
`vllm-0.34.0/vllm/...`, the layout of the project's `.vllm-oracle/`). Nothing there runs a kernel: the child builds
configs and draft classes on the meta device under `VLLM_TARGET_DEVICE=cpu`.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Callable, Mapping

from kconvert._version import install_hint
from kconvert.engines.installed import DISTRIBUTIONS, installed_version
from kconvert.engines.learned import cache_root
from kconvert.errors import EngineError, MissingPackageError, UsageError

CHILD = Path(__file__).with_name("engine_oracle_child.py")
# The learner imports the release's code, which imports torch and transformers (the `learn` extra); the release's
# other dependencies are those of an installed vLLM (the `live` or `gpu` extra).
NEEDS = ("torch", "transformers")
ENGINES = ("vllm",)


def check_learner_packages(step: str) -> None:
    """MissingPackageError (exit 3, naming the extra) when torch or transformers is missing: the release's code
    imports both."""
    for name in NEEDS:
        if importlib.util.find_spec(name) is None:
            raise MissingPackageError(step, name, "learn")


def release_folder(engine: str, version: str, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / f"{engine}-{version}"


def release_files(engine: str, version: str, *, cache: Path | None = None,
                  say: Callable[[str], None] | None = None) -> tuple[Path | None, str]:
    """The folder to put first on the child's path (None: the installed engine is that release) and where the
    files came from. Downloads the wheel when the cache has no copy."""
    if engine not in ENGINES:
        raise UsageError(f"kconvert learns vLLM releases from their code; {engine} is not one of {', '.join(ENGINES)}")
    if installed_version(engine) == version:
        from importlib import metadata

        dist = next((d for d in DISTRIBUTIONS.get(engine, (engine,)) if _has_dist(metadata, d)), engine)
        return None, f"the installed {dist} {version}"
    dest = release_folder(engine, version, cache)
    wheel = (f"{engine} {version}'s wheel from the package index (pip download --no-deps {engine}=={version}): its "
             "Python files, no compiled module")
    if not (dest / engine / "__init__.py").is_file():
        fetch(engine, version, dest, say=say)
    return dest, wheel


def _has_dist(metadata: Any, name: str) -> bool:
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


def fetch(engine: str, version: str, dest: Path, *, say: Callable[[str], None] | None = None) -> None:
    """pip download --no-deps ENGINE==VERSION, keep the wheel's ENGINE/* minus compiled modules (*.so: nothing here
    runs a kernel), delete the wheel."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"kconvert-{engine}-wheel-", dir=dest.parent) as tmp:
        if say:
            say(f"downloading {engine}=={version} (pip download --no-deps) into {dest.parent}")
        p = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                            "--only-binary", ":all:", f"{engine}=={version}", "-d", tmp],
                           capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if p.returncode or not wheels:
            last = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no wheel"]
            raise EngineError(f"pip download {engine}=={version} failed: {last[0]}",
                              hint=f"check the release exists: pip index versions {engine}")
        partial = Path(tmp) / "files"
        with zipfile.ZipFile(wheels[0]) as z:
            for n in z.namelist():
                if n.startswith(f"{engine}/") and not n.endswith((".so", ".pyd")):
                    z.extract(n, partial)
        if dest.exists():  # a folder left by an interrupted run (no __init__.py): replaced whole
            import shutil
            shutil.rmtree(dest)
        os.replace(partial, dest)


def write_folders(drafts: Mapping[str, Mapping[str, Any]], target_config: Mapping[str, Any] | None,
                  work: Path) -> dict[str, dict[str, Any]]:
    """Write each probe's config.json (the child reads configs; the tensors it is given are meta tensors of the
    names and shapes listed, no file holds them) and the target's; the child's input."""
    tdir = None
    if target_config is not None:
        tdir = work / "target"
        tdir.mkdir(parents=True, exist_ok=True)
        (tdir / "config.json").write_text(json.dumps(target_config))
    out = {}
    for name, d in drafts.items():
        folder = work / "drafts" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(d["config"], indent=1))
        out[name] = {"path": str(folder), "num_layers": d.get("num_layers", (target_config or {}).get(
            "num_hidden_layers")), "target_dir": d.get("target_dir", str(tdir)), "tensors": d["tensors"]}
        if d.get("norm_output"):
            out[name]["norm_output"] = True
        if d.get("asks"):
            out[name]["asks"] = list(d["asks"])
    return out


def run_child(extra_path: Path | None, drafts: Mapping[str, Any], *, release: Mapping[str, Any] | None = None,
              vllm_cache: Path, cwd: Path | None = None, timeout: float = 900.0) -> dict[str, Any]:
    """Run the child over `drafts` ({key: {path, num_layers, target_dir, tensors}}) with `extra_path` first on its
    path (None: the installed engine); its answers."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(extra_path)] if extra_path else [])
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    # vLLM's CPU platform: a release's wheel is the CUDA build, whose platforms/__init__.py cpu_platform_plugin
    # picks the CPU platform only when asked (without it DeviceConfig raises "Failed to infer device type")
    env["VLLM_TARGET_DEVICE"] = "cpu"
    # the modelinfos cache (model_executor/models/registry.py) is keyed by the model file's hash, not by release:
    # one per release, or two releases overwrite each other's entries on every run
    env["VLLM_CACHE_ROOT"] = str(vllm_cache)
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)  # 0.34 refuses any value but 1 at import of its config
    try:
        p = subprocess.run([sys.executable, str(CHILD)], input=json.dumps({"drafts": dict(drafts),
                                                                          "release": release}),
                           capture_output=True, text=True, env=env, cwd=str(cwd) if cwd else None, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EngineError(f"the engine's code did not answer within {timeout:.0f} s") from None
    if p.returncode:
        lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        missing = next((ln.split("'")[1] for ln in reversed(lines) if "ModuleNotFoundError" in ln and "'" in ln), None)
        if missing in NEEDS:
            raise MissingPackageError("learning an engine's code", missing, "learn")
        if missing:
            raise EngineError(f"the engine's code imports {missing}, which is not installed here (one of vLLM's own "
                              "dependencies)", last_lines=lines[-5:],
                              hint=f"install vLLM's dependencies: {install_hint('live')} (vLLM's CPU build), or the "
                                   "release itself")
        raise EngineError(f"the engine's code failed in the child interpreter (exit {p.returncode})",
                          last_lines=lines[-5:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def ask(engine: str, version: str, *, probes: bool = True, drafts: Mapping[str, Any] | None = None,
        cache: Path | None = None, vllm_cache: Path | None = None, cwd: Path | None = None,
        say: Callable[[str], None] | None = None) -> tuple[dict[str, Any], str]:
    """Run one child of `engine` `version` over the probe set (`probes`) and the given `drafts` (child input
    entries, keys other than the probes'): its answers, and where the release's files came from."""
    from kconvert.engines.probes import TARGET_CONFIG, arch_candidates, vllm_probes

    check_learner_packages(f"asking {engine} {version}'s code")
    path, source = release_files(engine, version, cache=cache, say=say)
    root = cache or cache_root()
    with tempfile.TemporaryDirectory(prefix="kconvert-engine-probes-") as work:
        todo = write_folders(vllm_probes(), TARGET_CONFIG, Path(work)) if probes else {}
        todo.update(drafts or {})
        if say:
            say(f"asking {engine} {version}'s code about {len(todo)} drafts (one child interpreter)")
        raw = run_child(path, todo, release={"arch_candidates": arch_candidates()} if probes else None,
                        vllm_cache=vllm_cache or root / "vllm-cache" / version, cwd=cwd)
    return raw, source
