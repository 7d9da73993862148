"""A Qwen3-layer EAGLE-3 draft in a real vLLM 0.32 engine (``-m live``): the shipped speculators draft's layer given
Qwen3's per-head q_norm/k_norm and `transformer_layer_config.model_type: qwen3`, as `speculators train --draft-arch
qwen3` writes it. vLLM builds Eagle3Qwen3ForCausalLM (configs/speculators/algos.py, qwen3_eagle3.py) and its loader
raises on a name it cannot place, so a run that loads and drafts is the engine's own word that both norms are
placed (kconvert used to call them unplaceable, K203, and its fix would have dropped them). One short engine run."""
from __future__ import annotations

import importlib.util
import shutil
import json
from pathlib import Path

import numpy as np
import pytest

from kconvert.cli import main
from kconvert.schemas import validate

ROOT = Path(__file__).resolve().parents[1]
live = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (the `live` extra)")


def qwen3_layer_draft(folder: Path) -> Path:
    src = ROOT / "examples/tiny/drafts/llama-speculators"
    folder.mkdir(parents=True)
    cfg = json.loads((src / "config.json").read_text())
    layer = cfg["transformer_layer_config"]
    layer.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3")
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    import torch  # the live tier has torch; bf16 needs it to round-trip
    from safetensors.torch import load_file as load_torch, save_file

    t = load_torch(str(src / "model.safetensors"))
    hd = layer["head_dim"]
    rng = np.random.default_rng(3)
    for w in ("q_norm", "k_norm"):
        t[f"layers.0.self_attn.{w}.weight"] = torch.tensor(1 + rng.normal(0, 0.05, size=hd), dtype=t["norm.weight"].dtype)
    save_file(t, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@live
@pytest.mark.live
@pytest.mark.timeout(900)
def test_vllm_loads_and_drafts_with_a_qwen3_layer_draft(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    draft = qwen3_layer_draft(tmp_path / "qwen3-draft")
    capsys.readouterr()
    rc = main(["inspect", str(draft), "--target", str(ROOT / "examples/tiny/target"), "--json", "--isolated"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["draft"]["layer_family"] == "qwen3", doc["findings"]
    rc = main(["verify", str(draft), "--target", str(ROOT / "examples/tiny/target"), "--prompts", "all",
               "--max-prompts", "8", "--max-tokens", "32", "-k", "3", "--engine-arg", "dtype=float32", "--json",
               "--isolated"])
    doc = json.loads(capsys.readouterr().out)
    validate(doc, "report")
    (tmp_path.parent / "qwen3-live.json").write_text(json.dumps(doc, indent=1))
    assert rc == 0, doc.get("error") or doc["verdict"]
    c = doc["live"]["counters"]
    assert c["drafts"] > 0 and c["draft_tokens"] == 3 * c["drafts"]
    # The control: the same files declared as a Llama layer. vLLM builds its Llama class, whose loader raises on
    # the norms it has no place for; kconvert says so statically (K101: set model_type qwen3).
    ctl = tmp_path / "llama-declared"
    shutil.copytree(draft, ctl)
    cfg = json.loads((ctl / "config.json").read_text())
    cfg["transformer_layer_config"].update(model_type="llama", architectures=["LlamaForCausalLM"])
    (ctl / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    rc = main(["inspect", str(ctl), "--target", str(ROOT / "examples/tiny/target"), "--json", "--isolated"])
    k101 = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["id"] == "K101"]
    assert rc == 1 and k101 and k101[0]["fix_ops"][0]["value"] == "qwen3"
    rc = main(["verify", str(ctl), "--target", str(ROOT / "examples/tiny/target"), "--prompts", "all",
               "--max-prompts", "2", "--max-tokens", "8", "-k", "3", "--engine-arg", "dtype=float32", "--skip-static",
               "--json", "--isolated"])
    err = json.loads(capsys.readouterr().out)
    assert rc == 3 and any("k_norm" in ln or "q_norm" in ln for ln in err["error"].get("engine_last_lines", [])), err
