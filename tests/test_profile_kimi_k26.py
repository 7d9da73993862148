"""The kimi-k2.6 target profile (issue #49 item 3): `--target kimi-k2.6` is a profile; what no public source states
for K2.6 (its rope, dtype, norm epsilon) is left null and named, so no rule compares against a guess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kconvert import inspect
from kconvert.targets import load_target, profile_names
from tests.factories import make_draft

ROOT = Path(__file__).resolve().parents[1]


def test_kimi_k26_is_a_profile_with_the_dimensions_its_card_and_recipe_state():
    assert "kimi-k2.6" in profile_names()
    t = load_target("kimi-k2.6")
    # model card: 61 layers, hidden 7168, 64 heads, 256K context; vLLM recipe context_length 262144
    assert (t.num_hidden_layers, t.hidden_size, t.num_attention_heads, t.max_position_embeddings) == \
        (61, 7168, 64, 262144)
    assert t.is_mla and t.weight_prefix == "language_model." and t.remote_code
    assert t.rope_theta is None and t.rope_scaling is None and t.torch_dtype is None
    assert t.summary()["unverified"] == ["rope_theta", "rope_scaling", "rms_norm_eps", "torch_dtype"]


def test_no_rope_comparison_rests_on_an_unverified_field(tmp_path):
    d = make_draft(tmp_path / "d", "specforge", config=lambda c: c.update(rope_theta=1234.0))
    res = inspect(str(d), target="kimi-k2.6", engine="vllm", engine_version="0.32")
    assert not [f for f in res.findings if f.id == "K902" and "the target's" in f.message]
    # the same draft against kimi-k2.5, whose config states rope_theta 50000, is compared
    res = inspect(str(d), target="kimi-k2.5", engine="vllm", engine_version="0.32")
    assert [f for f in res.findings if f.id == "K902" and "!= the target's 50000" in f.message]


def test_the_cli_takes_target_kimi_k26(tmp_path):
    d = make_draft(tmp_path / "d", "specforge")
    r = subprocess.run([sys.executable, "-m", "kconvert", "inspect", str(d), "--target", "kimi-k2.6", "--json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert r.returncode in (0, 1), r.stderr
    assert json.loads(r.stdout)["target"]["name"] == "kimi-k2.6"
