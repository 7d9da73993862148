"""Tensor parallelism before any engine starts: K304 (heads, KV heads and draft vocab against the TP), verify's
refusal of a TP the engine cannot run, and the replay of a production `vllm serve` line's TP and
`--speculative-config`."""
from __future__ import annotations

import json
import shlex
import sys

import pytest

from kconvert.engines.live_messages import LiveRequest
from kconvert.engines.serve_lines import parse_speculative_config
from kconvert.runners.vllm_args import build_engine_args
from kconvert.errors import UsageError
from kconvert.commands.inspect import inspect
from kconvert.rules import Decisions
from kconvert.commands.verify import VerifyResult, VerifySettings, verify
from kconvert.results.verify import serve_line
from tests.factories import make_draft, make_target

SEED_SPEC = '{"model": "AQ-MedAI/Kimi-K25-eagle3", "method": "eagle3", "num_speculative_tokens": 4, ' \
            '"draft_tensor_parallel_size": 8}'


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    for var in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE", "KCONVERT_OUTPUT_FORMAT", "KCONVERT_DEBUG"):
        monkeypatch.delenv(var, raising=False)


def target_with_heads(folder, heads: int):
    t = make_target(folder)
    cfg = json.loads((t / "config.json").read_text())
    cfg["text_config"]["num_attention_heads"] = heads
    (t / "config.json").write_text(json.dumps(cfg))
    return t


def k304(res):
    return [f for f in res.findings if f.id == "K304"]


def test_verify_blocks_a_draft_whose_heads_do_not_split_before_any_engine(tmp_path):
    d = make_draft(tmp_path / "d", "specforge")
    t = target_with_heads(tmp_path / "t", 8)
    assert not [f for f in k304(inspect(str(d), target=str(t), decisions=Decisions(tp=2))) if f.severity == "error"]
    vr = verify(str(d), str(t), settings=VerifySettings(tp=8, draft_tp=8, max_prompts=1))
    assert vr.static_blocked and vr.live is None and vr.exit_code == 1
    assert any(f.id == "K304" and f.severity == "error" for f in vr.inspect.errors)


def test_verify_refuses_with_skip_static_too_and_never_imports_vllm(tmp_path):
    d = make_draft(tmp_path / "d", "specforge", config=lambda c: c.update(num_attention_heads=3,
                                                                         num_key_value_heads=3))
    t = target_with_heads(tmp_path / "t", 8)
    for mod in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[mod]
    with pytest.raises(UsageError) as e:
        verify(str(d), str(t), settings=VerifySettings(tp=2, skip_static=True))
    assert "--tp 2" in e.value.message and "3 attention heads do not divide by TP 2" in e.value.message
    assert "vllm" not in sys.modules


def test_verify_refuses_a_target_whose_heads_do_not_split(tmp_path):
    d = make_draft(tmp_path / "d", "specforge", config=lambda c: c.update(num_attention_heads=8, num_key_value_heads=8))
    t = make_target(tmp_path / "t")  # tiny target: 2 heads
    with pytest.raises(UsageError, match="target's 2 attention heads do not divide by TP 8"):
        verify(str(d), str(t), settings=VerifySettings(tp=8, draft_tp=1))


def test_verify_refuses_a_draft_tp_vllm_does_not_accept(tmp_path):
    d = make_draft(tmp_path / "d", "specforge")
    t = target_with_heads(tmp_path / "t", 8)
    with pytest.raises(UsageError, match="only 1 or the target's TP"):
        verify(str(d), str(t), settings=VerifySettings(tp=8, draft_tp=2, skip_static=True))


# ------------------------------------------------------------------------------------------ serve-line replay


def test_the_seed_serve_lines_speculative_config_and_tp_become_verify_settings():
    rp = parse_speculative_config(SEED_SPEC, tensor_parallel_size=8)
    st = VerifySettings().replay(rp)
    assert (st.tp, st.draft_tp, st.num_speculative_tokens) == (8, 8, 4)
    assert st.production_draft == "AQ-MedAI/Kimi-K25-eagle3" and st.speculative_extra == {}


def test_keys_kconvert_does_not_map_reach_the_engine_as_written():
    rp = parse_speculative_config('{"method": "eagle3", "num_speculative_tokens": 2, '
                                  '"disable_padded_drafter_batch": true}')
    st = VerifySettings().replay(rp)
    req = LiveRequest(target="t", draft="d", num_speculative_tokens=st.num_speculative_tokens,
                      speculative_extra=st.speculative_extra)
    args, _, _ = build_engine_args(req, platform="gpu", target_config={}, draft_config={})
    assert args["speculative_config"] == {"model": "d", "method": "eagle3", "num_speculative_tokens": 2,
                                          "disable_padded_drafter_batch": True}


def test_the_draft_under_test_replaces_the_serve_lines_model():
    req = LiveRequest(target="t", draft="/tmp/fixed", speculative_extra={"model": "org/published"})
    args, _, _ = build_engine_args(req, platform="gpu", target_config={}, draft_config={})
    assert args["speculative_config"]["model"] == "/tmp/fixed"


