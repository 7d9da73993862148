"""The pasteable `vllm serve` / `sglang.launch_server` lines (kconvert.engines.serve_lines)."""
from __future__ import annotations

import json
import shlex

import pytest

from kconvert.engines.expectations import ENGINES
from kconvert.engines.serve_lines import serve_lines


def test_vllm_line_is_exact_for_a_hub_pair():
    lines = serve_lines("AQ-MedAI/Kimi-K25-eagle3", "moonshotai/Kimi-K2.5", k=3, tp=8, draft_tp=1)
    assert lines["vllm"] == (
        "vllm serve moonshotai/Kimi-K2.5 --tensor-parallel-size 8 --speculative-config "
        """'{"model": "AQ-MedAI/Kimi-K25-eagle3", "method": "eagle3", "num_speculative_tokens": 3, """
        """"draft_tensor_parallel_size": 1}'"""
    )


def test_sglang_line_is_exact_and_verifies_k_plus_one_tokens():
    lines = serve_lines("AQ-MedAI/Kimi-K25-eagle3", "moonshotai/Kimi-K2.5", k=4, tp=8)
    assert lines["sglang"] == (
        "python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path AQ-MedAI/Kimi-K25-eagle3 --speculative-num-steps 4 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 5"
    )


def test_without_draft_tp_the_speculative_config_leaves_it_out():
    argv = shlex.split(serve_lines("d", "t", k=2, tp=1)["vllm"])
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "model": "d", "method": "eagle3", "num_speculative_tokens": 2}


def test_paths_with_spaces_and_quotes_survive_the_shell():
    draft, target = "/models/my draft's copy", "/models/target $HOME"
    lines = serve_lines(draft, target, k=3, tp=2)
    v = shlex.split(lines["vllm"])
    assert v[2] == target and json.loads(v[v.index("--speculative-config") + 1])["model"] == draft
    s = shlex.split(lines["sglang"])
    assert s[s.index("--model-path") + 1] == target and s[s.index("--speculative-draft-model-path") + 1] == draft


def test_aux_id_notes_name_each_engines_convention():
    lines = serve_lines("d", "t", k=3, tp=1)
    assert "eagle_aux_hidden_state_layer_ids" in lines["vllm_aux_ids"] and "input-of-layer" in lines["vllm_aux_ids"]
    assert "eagle_config" in lines["sglang_aux_ids"] and "+1" in lines["sglang_aux_ids"]
    assert "25454" in lines["sglang_aux_ids"]
    assert "eagle_config" in lines["tokenspeed_aux_ids"] and "+1" in lines["tokenspeed_aux_ids"]
    # one line per engine kconvert has rows for, and one aux-id note each
    assert set(serve_lines("d", "t", k=3, tp=1, engine_aux_note=False)) == set(ENGINES)
    assert {k.removesuffix("_aux_ids") for k in lines if k.endswith("_aux_ids")} == set(ENGINES)


@pytest.mark.parametrize("kw", [{"k": 0, "tp": 1}, {"k": 3, "tp": 0}, {"k": 3, "tp": 1, "draft_tp": 0}])
def test_counts_below_one_are_refused(kw):
    with pytest.raises(ValueError):
        serve_lines("d", "t", **kw)


# ------------------------------------------------------------------------------------------ SGLang's next step

