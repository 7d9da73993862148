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
from kconvert.engines.learned import LEARNABLE as ENGINES, cache_root
from kconvert.errors import EngineError, MissingPackageError, UsageError

CHILD = Path(__file__).with_name("engine_oracle_child.py")
# The learner imports the release's code, which imports torch and transformers (the `learn` extra); the release's
# other dependencies are those of an installed vLLM (the `live` or `gpu` extra).
NEEDS = ("torch", "transformers")


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
        raise UsageError(f"kconvert learns {', '.join(ENGINES)} releases from their code here; {engine}'s code needs a "
                         "venv of its own (its imports need more than torch and transformers): "
                         "tests/sglang_oracle/record.py records SGLang, and kconvert ships what it recorded of "
                         "sglang 0.5.23 (kconvert/engines/learned/sglang-0.5.23.json)")
    if (installed_version(engine) or "").split("+")[0] == version:
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
    if extra_path is not None:
        # a release's files in kconvert's cache come without bytecode (the wheel ships none): the first child writes
        # it for the modules it imports, and every later one imports them without compiling (measured: the --oracle
        # child spent ~9 of its ~25 s compiling vLLM's sources when PYTHONDONTWRITEBYTECODE kept it from writing)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
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


def oracle_release(row: Any) -> tuple[str, str]:
    """Which release's code `--oracle` asks for `row`: the installed engine when it is that row's release (any patch
    of it) or a release kconvert has no row for (K106: the installed code is then the one to ask); else the release
    the row was learned from (its Python files, fetched into the cache when missing). (release, why)."""
    from kconvert.engines.expectations import row_for

    inst = installed_version(row.engine)
    base = row.version.split("/")[0]
    if inst:
        irow = row_for(row.engine, inst)
        if irow is None:
            return inst.split("+")[0], f"the installed {row.engine} {inst} (no row of its own: K106)"
        if irow.version.split("/")[0] == base:
            return inst.split("+")[0], f"the installed {row.engine} {inst}"
    if not row.learned_from:
        raise UsageError(f"--oracle: the {row.key} row was read by hand, from no release's code kconvert can ask")
    release = Path(row.learned_from).stem.partition("-")[2]
    return release, f"{row.engine} {release}'s Python files (the release the {row.key} row was learned from)"


def ask_about_draft(ckpt: Any, target: Any, row: Any, *, cache: Path | None = None,
                    say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`--oracle`: the row's engine code asked about this draft next to this target (one child interpreter): its
    config as vLLM reads it, the ids each runner feeds, the draft class on the meta device and its load_weights fed
    meta tensors of the checkpoint's names and shapes (read from the headers: no weight is read), the served context.
    The answer, the functions that gave it, and how long it took (K107 compares it with the row's verdict)."""
    import time

    from kconvert.targets import engine_config

    if row.engine not in ENGINES:
        raise UsageError(f"--oracle asks {', '.join(ENGINES)}'s code; the {row.key} row is not one of its releases")
    if target is None:
        raise UsageError("--oracle needs --target: the engine builds the draft next to its target")
    release, why = oracle_release(row)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kconvert-oracle-") as work:
        w = Path(work)
        (w / "draft").mkdir()
        # vLLM reads the draft's config.json; the tensors it is fed are meta tensors of the headers' names and shapes
        (w / "draft" / "config.json").write_text(json.dumps(ckpt.config))
        cfg = engine_config(target)
        if cfg is None:
            tdir = str(Path(target.local_path))
        else:
            (w / "target").mkdir()
            (w / "target" / "config.json").write_text(json.dumps(cfg))
            tdir = str(w / "target")
        drafts = {"draft": {"path": str(w / "draft"), "num_layers": target.num_hidden_layers, "target_dir": tdir,
                            "tensors": {n: [i.dtype, list(i.shape)] for n, i in sorted(ckpt.tensors.items())}}}
        raw, source = ask(row.engine, release, probes=False, drafts=drafts, cache=cache, say=say)
    return {"engine": row.engine, "release": release, "why": why, "learned_from": source, "runner": row.runner,
            "functions": raw["functions"], "patched": raw.get("patched", []), "answer": raw["drafts"]["draft"],
            "seconds": round(time.perf_counter() - t0, 1)}
