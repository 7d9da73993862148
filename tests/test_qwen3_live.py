"""A Qwen3-layer EAGLE-3 draft and vLLM 0.32's loader (``-m live``). The draft that loads and drafts is scored
against the engine in tests/test_score_live.py; here, the control: the same files declared as a Llama layer make
vLLM build its Llama class, whose loader raises on the q/k norms it has no place for, which kconvert says statically
(K101: set transformer_layer_config.model_type qwen3). Before, kconvert called the norms of the Qwen3-declared
draft unplaceable (K203) and its fix would have dropped them. One short engine start that fails at load (~12 s)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")

from kconvert.cli import main  # noqa: E402
from tests.live_runs import TARGET, qwen3_layer_draft  # noqa: E402

pytestmark = pytest.mark.live


@pytest.mark.timeout(600)
def test_the_same_norms_under_a_llama_declaration_make_vllm_raise_as_k101_says(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    draft = qwen3_layer_draft(tmp_path / "qwen3-draft")
    capsys.readouterr()
    assert main(["inspect", str(draft), "--target", TARGET, "--json", "--isolated"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["draft"]["layer_family"] == "qwen3" and not [f for f in doc["findings"] if f["severity"] == "error"]

    cfg = json.loads((draft / "config.json").read_text())
    cfg["transformer_layer_config"].update(model_type="llama", architectures=["LlamaForCausalLM"])
    (draft / "config.json").write_text(json.dumps(cfg))
    rc = main(["inspect", str(draft), "--target", TARGET, "--json", "--isolated"])
    k101 = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["id"] == "K101"]
    assert rc == 1 and k101 and k101[0]["fix_ops"][0]["value"] == "qwen3"
    rc = main(["verify", str(draft), "--target", TARGET, "--prompts", "all", "--max-prompts", "2", "--max-tokens",
               "8", "-k", "3", "--engine-arg", "dtype=float32", "--skip-static", "--json", "--isolated"])
    err = json.loads(capsys.readouterr().out)
    assert rc == 3 and any("k_norm" in ln or "q_norm" in ln for ln in err["error"].get("engine_last_lines", [])), err
