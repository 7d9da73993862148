"""The live engine layer: prompt sets, engine arguments, failure classification (fast, no vLLM), and real
vLLM CPU engines on the tiny factory models (``@pytest.mark.live``; skipped without vLLM).

Engine runs are shared between assertions through module-scoped fixtures: each start costs 30-60 s here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kconvert.runners.engine_log import classify_failure, error_lines, meaningful_lines
from kconvert.engines.installed import detect_platform
from kconvert.engines.live_messages import LiveRequest, LiveResult
from kconvert.runners.engine_setup import patched_draft_folder
from kconvert.runners.vllm_args import build_engine_args, parse_engine_args
from kconvert.errors import EXIT_ENGINE, EngineError, InputError, UsageError
from kconvert.prompts import load_prompts

sys.path.insert(0, str(Path(__file__).parent))
import live_factories  # noqa: E402
from tests.live_runs import engine_counters  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MLA_TARGET = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
              "text_config": {"kv_lora_rank": 512, "max_position_embeddings": 131072}, "vision_config": {}}
LLAMA_DRAFT = {"architectures": ["LlamaForCausalLMEagle3"]}


# ------------------------------------------------------------------------------------------ prompt sets


def test_load_prompts_reads_the_shipped_smoke_set():
    name, prompts = load_prompts("_smoke")
    assert name == "_smoke" and len(prompts) >= 4 and all(isinstance(p, str) and p for p in prompts)


def test_load_prompts_reads_jsonl_and_txt_paths(tmp_path):
    j = tmp_path / "mine.jsonl"
    j.write_text('{"id": "a", "prompt": "one"}\n\n{"prompt": "two"}\n')
    assert load_prompts(str(j)) == ("mine", ["one", "two"])
    t = tmp_path / "lines.txt"
    t.write_text("first\n\n  second  \n")
    assert load_prompts(t) == ("lines", ["first", "second"])


@pytest.mark.parametrize(
    "content, suffix, fragment",
    [
        ('{"prompt": "ok"}\nnot json\n', ".jsonl", ":2: not valid JSON"),
        ('{"text": "no prompt key"}\n', ".jsonl", 'expected an object with a "prompt" key'),
        ('{"prompt": ""}\n', ".jsonl", "non-empty string"),
        ("\n\n", ".txt", "has no prompts"),
        ("a prompt\n", ".csv", "unsupported prompt file"),
    ],
)
def test_load_prompts_rejects_bad_files_with_one_line(tmp_path, content, suffix, fragment):
    f = tmp_path / f"bad{suffix}"
    f.write_text(content)
    with pytest.raises((UsageError, InputError)) as exc:  # InputError: the read guard's (a line that is not JSON)
        load_prompts(str(f))
    assert fragment in exc.value.message and "\n" not in exc.value.message


def test_load_prompts_rejects_unknown_names_and_missing_files(tmp_path):
    with pytest.raises(UsageError, match="unknown prompt set 'nope'"):
        load_prompts("nope")
    with pytest.raises(UsageError, match="not found"):
        load_prompts(str(tmp_path / "missing.jsonl"))


def test_load_prompts_all_concatenates_the_three_shipped_sets():
    from kconvert.prompts import SHIPPED_SETS

    name, prompts = load_prompts("all")
    assert name == "all"
    assert prompts == sum((load_prompts(n)[1] for n in SHIPPED_SETS), [])


# ------------------------------------------------------------------------------------------ engine arguments


def test_engine_arg_items_become_engine_args_named_and_typed_as_engine_args_takes_them():
    # docs/manual.md: verify's --engine-arg K=V (matrix --live and trace --engine vllm take them as verify does)
    args = parse_engine_args(["max-model-len=4096", "--kv-cache-dtype=fp8", "enforce_eager=true",
                              'attention_config={"backend": "FLASH_ATTN"}', "dtype=float32", "seed=1", "seed=2",
                              "served_model_name=a=b"])
    assert args == {"max_model_len": 4096, "kv_cache_dtype": "fp8", "enforce_eager": True,
                    "attention_config": {"backend": "FLASH_ATTN"}, "dtype": "float32", "seed": 2,
                    "served_model_name": "a=b"}
    assert parse_engine_args(None) == {} and parse_engine_args([]) == {}


@pytest.mark.parametrize("item", ["dtype", "=float32", "--=1", ""])
def test_an_engine_arg_without_a_key_and_a_value_is_refused_naming_the_form(item):
    with pytest.raises(UsageError, match="use KEY=VALUE"):
        parse_engine_args([item])


def _req(**kw) -> LiveRequest:
    return LiveRequest(target="/t", draft=kw.pop("draft", "/d"), prompts=["x"], **kw)


def test_cpu_platform_gets_the_cpu_settings_and_records_them():
    args, env, auto = build_engine_args(_req(), platform="cpu", environ={})
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert args["gpu_memory_utilization"] == 0.5 and args["enforce_eager"] is True
    assert args["max_model_len"] == 512
    assert args["disable_log_stats"] is False
    assert args["speculative_config"] == {"model": "/d", "method": "eagle3", "num_speculative_tokens": 3}
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env
    assert len(auto) == 4 and any("VLLM_CPU_KVCACHE_SPACE" in a for a in auto)


def test_gpu_platform_gets_none_of_the_cpu_settings():
    args, env, auto = build_engine_args(
        _req(tp=8, draft_tp=1), platform="gpu", target_config={"text_config": {"kv_lora_rank": 512}},
        draft_config=LLAMA_DRAFT, environ={},
    )
    assert env == {} and auto == []
    assert not {"gpu_memory_utilization", "enforce_eager", "max_model_len"} & set(args)
    assert args["tensor_parallel_size"] == 8
    assert args["speculative_config"]["draft_tensor_parallel_size"] == 1


def test_user_engine_args_and_env_win_over_automatic_settings():
    req = _req(engine_args={"max_model_len": 1024, "gpu_memory_utilization": 0.3, "kv_cache_dtype": "fp8"},
               env={"VLLM_CPU_KVCACHE_SPACE": "4"}, tp=2)
    args, env, auto = build_engine_args(req, platform="cpu", environ={"VLLM_CPU_OMP_THREADS_BIND": "0-1"})
    assert args["max_model_len"] == 1024 and args["gpu_memory_utilization"] == 0.3 and args["kv_cache_dtype"] == "fp8"
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "4"}  # the caller's OMP binding stays the caller's
    assert not any("max_model_len" in a or "KVCACHE" in a or "OMP" in a for a in auto)


def test_tensor_parallel_on_cpu_binds_one_core_per_worker():
    _, env, _ = build_engine_args(_req(tp=2), platform="cpu", environ={}, cpu_cores=[0, 1])
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"


def test_llama_draft_beside_an_mla_target_disables_mla_on_cpu_only():
    _, env, auto = build_engine_args(_req(), platform="cpu", target_config=MLA_TARGET, draft_config=LLAMA_DRAFT,
                                     environ={})
    assert env["VLLM_MLA_DISABLE"] == "1" and any("VLLM_MLA_DISABLE" in a for a in auto)
    _, env, _ = build_engine_args(_req(), platform="cpu", target_config=MLA_TARGET,
                                  draft_config={"architectures": ["Eagle3DeepseekV3ForCausalLM"]}, environ={})
    assert "VLLM_MLA_DISABLE" not in env
    _, env, _ = build_engine_args(_req(draft=None), platform="cpu", target_config=MLA_TARGET, environ={})
    assert "VLLM_MLA_DISABLE" not in env
    _, env, _ = build_engine_args(_req(), platform="cpu", target_config={"kv_lora_rank": 512},
                                  draft_config=LLAMA_DRAFT, environ={})
    assert env["VLLM_MLA_DISABLE"] == "1"  # a stand-alone DeepSeek target (no text_config)


def test_kimi_k25_target_runs_text_only():
    args, _, auto = build_engine_args(_req(), platform="gpu", target_config=MLA_TARGET, environ={})
    assert args["limit_mm_per_prompt"] == {"vision_chunk": 0}
    assert any("vision_chunk" in a for a in auto)
    args, _, _ = build_engine_args(_req(engine_args={"limit_mm_per_prompt": {"vision_chunk": 1}}),
                                   platform="gpu", target_config=MLA_TARGET, environ={})
    assert args["limit_mm_per_prompt"] == {"vision_chunk": 1}


def test_max_model_len_default_respects_the_target_position_limit():
    args, _, _ = build_engine_args(_req(), platform="cpu", target_config={"max_position_embeddings": 256},
                                   environ={})
    assert args["max_model_len"] == 256


def test_no_draft_means_no_speculative_config():
    args, _, _ = build_engine_args(_req(draft=None), platform="cpu", environ={})
    assert "speculative_config" not in args


def test_a_recording_run_is_verifys_run_without_a_draft_plus_vllms_recording_method():
    """`kconvert trace --engine vllm` (vLLM PR #33736): extract_hidden_states with exactly one speculative token
    (vllm/v1/spec_decode/extract_hidden_states.py asserts it), the layer ids in the draft config vLLM builds over
    the target's, and the hidden-states connector writing into the run's folder; every other argument and the
    environment are those of verify's run of the same target without a draft."""
    plain = build_engine_args(_req(draft=None, tp=2), platform="cpu", target_config=MLA_TARGET, environ={},
                              cpu_cores=[0, 1])
    rec = build_engine_args(_req(draft=None, tp=2, record_layers=[2, 4, 8], record_dir="/r"), platform="cpu",
                            target_config=MLA_TARGET, environ={}, cpu_cores=[0, 1])
    args = dict(rec[0])
    spec, kv = args.pop("speculative_config"), args.pop("kv_transfer_config")
    assert (args, rec[1], rec[2]) == plain
    assert spec == {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                    "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [2, 4, 8]}}}
    assert kv["kv_connector_extra_config"] == {"shared_storage_path": "/r"}
    assert kv["kv_connector_module_path"] == "kconvert.runners.hidden_states_connector"
    assert kv["kv_connector"] == "CPUCapableHiddenStatesConnector" and kv["kv_role"] == "kv_producer"
    # a draft is a speculative run, never a recording one
    args, _, _ = build_engine_args(_req(record_layers=[1], record_dir="/r"), platform="cpu", environ={})
    assert args["speculative_config"]["method"] == "eagle3" and "kv_transfer_config" not in args


def test_building_engine_args_does_not_import_vllm():
    code = (
        "import sys; from kconvert.engines.live_messages import LiveRequest; "
        "from kconvert.runners.vllm_args import build_engine_args; from kconvert.engines.installed import detect_platform; "
        "detect_platform(); build_engine_args(LiveRequest(target='t', draft='d', prompts=['x']), platform='cpu'); "
        "assert not [m for m in sys.modules if m == 'vllm' or m.startswith('vllm.')], 'vllm imported'; "
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env={"PYTHONPATH": str(REPO)})


def test_draft_overrides_are_written_into_a_patched_copy(tmp_path):
    src = tmp_path / "draft"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"a": 1, "eagle_config": {"x": 1, "y": 2}}))
    (src / "model.safetensors").write_bytes(b"0")
    out = patched_draft_folder(str(src), {"a": 2, "eagle_config": {"y": 3}}, tmp_path / "patched")
    assert json.loads((out / "config.json").read_text()) == {"a": 2, "eagle_config": {"x": 1, "y": 3}}
    assert (out / "model.safetensors").is_symlink()
    assert json.loads((src / "config.json").read_text())["a"] == 1


