"""Record what vLLM's own code answers for every draft kconvert ships (aux ids, served context, the draft class and
its load_weights): tests/data/vllm_oracle.json; and, from the same child interpreters, each release's learned file
(kconvert/engines/learned/vllm-<release>.json, the engine rows' facts).

    .venv/bin/python tests/vllm_oracle/record.py [--out PATH] [--check]

1. ``manifest`` (the project's Python, which has kconvert): the same drafts the SGLang oracle records
   (tests/sglang_oracle/record.py ``manifest``: every EAGLE-3 zoo replica built by its tests/zoo/*/build.py in a
   temporary folder, tests/data/producers/*, examples/tiny/drafts/* and examples/tiny/broken/*), each with its
   target's layer count, and three config probes (``PROBES``).
2. ``run``, once per vLLM release (``RELEASES``: 0.32.0 as installed in this venv, the CPU build; 0.33.0's and
   0.34.0's Python files, the PyPI wheels' ``vllm/*`` minus ``*.so`` in ``.vllm-oracle/``, fetched with pip when
   missing), is kconvert's own learner: ``kconvert.runners.engine_oracle.ask`` runs
   ``kconvert/runners/engine_oracle_child.py`` in one child interpreter over these drafts and kconvert's probe set
   (kconvert/engines/probes.py), and ``kconvert.engines.learned.document`` reads the probes' answers as row facts,
   exactly as ``kconvert engines learn vllm==<release>`` does. The child's questions (its docstring): the hf_config
   as vLLM builds it, Model Runner V1's and V2's aux-layer functions (the V1 ones only where the release has V1:
   0.34 removed it), the runner's use of ``eagle_config.use_aux_hidden_state``, the target's default ids, the
   draft's positions and the served context (``SpeculativeConfig``, ``VllmConfig._limit_max_model_len_to_draft``),
   and the draft class on the meta device with its own ``load_weights``. No engine is started, no weight is read;
   the children run under ``VLLM_TARGET_DEVICE=cpu`` with a modelinfos cache per release in ``.vllm-oracle-cache/``.

``--check`` re-records and exits 1 if the answers differ from the committed JSON or a learned file (timings and
paths are not compared): the test that `kconvert engines learn` reproduces the committed answers of every release.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "vllm_oracle.json"
CACHE = ROOT / ".vllm-oracle"

# The releases recorded: the installed CPU build, then the wheels' Python files (kconvert's learner fetches them into
# .vllm-oracle/ with pip when missing: KCONVERT_ENGINES_CACHE's layout, vllm-<release>/vllm/...)
RELEASES = (("0.32", "0.32.0"), ("0.33", "0.33.0"), ("0.34", "0.34.0"))
LEARNED = ROOT / "kconvert" / "engines" / "learned"


# The shipped example drafts the variants are made of, and which kinds of change each gets.
VARIANTS = {"llama-specforge": "all", "mla-torchspec": "all", "llama-speculators": "all", "llama-fullvocab": "all"}
DROPPED = ("draft_vocab_size", "target_hidden_size", "eagle_config", "architectures", "model_type",
           "tie_word_embeddings", "head_dim", "num_key_value_heads", "rope_theta", "max_position_embeddings",
           "norm_before_residual")
ARCHS = ("LlamaForCausalLM", "Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3", "Eagle3DeepseekV2ForCausalLM",
         "DeepseekV3ForCausalLMEagle3", "Eagle3Speculator", "Qwen3ForCausalLMEagle3")
MODEL_TYPES = ("llama", "deepseek_v3", "kimi_k2", "deepseek_v2", "qwen3")
OTHER_IDS = ([0, 3, 7], [2, 4, 5], [1, 2], [1, 4, 6, 7], [-1, 3, 5], [2, 5, 8], [5, 4, 2])


def variants(cfg: dict, _kinds: str = "all") -> dict[str, dict]:
    """`cfg` with one fact changed, by name."""
    import copy

    out: dict[str, dict] = {}
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    ids = ec.get("eagle_aux_hidden_state_layer_ids") or cfg.get("eagle_aux_hidden_state_layer_ids")
    for k in DROPPED:
        if k in cfg:
            c = copy.deepcopy(cfg)
            c.pop(k)
            out[f"drop-{k}"] = c
    for arch in ARCHS:
        out[f"arch-{arch}"] = {**copy.deepcopy(cfg), "architectures": [arch]}
    for mt in MODEL_TYPES:
        out[f"model-type-{mt}"] = {**copy.deepcopy(cfg), "model_type": mt}
    if ids:
        out["ids-also-top"] = {**copy.deepcopy(cfg), "eagle_aux_hidden_state_layer_ids": ids}
        out["ids-top-differ"] = {**copy.deepcopy(cfg), "eagle_aux_hidden_state_layer_ids": [i + 1 for i in ids]}
        c = copy.deepcopy(cfg)
        c.setdefault("eagle_config", {})["layer_ids"] = ids
        out["ids-layer-ids"] = c
        for new in OTHER_IDS:
            c = copy.deepcopy(cfg)
            if "eagle_aux_hidden_state_layer_ids" in (c.get("eagle_config") or {}):
                c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = new
            else:
                c["eagle_aux_hidden_state_layer_ids"] = new
            out["ids-" + "_".join(map(str, new))] = c
    for dv in (512, 128, 1024):
        out[f"draft-vocab-{dv}"] = {**copy.deepcopy(cfg), "draft_vocab_size": dv}
    return out


def run(drafts: dict, release: str) -> tuple[dict, dict]:
    """One child interpreter of `release` (kconvert's own learner, kconvert/runners/engine_oracle.py ask): the
    answers for every shipped draft, and the release's learned file (the probe set's answers read as row facts,
    kconvert/engines/learned/__init__.py document), the same as `kconvert engines learn vllm==<release>` writes."""
    sys.path.insert(0, str(ROOT))
    from kconvert.engines.installed import installed_version
    from kconvert.engines.learned import document
    from kconvert.runners.engine_oracle import ask

    # vLLM's modelinfos cache per release (model_executor/models/registry.py keys it by the model file's hash, not
    # by release: a shared one would be rewritten by each release on every run)
    name = "installed" if installed_version("vllm") == release else f"vllm-{release}"
    raw, source = ask("vllm", release, drafts=drafts, cache=CACHE, vllm_cache=ROOT / ".vllm-oracle-cache" / name,
                      cwd=ROOT)
    learned = document(raw, engine="vllm", release=release, learned_from=source)
    answers = {"versions": raw["versions"], "functions": raw["functions"], "patched": raw.get("patched", []),
               "drafts": {k: v for k, v in raw["drafts"].items() if k in drafts}, "times": raw["times"]}
    return answers, learned


# name -> config keys set on a copy of examples/tiny/drafts/llama-specforge (eagle_config merged)
ON_DISK_BASE = "examples/tiny/drafts/llama-specforge"
PROBES = {
    "ids-4-fc-3": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4, 6]}},
    "num-aux-4": {"num_aux_hidden_states": 4},
    "num-aux-3-ids-4": {"num_aux_hidden_states": 3, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4, 6]}},
}


def target_folder(ref: str, work: Path, sg) -> str:
    """A folder holding the target's config.json, for vLLM's ModelConfig: the shipped tiny target as it is; the
    producers' target from the config tests/data/producers/provenance.json records; a built-in profile
    (kconvert/targets/profiles/*.json, the zoo's targets) as `kconvert.targets.engine_config` writes it for
    `--oracle` (its text model's config.json with the fields the profile copies from the public config; every other
    field is the config class's default)."""
    if (ROOT / ref / "config.json").is_file():
        return str(ROOT / ref)
    dest = work / "targets" / ref.replace("/", "_").replace("#", "_")
    if not (dest / "config.json").exists():
        if ref == sg.PRODUCERS_TARGET:
            cfg = json.loads((ROOT / "tests" / "data" / "producers" / "provenance.json").read_text())["target"]
        else:
            from kconvert.targets import engine_config, load_profile

            cfg = engine_config(load_profile(ref))
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "config.json").write_text(json.dumps(cfg))
    return str(dest)


def record() -> dict:
    sys.path.insert(0, str(ROOT))
    import importlib.util

    # the SGLang oracle's draft set, built the same way (its phase 1 needs no SGLang)
    spec = importlib.util.spec_from_file_location("sglang_oracle_record",
                                                  ROOT / "tests" / "sglang_oracle" / "record.py")
    sg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sg)
    manifest = sg.manifest

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kconvert-vllm-oracle-") as work:
        m = manifest(Path(work))
        drafts, configs = {}, {}
        for group in ("zoo", "producers", "examples", "automodel"):
            for name, e in m[group].items():
                drafts[f"{group}/{name}"] = {"path": e["path"], "num_layers": e["target"]["num_layers"],
                                             "target_dir": target_folder(e["target"]["ref"], Path(work), sg),
                                             "tensors": {n: [t["dtype"], t["shape"]] for n, t in e["tensors"].items()}}
                configs[f"{group}/{name}"] = {"config": e["config"], "num_layers": e["target"]["num_layers"],
                                              "target": e["target"]["ref"]}
        # config probes (no shipped draft sets num_aux_hidden_states or other than 3 ids): copies of one shipped
        # draft with its config changed, its tensors unchanged (fc stays 3 x hidden)
        base_key = "examples/drafts/llama-specforge"
        base = m["examples"]["drafts/llama-specforge"]
        for name, change in PROBES.items():
            folder = Path(work) / "probes" / name
            shutil.copytree(base["path"], folder)
            cfg = json.loads(json.dumps(base["config"]))
            for k, v in change.items():
                cfg[k] = {**cfg.get(k, {}), **v} if isinstance(v, dict) else v
            (folder / "config.json").write_text(json.dumps(cfg, indent=1))
            drafts[f"probes/{name}"] = {**drafts[base_key], "path": str(folder)}
            configs[f"probes/{name}"] = {**configs[base_key], "config": cfg, "probe_of": ON_DISK_BASE}
        # held-out-like variants: each shipped example draft with one fact of its config changed (a key dropped,
        # another architecture or model_type, ids elsewhere or of another count, another draft_vocab_size), the
        # tensors unchanged; kconvert's verdict on each is held against these answers (K107, test_vllm_oracle.py).
        # A sweep of these found 18 of 139 where the 0.34 row disagreed with 0.34.0's code (issue #47).
        for ex, change_set in VARIANTS.items():
            ebase = m["examples"][f"drafts/{ex}"]
            for vname, cfg in variants(ebase["config"], change_set).items():
                name = f"{ex}/{vname}"
                folder = Path(work) / "variants" / name
                shutil.copytree(ebase["path"], folder)
                (folder / "config.json").write_text(json.dumps(cfg, indent=1))
                drafts[f"variants/{name}"] = {**drafts[f"examples/drafts/{ex}"], "path": str(folder)}
                configs[f"variants/{name}"] = {**configs[f"examples/drafts/{ex}"], "config": cfg,
                                               "probe_of": f"examples/tiny/drafts/{ex}"}
        t_manifest = time.perf_counter() - t0
        results, learned, timings = {}, {}, {"manifest_s": round(t_manifest, 1)}
        for label, release in RELEASES:
            t = time.perf_counter()
            results[label], learned[release] = run(drafts, release)
            # an error naming the draft's folder names this run's temporary folder: recorded without it
            results[label] = json.loads(json.dumps(results[label]).replace(work, "<work>"))
            timings[f"vllm_{label}_s"] = round(time.perf_counter() - t, 1)
            timings[f"vllm_{label}_parts"] = results[label].pop("times")
    out = {"about": "vLLM's own aux-layer functions over every draft kconvert ships; tests/vllm_oracle/README.md",
           "releases": {}, "drafts": {}}
    for label, r in results.items():
        out["releases"][label] = {"versions": r["versions"], "functions": r["functions"]}
        if r["patched"]:
            out["releases"][label]["patched"] = r["patched"]
    out["variants"] = {}
    for key, c in configs.items():
        group = "variants" if key.startswith("variants/") else "drafts"  # held apart: many do not load at all
        out[group][key] = {**c, "answers": {label: results[label]["drafts"][key] for label in results}}
    out["timings"] = timings
    return out, learned


def answers(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k != "timings"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 if the recording differs from --out")
    a = ap.parse_args()
    from kconvert.engines.learned import comparable, file_name

    t0 = time.perf_counter()
    new, learned = record()
    took = time.perf_counter() - t0
    texts = {LEARNED / file_name("vllm", rel): json.dumps(doc, indent=1, sort_keys=True) + "\n"
             for rel, doc in learned.items()}
    if a.check:
        old = json.loads(a.out.read_text())
        stale = [p for p, text in texts.items()
                 if not p.is_file() or comparable(json.loads(p.read_text())) != comparable(json.loads(text))]
        for p in stale:
            print(f"{p.relative_to(ROOT)} is stale: `kconvert engines learn` answers otherwise")
        # drafts' temporary paths are not in the JSON; the zoo build folders differ per run
        if answers(old) != answers(new) or stale:
            for group in ("drafts", "variants"):
                for k in sorted(set(old.get(group, {})) | set(new[group])):
                    if old.get(group, {}).get(k) != new[group].get(k):
                        print(f"differs: {k}\n  recorded {old.get(group, {}).get(k)}\n  now      {new[group].get(k)}")
            if old["releases"] != new["releases"]:
                print("differs: releases", old["releases"], new["releases"])
            print(f"{a.out} or a learned file is stale: re-run tests/vllm_oracle/record.py")
            return 1
        print(f"vllm oracle: {len(new['drafts'])} drafts and {len(new['variants'])} variants x {len(RELEASES)} releases agree with {a.out}, and "
              f"{len(texts)} learned files with kconvert/engines/learned ({took:.0f} s)")
        return 0
    a.out.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
    for p, text in texts.items():
        p.write_text(text)
    print(f"wrote {a.out}: {len(new['drafts'])} drafts, and {len(texts)} learned files ({took:.0f} s; "
          f"{new['timings']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