def test_sglang_next_step_is_the_model_cards_launch_line_then_verify_server_with_the_same_k():
    from kconvert.engines.serve_lines import SGLANG_DEFAULT_URL, sglang_next_lines

    # lightseekorg/kimi-k2.5-eagle3's card: --speculative-algorithm EAGLE3, 3 steps, topk 1, 4 draft tokens;
    # a profile name becomes its Hub id for --model-path
    launch, measure = sglang_next_lines("lightseekorg/kimi-k2.5-eagle3", "kimi-k2.5", k=3, tp=8)
    assert launch == ("python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 "
                      "--speculative-algorithm EAGLE3 --speculative-draft-model-path lightseekorg/kimi-k2.5-eagle3 "
                      "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
    assert measure == "kconvert verify --server http://127.0.0.1:30000 --engine sglang -k 3"
    assert SGLANG_DEFAULT_URL == "http://127.0.0.1:30000"  # ServerArgs' default host and port
    launch, measure = sglang_next_lines("./my draft", "./target", k=5)
    assert shlex.split(launch)[shlex.split(launch).index("--speculative-draft-model-path") + 1] == "./my draft"
    assert measure.endswith("-k 5") and "--speculative-num-draft-tokens 6" in launch


def test_library_verify_on_sglang_raises_a_usage_error_carrying_both_lines(tmp_path, monkeypatch):
    import kconvert.commands.verify.command as run
    from kconvert.commands.verify import VerifySettings, verify
    from kconvert.engines.serve_lines import sglang_next_lines
    from kconvert.errors import UsageError
    from tests.factories import make_draft

    d = make_draft(tmp_path / "d", "specforge")
    missing = tmp_path / "no-target"  # the launch line names the target; nothing reads it
    opened = []
    real_open = run.open_draft
    monkeypatch.setattr(run, "open_draft", lambda ref: opened.append(ref) or real_open(ref))
    with pytest.raises(UsageError) as e:
        verify(str(d), str(missing), engine="sglang", settings=VerifySettings(num_speculative_tokens=4, tp=2))
    assert type(e.value) is UsageError and opened == [str(d)]  # the draft read once; the target not at all
    assert e.value.next_lines == sglang_next_lines(str(d), str(missing), k=4, tp=2)
    assert e.value.hint == f"{e.value.next_lines[0]} ; then: {e.value.next_lines[1]}"
    with pytest.raises(UsageError) as e:
        verify(None, None, engine="sglang")
    assert e.value.next_lines == sglang_next_lines("<draft>", "<target>", k=3, tp=1)


def test_verify_engine_sglang_without_server_prints_both_lines_and_exits_2(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, "-m", "kconvert", "verify", "examples/tiny/drafts/llama-specforge", "--target",
                        "examples/tiny/target", "--engine", "sglang", "-k", "4", "--tp", "2"],
                       capture_output=True, text=True, cwd=root, env=env, timeout=120)
    assert r.returncode == 2, r.stderr
    launch, measure = r.stdout.strip().splitlines()
    assert shlex.split(launch)[:3] == ["python", "-m", "sglang.launch_server"]
    assert "--model-path examples/tiny/target --tp 2" in launch and "--speculative-num-draft-tokens 5" in launch
    assert measure == "kconvert verify --server http://127.0.0.1:30000 --engine sglang -k 4"
    assert "--server" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "kconvert", "verify", "examples/tiny/drafts/llama-specforge", "--target",
                        "examples/tiny/target", "--engine", "sglang", "--json"],
                       capture_output=True, text=True, cwd=root, env=env, timeout=120)
    assert r.returncode == 2
    err = json.loads(r.stdout)["error"]
    assert "sglang.launch_server" in err["hint"] and "verify --server" in err["hint"]


def test_a_model_runner_v1_row_prefixes_the_vllm_line_with_the_variable_vllm_reads():
    # config/vllm.py use_v2_model_runner (0.32.0, 0.33.0): VLLM_USE_V2_MODEL_RUNNER, when set, picks the runner;
    # a GPU runs V2 otherwise, so a V1 row's line must set it
    import shlex as _shlex

    from kconvert.engines.expectations import engine_rules
    from kconvert.engines.serve_lines import serve_lines as _lines

    v1 = _lines("org/draft", "org/target", k=3, tp=1, env=dict(engine_rules("vllm", "0.33/v1").serve_env))["vllm"]
    v2 = _lines("org/draft", "org/target", k=3, tp=1, env=dict(engine_rules("vllm", "0.33").serve_env))["vllm"]
    assert _shlex.split(v1)[0] == "VLLM_USE_V2_MODEL_RUNNER=0" and _shlex.split(v1)[1:] == _shlex.split(v2)
    assert _shlex.split(v2)[:2] == ["vllm", "serve"]


def test_no_serve_line_or_card_asks_a_release_without_model_runner_v1_for_it(tmp_path):
    """vLLM 0.34 raises on VLLM_USE_V2_MODEL_RUNNER=0 ("Model Runner V1 has been removed", platforms/interface.py
    validate_environ, learned into kconvert/engines/learned/vllm-0.34.0.json). For every vLLM row: the serve line and
    the card's line set the variable exactly for a Model Runner V1 row, and only of a release that has V1."""
    import shlex as _shlex

    from kconvert.engines.expectations import ALL_ROWS
    from kconvert.engines.serve_lines import serve_lines as _lines
    from kconvert.hub.card import serve_commands

    for row in [r for r in ALL_ROWS if r.engine == "vllm"]:
        line = _lines("org/draft", "org/target", k=3, tp=1, env=dict(row.serve_env))["vllm"]
        card = serve_commands({"engine": {"name": "vllm", "rules_version": row.version}}, "org/draft",
                              target="org/target", tp=1)["vllm"]
        for text in (line, card):
            sets = "VLLM_USE_V2_MODEL_RUNNER" in text
            assert sets == (row.runner == "v1"), (row.key, text)
            assert not sets or "v1" in row.release_runners, (row.key, text)
        assert _shlex.split(line)[0 if row.runner != "v1" else 1] == "vllm"