def test_live_request_round_trips_and_refuses_unknown_fields():
    req = LiveRequest(target="t", draft="d", prompts=["x"], engine_args={"quantization": "fp8"})
    assert LiveRequest.from_dict(req.to_dict()) == req
    with pytest.raises(ValueError, match="unknown live request fields: colour"):
        LiveRequest.from_dict({"target": "t", "colour": "red"})


# ------------------------------------------------------------------------------------------ failure parsing

_CRASH_LOG = """\
INFO 11-30 02:13:20 [x.py:1] starting
Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:00<00:00, 3.1it/s]
(Worker pid=5463) ERROR 11-30 02:13:58 [multiproc_executor.py:1063] Traceback (most recent call last):
(Worker pid=5463) ERROR 11-30 02:13:58 [multiproc_executor.py:1063]   File "llama_eagle3.py", line 394, in compute_logits
(Worker pid=5463) ERROR 11-30 02:13:58 [multiproc_executor.py:1063]     logits_new[:, targets] = logits
(Worker pid=5463) ERROR 11-30 02:13:58 [multiproc_executor.py:1063]     ~~~~~~~~~~^^^^^^^^^^^^
(Worker pid=5463) ERROR 11-30 02:13:58 [multiproc_executor.py:1063] IndexError: index 514 is out of bounds for dimension 0 with size 512
(EngineCore pid=5433) ERROR 11-30 02:13:58 [core.py:1512] RuntimeError: Worker failed with error 'index 514 is out of bounds', please check the stack trace above for the root cause
Traceback (most recent call last):
  File "vllm_worker.py", line 150, in main
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
@@kconvert-error EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""


def test_crash_reason_names_the_root_cause_not_vllms_wrapper():
    err = classify_failure(_CRASH_LOG, 1, timed_out=False, timeout_s=900, stage="generating")
    assert err.exit_code == EXIT_ENGINE
    assert err.message == ("vLLM engine failed (exit 1) (stage: generating): "
                           "IndexError: index 514 is out of bounds for dimension 0 with size 512")
    assert "(Worker) IndexError: index 514 is out of bounds for dimension 0 with size 512" in err.last_lines
    assert "EngineDeadError" in err.last_lines[-1]
    assert not any("%" in ln or "~~~" in ln for ln in err.last_lines)


def test_progress_bars_and_markers_are_not_meaningful():
    text = "a\r 10%|#   | 1/10 [00:01<00:09, 1.0it/s]\n@@kconvert-stage generating\n\nreal line\n"
    assert meaningful_lines(text) == ["real line"]


def test_sigkill_is_reported_as_a_likely_out_of_memory_kill():
    err = classify_failure("loading\n", -9, timed_out=False, timeout_s=900, stage="starting engine")
    assert "SIGKILL" in err.message and "out of memory" in err.message


def test_dead_engine_worker_with_exit_minus_9_is_a_likely_oom():
    log = ("(EngineCore pid=1) ERROR 11-30 02:13:58 [multiproc_executor.py:316] Worker proc VllmWorker-0 died "
           "unexpectedly (exit code: -9), shutting down executor.\n@@kconvert-error EngineDeadError: x\n")
    err = classify_failure(log, 1, timed_out=False, timeout_s=900, stage="generating")
    assert "SIGKILL" in err.message and "out of memory" in err.message


def test_memory_refusal_is_reported_as_out_of_memory():
    log = ("(Worker pid=9) ERROR 11-30 02:13:58 [m.py:1] ValueError: Available memory on node 0 (10.11/11.46 GiB) "
           "on kv cache allocation is less than requested memory for kv (4096.0 GiB). Decrease ...\n"
           "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
    err = classify_failure(log, 1, timed_out=False, timeout_s=900, stage="starting engine")
    assert err.message.startswith("vLLM engine ran out of memory (stage: starting engine): ValueError: Available")


def test_error_lines_are_capped():
    text = "\n".join(f"ValueError: number {i}" for i in range(100))
    assert len(error_lines(text)) <= 20


# ------------------------------------------------------------------------------------------ live runs

live = pytest.mark.live


class ProcessWatch:
    """The processes of one run: the worker (its pid is its process group) and every descendant seen while it
    ran. Other sessions on the machine may run vLLM engines too, so only these are checked afterwards."""

    def __init__(self) -> None:
        self.worker: int | None = None
        self.seen: dict[int, object] = {}
        self.stages: list[str] = []

    def on_spawn(self, pid: int) -> None:
        import threading

        import psutil

        self.worker = pid
        self.seen[pid] = psutil.Process(pid)
        # Progress events alone can miss an engine that crashes between two of them (seen in CI: the
        # EngineCore of the absolute-d2t draft started and died before the next event), so poll too.
        threading.Thread(target=self._poll, daemon=True).start()

    def _poll(self) -> None:
        import psutil

        worker = self.seen[self.worker]
        while True:
            self.snapshot()
            try:
                if not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE:
                    return
            except psutil.Error:
                return
            time.sleep(0.05)

    def snapshot(self) -> None:
        import psutil

        try:
            for p in psutil.Process(self.worker).children(recursive=True):
                self.seen.setdefault(p.pid, p)
        except psutil.Error:
            pass

    def progress(self, stage: str) -> None:
        self.stages.append(stage)
        self.snapshot()

    def alive(self) -> list[str]:
        import os

        import psutil

        left = []
        for p in list(self.seen.values()):
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{p.pid} {' '.join(p.cmdline())[:80]}")
            except psutil.Error:
                continue
        for p in psutil.process_iter(["pid", "status"]):
            try:
                if os.getpgid(p.pid) == self.worker and p.info["status"] != psutil.STATUS_ZOMBIE:
                    left.append(f"{p.pid} (in the worker's group)")
            except (psutil.Error, OSError):
                continue
        return left

    def assert_nothing_left(self) -> None:
        assert self.worker is not None
        deadline = time.monotonic() + 5  # the kernel may take a moment to let go of a SIGKILLed process
        while (left := self.alive()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"processes left behind: {left}"


@pytest.fixture(scope="module")
def vllm_available():
    pytest.importorskip("vllm")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, vllm_available):
    root = tmp_path_factory.mktemp("tiny")
    target, draft = live_factories.build_pair(root)
    return {
        "target": str(target),
        "draft": str(draft),
        "draft_d2t_absolute": str(
            live_factories.build_draft(root / "draft_abs", target, draft_vocab_size=256, d2t_absolute=True)
        ),
    }


@pytest.fixture(scope="module")
def smoke_prompts():
    return load_prompts("_smoke")[1]


def _run(target, draft, prompts, watch: ProcessWatch | None = None, max_tokens: int = 32, **kw):
    from kconvert.runners.vllm_offline import run_vllm

    watch = watch or ProcessWatch()
    watch.stages = []
    result = run_vllm(LiveRequest(target=target, draft=draft, prompts=prompts, max_tokens=max_tokens, **kw),
                      progress=watch.progress, on_spawn=watch.on_spawn)
    watch.assert_nothing_left()
    return result, watch.stages


@pytest.fixture(scope="module")
def spec_run(tiny, smoke_prompts):
    return _run(tiny["target"], tiny["draft"], smoke_prompts)


@live
def test_speculative_run_reports_the_engines_own_counters(spec_run):
    result, stages = spec_run
    c = result.counters
    assert c.drafts > 0 and c.draft_tokens > 0 and c.accepted > 0
    assert len(c.accepted_per_pos) == 3 and sum(c.accepted_per_pos) == c.accepted
    assert c.draft_tokens == 3 * c.drafts
    assert engine_counters(result.raw_metrics) == {
        "drafts": c.drafts, "draft_tokens": c.draft_tokens, "accepted": c.accepted,
        "accepted_per_pos": c.accepted_per_pos}
    acc = result.acceptance()
    indep = engine_counters(result.raw_metrics)
    # vLLM's definitions on the engine's own counters: AL = 1 + accepted / drafts (bonus token), rate =
    # accepted / draft tokens, per position = accepted_i / drafts
    assert acc["mean_acceptance_length"] == pytest.approx(1 + indep["accepted"] / indep["drafts"])
    assert acc["acceptance_rate"] == pytest.approx(indep["accepted"] / indep["draft_tokens"])
    assert acc["per_position"] == pytest.approx([a / indep["drafts"] for a in indep["accepted_per_pos"]])
    # The factory draft is right at the first position and (nearly) never after it: floor 0.8, measured 1.000
    # (128 of 128 drafts at position 0 on the smoke set, tests/data/vllm_metrics_after.txt)
    assert acc["per_position"][0] > 0.8
    assert stages == ["starting engine", "engine ready", "generating", "done"]


@live
def test_speculative_run_records_what_the_engine_ran_with(spec_run):
    result, _ = spec_run
    assert result.engine == "vllm" and result.engine_version.startswith("0.")
    # The platform vLLM picked is the one kconvert detects; the CPU settings are applied only there (a GPU build
    # runs the same test without them).
    assert result.platform == detect_platform()
    if result.platform == "cpu":
        assert result.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
        assert result.engine_args["enforce_eager"] is True
    else:
        assert "VLLM_CPU_KVCACHE_SPACE" not in result.env and "enforce_eager" not in result.engine_args
    assert result.engine_args["speculative_config"]["method"] == "eagle3"
    assert result.num_prompts == 8 and len(result.output_token_ids) == 8 and len(result.output_texts) == 8
    assert all(0 < len(ids) <= 32 for ids in result.output_token_ids)
    assert result.chat_template_applied
    assert result.timings.engine_start_s > 0 and result.timings.generate_s > 0
    assert result.timings.total_s >= result.timings.engine_start_s + result.timings.generate_s
    json.dumps(result.to_dict())
    assert LiveResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def _sockets_in_tmp() -> set[str]:
    """The socket files in the temp folder (vLLM names its ZMQ ipc sockets by uuid4 there by default)."""
    import stat
    import tempfile

    out = set()
    with os.scandir(tempfile.gettempdir()) as it:
        for e in it:
            try:
                if stat.S_ISSOCK(e.stat(follow_symlinks=False).st_mode):
                    out.add(e.name)
            except OSError:
                continue
    return out


@live
def test_absolute_d2t_draft_crashes_with_the_engines_error_and_leaves_nothing(tiny, smoke_prompts):
    watch = ProcessWatch()
    before = _sockets_in_tmp()
    with pytest.raises(EngineError) as exc:
        _run(tiny["target"], tiny["draft_d2t_absolute"], smoke_prompts, watch)
    err = exc.value
    # nothing left on disk either but the log the hint names: no request, no draft copy, no engine socket (those
    # live in the run's folder, VLLM_RPC_BASE_PATH, not in the temp folder)
    log = Path(err.hint.removeprefix("full engine log: "))
    assert sorted(p.name for p in log.parent.iterdir()) == ["engine.log"]
    assert _sockets_in_tmp() - before == set()
    assert err.exit_code == EXIT_ENGINE
    assert "IndexError" in err.message and "out of bounds" in err.message
    assert any("IndexError" in ln and "out of bounds" in ln for ln in err.last_lines)
    assert 0 < len(err.last_lines) <= 20
    assert len(watch.seen) >= 2  # vLLM's EngineCore had started
    watch.assert_nothing_left()


@live
def test_timeout_raises_engine_error_and_leaves_nothing(tiny, smoke_prompts):
    watch = ProcessWatch()
    t0 = time.monotonic()
    with pytest.raises(EngineError, match=r"timed out after 5 s"):
        _run(tiny["target"], tiny["draft"], smoke_prompts, watch, timeout_s=5)
    assert time.monotonic() - t0 < 30
    watch.assert_nothing_left()


@live
def test_kv_cache_beyond_physical_memory_is_an_out_of_memory_engine_error(tiny, smoke_prompts):
    # vLLM's CPU worker refuses at load: "Available memory on node 0 (... GiB) on kv cache allocation is less
    # than requested memory for kv (4096.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, ..."
    if detect_platform() != "cpu":
        pytest.skip("VLLM_CPU_KVCACHE_SPACE sizes the KV cache of vLLM's CPU platform only; a GPU build sizes it "
                    "from gpu_memory_utilization and never reads it")
    watch = ProcessWatch()
    with pytest.raises(EngineError) as exc:
        _run(tiny["target"], tiny["draft"], smoke_prompts[:1], watch, env={"VLLM_CPU_KVCACHE_SPACE": "4096"})
    assert exc.value.exit_code == EXIT_ENGINE
    assert exc.value.message.startswith("vLLM engine ran out of memory")
    assert "less than requested memory for kv" in exc.value.message
    watch.assert_nothing_left()


@live
def test_interrupt_while_the_engine_runs_kills_every_engine_process(tiny, smoke_prompts):
    watch = ProcessWatch()

    def interrupt_when_ready(stage: str) -> None:
        watch.progress(stage)
        if stage == "engine ready":
            raise KeyboardInterrupt

    from kconvert.runners.vllm_offline import run_vllm

    with pytest.raises(KeyboardInterrupt):
        run_vllm(LiveRequest(target=tiny["target"], draft=tiny["draft"], prompts=smoke_prompts, max_tokens=256),
                 progress=interrupt_when_ready, on_spawn=watch.on_spawn)
    assert len(watch.seen) >= 2  # the worker and vLLM's EngineCore were alive
    watch.assert_nothing_left()
