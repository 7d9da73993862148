"""The method vLLM gives a speculative_config without `method` (kconvert/engines/method_detection.py, issue #46).

- vLLM 0.32.0 (installed) answers itself: its own SpeculativeConfig.__post_init__ runs on a generated set of path
  strings x draft configs (kconvert/runners/method_probe.py, one child process), and kconvert's 0.32 table must
  give the same method for every case.
- 0.33.0 and 0.34.0: their detection code, read with `ast` (0.33 the same inline chain; 0.34
  speculator_config.py's _CHECKPOINT_DETECTION_ORDER and each config class's `matches`), must state the table's
  rules in the table's order.
- verify: the issue's production line fails (K109, exit 1) with the engine's method and the corrected line, which
  then passes; kconvert's own serve lines state the method.
"""
from __future__ import annotations

import ast
import json
import random
import shutil
from pathlib import Path

import pytest

from kconvert.engines.method_detection import DETECTION, detect, resolve
from tests.vllm_oracle.releases import package_root
from tests.vllm_static import literal_values

ROOT = Path(__file__).resolve().parents[1]
DRAFTS = ROOT / "examples" / "tiny" / "drafts"
DRAFT = str(DRAFTS / "mla-torchspec")
TARGET = str(ROOT / "examples" / "tiny" / "target")


def generated_paths(n: int = 24, seed: int = 46) -> list[str]:
    """Production paths as written: the published names detection was written for, the issue's, and random
    compositions of the fragments each rule reads, in mixed case, as paths and Hub ids."""
    fixed = ["/models/kimi-eagle-draft", "/models/kimi-eagle3-draft", "lightseekorg/kimi-k2.5-eagle3",
             "yuhuili/EAGLE-LLaMA3-Instruct-8B", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "AngelSlim/Qwen3-8B_eagle3",
             "deepseek-ai/dspark_qwen3_8b_block7", "z-lab/Qwen3-8B-DFlash-b16", "/mnt/ckpt/draft",
             "AQ-MedAI/Kimi-K25-eagle3", "/models/Kimi-EAGLE-3", "./runs/eagle_v1/epoch_3", "org/EAGLE-3-kimi",
             # two rules at once: which comes first decides
             "/models/eagle3/kimi-eagle-draft", "/ckpt/dflash-eagle3", "/ckpt/eagle3-dspark", "/ckpt/dspark-dflash",
             "/ckpt/mtp-eagle-v2"]
    rng = random.Random(seed)
    parts = ["kimi", "K2.5", "eagle", "EAGLE", "eagle3", "Eagle3", "eagle-", "EAGLE-", "dflash", "DSpark", "draft",
             "mtp", "spec", "v1", "3", "-", "_"]
    out = list(fixed)
    while len(out) < len(fixed) + n:
        name = "".join(rng.choice(parts) for _ in range(rng.randint(1, 4)))
        out.append(rng.choice(["/models/", "org/", "/data/ckpts/x-", "hub-user/"]) + name)
    return out