@pytest.mark.parametrize("text,fragment", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"method": "ngram"}', "kconvert verifies EAGLE-3 drafts"),
    ('{"num_speculative_tokens": 0}', "num_speculative_tokens must be a positive integer"),
    ('{"draft_tensor_parallel_size": "8"}', "draft_tensor_parallel_size must be a positive integer"),
])
def test_a_malformed_speculative_config_is_named(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_speculative_config(text)


def test_the_report_serve_line_replays_what_ran(tmp_path):
    d = make_draft(tmp_path / "d", "specforge", shape="kimi")
    st = VerifySettings().replay(parse_speculative_config(
        '{"method": "eagle3", "num_speculative_tokens": 4, "draft_tensor_parallel_size": 8, '
        '"disable_padded_drafter_batch": true}', tensor_parallel_size=8))
    # the GPU row (Model Runner V2, what a TP=8 deployment runs): its line needs no runner variable
    vr = VerifyResult(inspect=inspect(str(d), target="kimi-k2.5", engine_version="0.33"), settings=st,
                      engine_target="moonshotai/Kimi-K2.5")
    argv = shlex.split(serve_line(vr))
    assert argv[:5] == ["vllm", "serve", "moonshotai/Kimi-K2.5", "--tensor-parallel-size", "8"]
    # the CPU build's row (Model Runner V1) prefixes the variable vLLM reads (config/vllm.py use_v2_model_runner)
    vr1 = VerifyResult(inspect=inspect(str(d), target="kimi-k2.5", engine_version="0.33/v1"), settings=st,
                       engine_target="moonshotai/Kimi-K2.5")
    assert shlex.split(serve_line(vr1))[:3] == ["VLLM_USE_V2_MODEL_RUNNER=0", "vllm", "serve"]
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "model": str(d), "method": "eagle3", "num_speculative_tokens": 4, "draft_tensor_parallel_size": 8,
        "disable_padded_drafter_batch": True}


def test_a_replayed_serve_line_sets_the_k_a_policy_entry_is_chosen_by(tmp_path):
    from kconvert.results.thresholds import Gate

    d = make_draft(tmp_path / "d", "specforge")
    t = make_target(tmp_path / "t")
    policy = tmp_path / "gate.toml"
    policy.write_text('[[gate]]\nnum_speculative_tokens = 3\nmin_acceptance_length = 2.0\n\n'
                      '[[gate]]\nnum_speculative_tokens = 4\nmin_acceptance_length = 2.5\n')
    notes: list[str] = []
    vr = verify(str(d), str(t), settings=VerifySettings(max_prompts=1),
                speculative_config='{"method": "eagle3", "num_speculative_tokens": 4}',
                thresholds=Gate(policy=str(policy), expected=3.0, tolerance=0.1), dry_run=True, notify=notes.append)
    assert vr.settings.num_speculative_tokens == 4 and vr.planned["num_speculative_tokens"] == 4
    # the k=4 entry's 2.5, raised by the expected 3.0 with 10 % tolerance to 2.7, and the note saying so
    assert vr.thresholds.min_acceptance_length == pytest.approx(2.7)
    assert notes == vr.thresholds.notes and "gate at 2.700" in notes[0]
    with pytest.raises(UsageError, match="-k 5 contradicts --speculative-config num_speculative_tokens 4"):
        verify(str(d), str(t), settings=VerifySettings(num_speculative_tokens=5),
               speculative_config='{"num_speculative_tokens": 4}', dry_run=True)


# ------------------------------------------------------------------------------------------ through the CLI


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    from kconvert.cli import main

    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_inspect_tp_reports_k304(tmp_path, capsys):
    d = make_draft(tmp_path / "d", "specforge")
    rc, out, _ = cli(capsys, "inspect", str(d), "--tp", "8", "--json")
    doc = json.loads(out)
    assert rc == 1 and any(f["id"] == "K304" and f["severity"] == "error" for f in doc["findings"])
    rc, _, err = cli(capsys, "inspect", str(d), "--draft-tp", "1")
    assert rc == 2 and "--draft-tp needs --tp" in err


def test_cli_verify_replays_a_serve_line_and_blocks_before_any_engine(tmp_path, capsys):
    d = make_draft(tmp_path / "d", "specforge")  # 2 heads: cannot split over the seed's 8
    t = target_with_heads(tmp_path / "t", 8)
    rc, out, _ = cli(capsys, "verify", str(d), "--target", str(t), "--tensor-parallel-size", "8",
                     "--speculative-config", SEED_SPEC, "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["verdict"] == "fail" and doc["live"] is None
    assert any(f["id"] == "K304" and "TP 8" in f["message"] for f in doc["findings"])


@pytest.mark.parametrize("extra,fragment", [
    (["--speculative-config", "{oops"], "not valid JSON"),
    (["--speculative-config", SEED_SPEC, "-k", "2"], "-k 2 contradicts --speculative-config"),
    (["--speculative-config", SEED_SPEC, "--draft-tp", "1"], "--draft-tp 1 contradicts"),
    (["--speculative_config", '{"method": "medusa"}'], "kconvert verifies EAGLE-3 drafts"),
])
def test_cli_verify_refuses_a_serve_line_it_cannot_replay(tmp_path, capsys, extra, fragment):
    d = make_draft(tmp_path / "d", "specforge")
    t = target_with_heads(tmp_path / "t", 8)
    rc, _, err = cli(capsys, "verify", str(d), "--target", str(t), *extra)
    assert rc == 2 and fragment in err