def generated_drafts(tmp: Path) -> dict[str, Path]:
    """The shipped EAGLE-3 drafts and variants of their configs that reach each model-type and architecture rule
    (an MTP rewrite, an MTP type, a DSpark architecture, a Qwen3 EAGLE-3 head)."""
    out = {d.name: d for d in sorted(DRAFTS.iterdir()) if (d / "config.json").is_file()}
    variants = {
        "deepseek_v3-type": ("mla-torchspec", {"model_type": "deepseek_v3"}),
        "qwen3-eagle3": ("llama-specforge", {"model_type": "qwen3", "architectures": ["Eagle3Qwen3ForCausalLM"]}),
        "dspark-arch": ("llama-specforge", {"architectures": ["Qwen3DSparkModel"], "model_type": "qwen3"}),
        "dspark-draft-qwen3": ("llama-specforge", {"architectures": ["DSparkDraftModel"], "model_type": "qwen3"}),
    }
    for name, (base, change) in variants.items():
        folder = tmp / name
        shutil.copytree(DRAFTS / base, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
        cfg = json.loads((folder / "config.json").read_text())
        cfg.update(change)
        (folder / "config.json").write_text(json.dumps(cfg))
        out[name] = folder
    return out


def test_the_032_table_gives_the_method_vllm_032_gives(tmp_path):
    from kconvert.runners.method_probe import detect_with_vllm

    drafts = generated_drafts(tmp_path)
    cases = [{"model": p, "folder": str(f), "draft": name} for p in generated_paths() for name, f in drafts.items()]
    answer = detect_with_vllm([{"model": c["model"], "folder": c["folder"]} for c in cases])
    assert answer is not None and answer["version"] == "0.32.0", answer
    wrong, raised = [], []
    for case, engine in zip(cases, answer["methods"]):
        if not isinstance(engine, str):
            raised.append((case["model"], case["draft"], engine))
            continue
        cfg = json.loads((Path(case["folder"]) / "config.json").read_text())
        ours, _ = detect("0.32", case["model"], cfg)
        if ours != engine:
            wrong.append((case["model"], case["draft"], engine, ours))
    assert raised == [] and wrong == [], (raised[:5], wrong[:10])
    methods = {m for m in answer["methods"] if isinstance(m, str)}
    assert {"eagle", "eagle3", "dflash", "dspark", "mtp", "draft_model"} <= methods  # every rule was reached


def test_a_dotted_model_is_a_custom_proposer_as_vllm_reads_it():
    """config/speculative.py SpeculativeConfig._is_custom_proposer_path, the function itself (in a child: vLLM
    imported into the test process registers torch opaque types that a later import in another test repeats)."""
    import os
    import subprocess
    import sys

    models = ["my.draft", "pkg.mod.Proposer", "my.draft/x", "https://a.b", "draft", "a..b", "1a.b", "org/x.y"]
    code = ("import json, sys; from vllm.config.speculative import SpeculativeConfig as S; "
            "print(json.dumps([S._is_custom_proposer_path(m) for m in json.loads(sys.argv[1])]))")
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR"}
    p = subprocess.run([sys.executable, "-c", code, json.dumps(models)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    for model, custom in zip(models, json.loads(p.stdout.strip().splitlines()[-1])):
        ours, _ = detect("0.32", model, {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama"})
        assert (ours == "custom_class") is custom, model


# ---------------------------------------------------------------------------------------- 0.33 and 0.34 statically


def _chain_rules(version: str) -> list[tuple[str, str, tuple]]:
    """(method, kind, values) per condition of the inline detection chain, in order."""
    path = package_root(version) / "config" / "speculative.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
              for t in n.targets if isinstance(t, ast.Name)}
    head = next(n for n in ast.walk(tree) if isinstance(n, ast.If)
                and ast.unparse(n.test).startswith("self.method in ('eagle', 'eagle3'") and "eagle-" in ast.unparse(n))
    rules: list[tuple[str, str, tuple]] = []
    node = head.orelse[0] if head.orelse else None
    while isinstance(node, ast.If):
        method = next((ast.literal_eval(s.value) for s in node.body if isinstance(s, ast.Assign)
                       and ast.unparse(s.targets[0]) == "self.method"), None)
        test = node.test
        terms = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
        for term in terms:
            text = ast.unparse(term)
            if method is None:
                rules.append(("draft_model", "otherwise", ()))
            elif text.endswith("draft_model_config.model.lower()"):
                rules.append((method, "path_contains", (ast.literal_eval(term.left),)))
            elif isinstance(term, ast.BoolOp):  # (arch in architectures and model_type == x)
                arch, mt = term.values
                rules.append((method, "architecture_and_model_type",
                              (ast.literal_eval(arch.left), ast.literal_eval(mt.comparators[0]))))
            elif text.endswith("draft_model_config.architectures"):
                left = term.left
                rules.append((method, "architecture", (consts[left.id] if isinstance(left, ast.Name)
                                                       else ast.literal_eval(left),)))
            elif "get_args(MTPModelTypes)" in text:
                rules.append((method, "model_type", tuple(sorted(literal_values(version, "config/speculative.py",
                                                                                "MTPModelTypes")))))
            elif "hf_config.model_type ==" in text:
                rules.append((method, "model_type", (ast.literal_eval(term.comparators[0]),)))
            elif text == "using_transformers_mtp":
                continue  # needs method mtp given: never for a line without a method
            else:
                raise AssertionError(f"vLLM {version}: a detection condition kconvert does not read: {text}")
        node = node.orelse[0] if node.orelse else None
    return rules


def _table_rules(key: str) -> list[tuple[str, str, tuple]]:
    out = []
    for step in DETECTION[key]:
        if step.kind in ("dotted", "model_is"):
            continue  # decided before the chain (custom proposer, ngram)
        if step.kind == "architecture":
            out += [(step.method, "architecture", (v,)) for v in step.values]
        elif step.kind == "path_contains":
            out += [(step.method, "path_contains", (v,)) for v in step.values]
        else:
            out.append((step.method, step.kind, tuple(sorted(step.values)) if step.kind == "model_type"
                        else tuple(step.values)))
    return out


@pytest.mark.parametrize("version, key", [("0.32.0", "0.32"), ("0.33.0", "0.33")])
def test_the_inline_detection_chain_is_the_table(version, key):
    assert _chain_rules(version) == _table_rules(key)


def test_the_034_detection_order_and_matches_are_the_table():
    root = package_root("0.34.0") / "v1" / "worker" / "gpu" / "spec_decode"
    tree = ast.parse((root / "speculator_config.py").read_text(encoding="utf-8"))
    order = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                 and ast.unparse(n.targets[0]) == "_CHECKPOINT_DETECTION_ORDER")
    classes = {"eagle": ("eagle", "EagleSpeculatorConfig"), "eagle3": ("eagle", "Eagle3SpeculatorConfig"),
               "dflash": ("dflash", "DFlashSpeculatorConfig"), "dspark": ("dspark", "DSparkSpeculatorConfig"),
               "mtp": ("mtp", "MTPSpeculatorConfig")}
    found = []
    for method in order:
        folder, cls = classes[method]
        mod = ast.parse((root / folder / "config.py").read_text(encoding="utf-8"))
        klass = next(n for n in ast.walk(mod) if isinstance(n, ast.ClassDef) and n.name == cls)
        matches = next(f for f in klass.body if isinstance(f, ast.FunctionDef) and f.name == "matches")
        ret = next(n for n in ast.walk(matches) if isinstance(n, ast.Return)).value
        text = ast.unparse(ret)
        if text.endswith("draft_model_config.model.lower()"):
            found.append((method, "path_contains", (ast.literal_eval(ret.left),)))
        elif "get_args(MTPModelTypes)" in text:
            found.append((method, "model_type",
                          tuple(sorted(literal_values("0.34.0", "config/speculative.py", "MTPModelTypes")))))
        else:
            raise AssertionError(f"vLLM 0.34 {cls}.matches: {text}")
    assert found + [("draft_model", "otherwise", ())] == _table_rules("0.34")


def test_no_eagle3_draft_class_declares_another_speculator_in_034():
    """0.34 first asks the draft's model class (`speculator_config_class`); kconvert's table skips that step, which
    holds only while no class vLLM builds for an EAGLE-3 architecture declares one."""
    from kconvert.engines.expectations import engine_rules

    models = package_root("0.34.0") / "model_executor" / "models"
    registry = (models / "registry.py").read_text(encoding="utf-8")
    checked = 0
    for arch in engine_rules("vllm", "0.34").architectures:
        if f'"{arch}": (' not in registry:
            continue
        checked += 1
        module, cls = registry.split(f'"{arch}": (', 1)[1].split(")", 1)[0].replace('"', "").split(",")[:2]
        source = (models / f"{module.strip()}.py").read_text(encoding="utf-8")
        klass = next((n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == cls.strip()),
                     None)
        assert klass is None or "speculator_config_class" not in ast.unparse(klass), arch
    assert checked >= 10  # the EAGLE-3 classes of the row are in 0.34's registry


# ---------------------------------------------------------------------------------------- verify


def test_the_issues_production_line_fails_with_the_engines_method_and_the_corrected_line(capsys):
    from kconvert.cli import main

    line = '{"model": "/models/kimi-eagle-draft", "num_speculative_tokens": 3}'
    capsys.readouterr()
    rc = main(["verify", DRAFT, "--target", TARGET, "--dry-run", "--speculative-config", line, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["exit_code"] == 1
    k109 = [f for f in doc["findings"] if f["id"] == "K109"]
    assert len(k109) == 1 and "'eagle' (EAGLE-1)" in k109[0]["message"]
    fixed = json.loads(k109[0]["message"].split("--speculative-config '")[1].rstrip("'"))
    assert fixed == {"model": "/models/kimi-eagle-draft", "num_speculative_tokens": 3, "method": "eagle3"}
    assert doc["dry_run"]["served_method"]["method"] == "eagle"
    assert '"method": "eagle"' in doc["dry_run"]["serve_line"]  # what the line would run, stated
    # the corrected line passes, and so does a path vLLM reads as eagle3
    for good in (json.dumps(fixed), '{"model": "/models/kimi-eagle3-draft", "num_speculative_tokens": 3}'):
        rc = main(["verify", DRAFT, "--target", TARGET, "--dry-run", "--speculative-config", good, "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert rc == 0 and not [f for f in doc["findings"] if f["id"] == "K109"], doc["findings"]
        assert '"method": "eagle3"' in doc["dry_run"]["serve_line"]


def test_resolve_keeps_a_stated_method_and_names_where_the_answer_came_from():
    cfg = json.loads((DRAFTS / "llama-specforge" / "config.json").read_text())
    assert resolve({"model": "/m/kimi-eagle-draft", "method": "eagle3"}, cfg, "0.33").method == "eagle3"
    r = resolve({"model": "/m/kimi-eagle-draft"}, cfg, "0.34")
    assert (r.method, r.detected) == ("eagle", True) and "0.34" in r.by
    r = resolve({"model": "/m/kimi-eagle-draft"}, cfg, "0.32", engine_answer=("eagle", "vllm 0.32.0 x.py:1-2"))
    assert r.by == "vLLM's own detection" and r.rule == "vllm 0.32.0 x.py:1-2"


def test_a_live_run_asks_the_installed_vllm_and_a_dry_run_the_table(monkeypatch):
    """Where the installed vLLM is the row's release, a live run takes vLLM's own answer (the probe the first test
    holds to the table); a dry run, another release, or no vLLM use the table."""
    import kconvert.runners.method_probe as probe
    from kconvert.commands.inspect import open_draft
    from kconvert.commands.verify.command import served_method
    from kconvert.engines.expectations import engine_rules

    asked = []

    def answer(cases, **kw):
        asked.append(cases)
        return {"version": "0.32.0", "methods": ["eagle"], "where": "vllm 0.32.0 config/speculative.py:1-2"}

    monkeypatch.setattr(probe, "detect_with_vllm", answer)
    ckpt = open_draft(DRAFT)
    line = {"model": "/models/kimi-eagle-draft", "num_speculative_tokens": 3}
    live = served_method(line, ckpt, engine_rules("vllm", "0.32"), ask_engine=True)
    assert live.by == "vLLM's own detection" and asked == [[{"model": line["model"], "folder": str(ckpt.root)}]]
    assert served_method(line, ckpt, engine_rules("vllm", "0.32"), ask_engine=False).by.startswith("kconvert's")
    assert served_method(line, ckpt, engine_rules("vllm", "0.33"), ask_engine=True).by.startswith("kconvert's")
    assert len(asked) == 1
