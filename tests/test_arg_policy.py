"""The engine-argument policy (kconvert/engines/arg_policy.py, issue #46) against vLLM's own code, and every path that
reaches an engine going through it.

- Enumeration: every field of `EngineArgs` and `SpeculativeConfig` and every `LLM.__init__` parameter of each
  release kconvert has rows for (0.32.0 installed; 0.33.0 and 0.34.0 read from their own Python files,
  tests/vllm_oracle/releases.py), read statically with `ast`, is classified; every value of their acceptance
  Literals (RejectionSampleMethod, DraftSampleMethod) is classified; a recorded key's default and where the engine
  keeps its resolved value are the release's own. A key a new release adds fails here until it is classified.
- vLLM's own /server_info answers (tests/data/vllm_server_info_*.json, recorded by
  tests/vllm_oracle/record_server_info.py with vLLM's own handler) hold every recorded key at its engine_path.
- Every refused key and value is refused, exit 2, on every path: the CLI (dry run and live), `kconvert.verify`,
  the matrix, the trace recorder, and the function every engine run's arguments come from (build_engine_args).
  No engine is started: a live path that got past the policy would reach `_spawn_and_wait`, which raises here.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kconvert.engines import arg_policy as P
from kconvert.engines.live_messages import LiveRequest
from kconvert.errors import UsageError
from tests.vllm_oracle.releases import RELEASES
from tests.vllm_static import (dataclass_fields, engine_args_source, init_params, literal_default, literal_values,
                               vllm_config_attrs)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
DRAFT = str(ROOT / "examples" / "tiny" / "drafts" / "mla-torchspec")  # passes the static checks on the tiny target
TARGET = str(ROOT / "examples" / "tiny" / "target")
SPEC = "config/speculative.py"


def engine_keys(version: str) -> set[str]:
    return set(dataclass_fields(version, "engine/arg_utils.py", "EngineArgs")) | set(
        init_params(version, "entrypoints/llm.py", "LLM"))


def spec_keys(version: str) -> set[str]:
    return set(dataclass_fields(version, SPEC, "SpeculativeConfig"))


# ------------------------------------------------------------------------------------------ enumeration


@pytest.mark.parametrize("version", RELEASES)
def test_every_key_of_the_release_is_classified(version):
    unclassified = sorted(engine_keys(version) - set(P.ENGINE_ARGS))
    assert not unclassified, f"vLLM {version} EngineArgs / LLM() keys without a class in arg_policy: {unclassified}"
    unclassified = sorted(spec_keys(version) - set(P.SPECULATIVE_CONFIG))
    assert not unclassified, f"vLLM {version} SpeculativeConfig keys without a class in arg_policy: {unclassified}"
    for table in (P.ENGINE_ARGS, P.SPECULATIVE_CONFIG, P.ENVIRONMENT):
        assert all(rule.kind in P.KINDS and rule.why for rule in table.values())


def test_every_vllm_row_has_its_release_enumerated_here():
    from kconvert.engines.expectations import KNOWN

    rows = {v.split("/")[0] for v in KNOWN["vllm"]}
    assert rows == {".".join(r.split(".")[:2]) for r in RELEASES}, "add the row's release to tests/vllm_oracle/releases.py"


def test_the_tables_hold_no_key_that_no_release_has():
    every_engine = set().union(*(engine_keys(v) for v in RELEASES))
    every_spec = set().union(*(spec_keys(v) for v in RELEASES))
    assert sorted(set(P.ENGINE_ARGS) - every_engine) == []
    assert sorted(set(P.SPECULATIVE_CONFIG) - every_spec) == []


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("key, literal", [("rejection_sample_method", "RejectionSampleMethod"),
                                          ("draft_sample_method", "DraftSampleMethod")])
def test_every_acceptance_mode_of_the_release_is_classified(version, key, literal):
    rule = P.SPECULATIVE_CONFIG[key]
    values = literal_values(version, SPEC, literal)
    unknown = [v for v in values if v not in (rule.values or ()) and v not in rule.refused_values]
    assert not unknown, f"vLLM {version} {literal} values kconvert has not classified: {unknown}"
    # the default is a value the engine accepts, and the one the report shows when nothing is given
    assert literal_default(dataclass_fields(version, SPEC, "SpeculativeConfig")[key]) == rule.default
    assert rule.refusal(rule.default) is None


def test_forced_and_lossy_acceptance_are_refused_by_name():
    spec = P.SPECULATIVE_CONFIG
    for value in ("synthetic", "SYNTHETIC", " fly"):
        assert spec["rejection_sample_method"].refusal(value)
    assert spec["rejection_sample_method"].refusal("block") is None
    assert spec["synthetic_acceptance_length"].kind == spec["synthetic_acceptance_rates"].kind == P.REFUSED
    assert P.ENVIRONMENT["SGLANG_SIMULATE_ACC_LEN"].kind == P.REFUSED
    assert P.ENVIRONMENT["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"].kind == P.REFUSED
    assert P.OTHER_ENGINE_KNOBS["atom"]["--spec-decode-acceptance-length"].kind == P.REFUSED
    # SGLang reads <= 0 as off (srt/speculative/spec_utils.py: "turn off if < 0", `SIMULATE_ACC_LEN > 0`)
    assert P.env_refusals({"SGLANG_SIMULATE_ACC_LEN": "-1"}) == []
    assert P.env_refusals({"SGLANG_SIMULATE_ACC_LEN": "3.24"})


@pytest.mark.parametrize("version", RELEASES)
def test_a_recorded_key_is_read_where_the_release_keeps_it(version):
    heads = set(vllm_config_attrs(version).values())
    fields = dataclass_fields(version, "engine/arg_utils.py", "EngineArgs")
    for key, rule in P.ENGINE_ARGS.items():
        if rule.kind != P.RECORDED or key not in fields:
            continue
        source = engine_args_source(version, key)
        if source is not None:  # EngineArgs takes its default from that config field: the engine's value is there
            assert rule.engine_path == source, (version, key)
        if rule.engine_path:
            assert rule.engine_path.split(".")[0] in heads, (version, key, rule.engine_path)
    spec_fields = spec_keys(version)
    for key, rule in P.SPECULATIVE_CONFIG.items():
        if rule.kind == P.RECORDED and rule.engine_path and key in spec_fields:
            assert rule.engine_path == f"speculative_config.{key}"


@pytest.mark.parametrize("variant", ["standard", "synthetic"])
def test_vllms_own_server_dump_holds_every_recorded_key(variant):
    """vLLM 0.32's /server_info answer (its own handler, tests/vllm_oracle/record_server_info.py): the worker reads
    the same dump, so every recorded key with an engine_path is shown as the engine resolved it."""
    body = json.loads((DATA / f"vllm_server_info_{variant}.json").read_text())
    settings = P.settings_from_config(body["vllm_config"], None, None)
    missing = []
    for table, prefix in ((P.ENGINE_ARGS, ""), (P.SPECULATIVE_CONFIG, "speculative_config.")):
        for key, rule in table.items():
            if rule.kind != P.RECORDED or not rule.engine_path:
                continue
            node = body["vllm_config"]
            for part in rule.engine_path.split("."):
                node = node[part] if isinstance(node, dict) and part in node else KeyError
            if node is KeyError and key in spec_keys("0.32.0") | engine_keys("0.32.0"):
                missing.append(rule.engine_path)
            elif node is not KeyError and node is not None:
                assert settings[prefix + key] == node
    assert missing == []
    spec = body["vllm_config"]["speculative_config"]
    assert settings["speculative_config.draft_sample_method"] == spec["draft_sample_method"] == "greedy"
    assert settings["speculative_config.rejection_sample_method"] == spec["rejection_sample_method"] == variant
    forced = P.forced_acceptance(body["vllm_config"], body["vllm_env"])
    # vLLM resolves synthetic_acceptance_length into synthetic_acceptance_rates and clears the length
    assert bool(forced) is (variant == "synthetic")
    if forced:
        assert any("rejection_sample_method" in f for f in forced)
        assert any("synthetic_acceptance_rates" in f for f in forced)


# ------------------------------------------------------------------------------------------ every path refuses


def refused_cases() -> list[tuple[str, str, object]]:
    """(where, key, value) for every refused key and value of the tables: `engine` for an engine argument, `spec`
    for a speculative_config key."""
    out: list[tuple[str, str, object]] = []
    for where, table in (("engine", P.ENGINE_ARGS), ("spec", P.SPECULATIVE_CONFIG)):
        for key, rule in table.items():
            if rule.kind == P.REFUSED:
                out.append((where, key, "x"))
            out += [(where, key, bad) for bad in rule.refused_values]
            if rule.values is not None:
                out.append((where, key, "a-value-no-release-has"))
    out.append(("engine", "hf_overrides", {"architectures": ["LlamaForCausalLM"]}))
    out.append(("engine", "not_an_engine_argument", 1))
    out.append(("spec", "not_a_speculative_key", 1))
    return out


CASES = refused_cases()


def _settings(where: str, key: str, value: object):
    from kconvert.results.verify import VerifySettings

    if where == "engine":
        return VerifySettings(engine_args={key: value}), None
    return VerifySettings(), json.dumps({"model": "/models/kimi-eagle3", "num_speculative_tokens": 3, key: value})


@pytest.fixture
def no_engine(monkeypatch):
    """A live path that got past the policy would start vLLM here; the test fails instead."""
    import kconvert.runners.vllm_offline as off

    def refuse(*a, **k):
        raise AssertionError("an engine would have started")

    monkeypatch.setattr(off, "_spawn_and_wait", refuse)
    monkeypatch.setattr(off, "installed_version", lambda name: "0.32.0")


@pytest.mark.parametrize("where, key, value", CASES, ids=[f"{w}-{k}-{v}" for w, k, v in CASES])
def test_library_verify_refuses_every_refused_key_dry_run_and_live(where, key, value, no_engine):
    from kconvert.commands.verify import verify

    st, line = _settings(where, key, value)
    for dry in (True, False):
        with pytest.raises(UsageError) as e:
            verify(DRAFT, TARGET, settings=st, speculative_config=line, dry_run=dry)
        assert "refused before any engine starts" in e.value.message and key in e.value.message


@pytest.mark.parametrize("where, key, value", [c for c in CASES if c[0] == "spec"],
                         ids=[f"{k}-{v}" for w, k, v in CASES if w == "spec"])
def test_a_speculative_key_given_as_engine_arg_is_refused_too(where, key, value, no_engine):
    from kconvert.commands.verify import VerifySettings, verify

    with pytest.raises(UsageError) as e:
        verify(DRAFT, TARGET, settings=VerifySettings(engine_args={"speculative_config": {key: value}}), dry_run=True)
    assert key in e.value.message


@pytest.mark.parametrize("key", sorted(P.KCONVERT_SPEC_KEYS))
def test_engine_arg_speculative_config_cannot_replace_the_draft_or_kconverts_settings(key):
    """`--engine-arg speculative_config=...` used to replace kconvert's whole speculative_config (the draft too)."""
    from kconvert.runners.vllm_args import build_engine_args

    req = LiveRequest(target=TARGET, draft=DRAFT, prompts=["x"], engine_args={"speculative_config": {key: 1}})
    with pytest.raises(UsageError, match=key):
        build_engine_args(req, platform="cpu")
    # an allowed key joins kconvert's config; the draft, method and k stay kconvert's
    ok = LiveRequest(target=TARGET, draft=DRAFT, prompts=["x"],
                     engine_args={"speculative_config": {"draft-sample-method": "probabilistic"}})
    args, _, _ = build_engine_args(ok, platform="cpu")
    assert args["speculative_config"]["model"] == DRAFT and args["speculative_config"]["method"] == "eagle3"
    assert args["speculative_config"]["draft_sample_method"] == "probabilistic"


def test_the_lossless_baseline_runs_without_the_engine_arg_speculative_config():
    from kconvert.runners.vllm_args import build_engine_args

    base = LiveRequest(target=TARGET, prompts=["x"], engine_args={"speculative_config": {"enforce_eager": True}})
    args, _, _ = build_engine_args(base, platform="cpu")
    assert "speculative_config" not in args


@pytest.mark.parametrize("argv, code, fragments", [
    # the dry runs, each of which exited 0
    (["--speculative-config", '{"model": "/models/kimi-eagle3", "num_speculative_tokens": 3, '
      '"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.24}'], 2,
     ["rejection_sample_method=synthetic", "synthetic_acceptance_length=3.24", "forced acceptance"]),
    (["--engine-arg", 'speculative_config={"rejection_sample_method": "synthetic", '
      '"synthetic_acceptance_length": 3.24}'], 2, ["forced acceptance"]),
    (["--engine-arg", 'speculative_config={"model": "/etc", "method": "eagle3", "num_speculative_tokens": 3}'], 2,
     ["model=/etc", "replaces the draft under test"]),
    (["--engine-arg", "model=/other/target"], 2, ["model=/other/target", "replaces the target under test"]),
    (["--engine-arg", "trust_remote_code=true"], 2, ["trust_remote_code", "--trust-remote-code"]),
    (["--engine-arg", "rejection-sample-method=synthetic"], 2, ["not an engine argument"]),
])
def test_cli_dry_run_refuses_what_would_fake_the_figure(capsys, argv, code, fragments):
    from kconvert.cli import main

    capsys.readouterr()
    rc = main(["verify", DRAFT, "--target", TARGET, "--dry-run", *argv])
    err = capsys.readouterr().err.replace("\n", " ")
    assert rc == code, err
    for fragment in fragments:
        assert fragment in err


def test_matrix_refuses_before_any_cell_runs(no_engine):
    from kconvert.matrix import matrix

    with pytest.raises(UsageError, match="synthetic"):
        matrix([DRAFT], target=TARGET, live=True, cache="off", isolated=True,
               engine_args={"speculative_config": {"rejection_sample_method": "synthetic"}})
    with pytest.raises(UsageError, match="SGLANG_SIMULATE_ACC_LEN"):
        matrix([DRAFT], target=TARGET, live=True, cache="off", isolated=True,
               ray_runtime_env='{"env_vars": {"SGLANG_SIMULATE_ACC_LEN": "3.24"}}')


@pytest.mark.parametrize("engine_args, env, fragment", [
    ({"model": "/other"}, {}, "replaces the target"),
    ({"trust_remote_code": True}, {}, "--trust-remote-code"),
    ({"speculative_config": {"num_speculative_tokens": 1}}, {}, "recording run"),
    ({}, {"SGLANG_SIMULATE_ACC_LEN": "2"}, "forced acceptance"),
])
def test_the_trace_recorder_refuses_too(tmp_path, engine_args, env, fragment, no_engine):
    from kconvert.trace import trace
    from kconvert.trace.request import TraceRequest

    req = TraceRequest(target=TARGET, out=str(tmp_path / "t"), engine="vllm", engine_args=engine_args, env=env)
    with pytest.raises(UsageError, match=fragment):
        trace(req)
    assert not (tmp_path / "t").exists()


def test_trace_takes_trust_remote_code_as_its_flag_only(tmp_path):
    from kconvert.trace import trace
    from kconvert.trace.request import TraceRequest

    with pytest.raises(UsageError, match="--engine vllm"):
        trace(TraceRequest(target=TARGET, out=str(tmp_path / "t"), trust_remote_code=True))


# ------------------------------------------------------------------------------------------ recorded identity


def test_a_dry_run_shows_the_sampling_methods_the_engine_would_use(capsys):
    from kconvert.commands.verify import verify
    from kconvert.report.markdown import render_markdown_section

    vr = verify(DRAFT, TARGET, dry_run=True)
    doc = vr.to_dict()
    settings = doc["dry_run"]["engine_settings"]
    # vLLM's defaults, read from its dataclass above (test_every_acceptance_mode_of_the_release_is_classified)
    assert settings["speculative_config.draft_sample_method"] == "greedy"
    assert settings["speculative_config.rejection_sample_method"] == "standard"
    assert settings["speculative_config.method"] == "eagle3"
    line = doc["dry_run"]["serve_line"]
    spec = json.loads(line.split("--speculative-config ")[1].split("' ")[0].strip("'"))
    for key, value in settings.items():
        if key.startswith("speculative_config.") and key != "speculative_config.model":
            assert spec[key.split(".", 1)[1]] == value
    md = render_markdown_section(doc)
    for key in settings:
        assert f"`{key}`" in md


def test_the_live_block_markdown_card_and_serve_line_show_every_recorded_key_as_the_engine_got_it():
    """A live result whose engine_settings come from vLLM's own /server_info dump of a config built for the same
    line (what the worker reads, kconvert/runners/vllm_worker.py config_dump)."""
    from kconvert.commands.verify import verify
    from kconvert.engines.live_messages import LiveCounters, LiveResult, LiveTimings
    from kconvert.hub.card import serve_commands
    from kconvert.report.markdown import render_markdown_section

    body = json.loads((DATA / "vllm_server_info_standard.json").read_text())
    vr = verify(DRAFT, TARGET, dry_run=True)
    args = vr.planned["engine_args"]
    env = {"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_BATCH_INVARIANT": "1"}
    settings = P.settings_from_config(body["vllm_config"], args, env)
    vr.planned = None
    vr.live = LiveResult(engine="vllm", engine_version="0.32.0", engine_args=args, env=env,
                         counters=LiveCounters(10, 30, 20, [9, 7, 4]), output_token_ids=[], output_texts=[],
                         timings=LiveTimings(), num_prompts=1, num_speculative_tokens=3, engine_settings=settings)
    vr.acceptance = vr.live.acceptance()
    doc = vr.to_dict()
    live = doc["live"]
    assert live["engine_settings"] == settings and settings["$VLLM_USE_V2_MODEL_RUNNER"] == "0"
    spec = json.loads(live["serve_line"].split("--speculative-config ")[1].split("' ")[0].strip("'"))
    card_spec = json.loads(serve_commands(doc, "org/draft")["vllm"].split("--speculative-config '")[1].split("'")[0])
    md = render_markdown_section(doc)
    for key, value in settings.items():
        assert f"`{key}`" in md
        if key.startswith("speculative_config.") and key != "speculative_config.model":
            assert spec[key.split(".", 1)[1]] == value == card_spec[key.split(".", 1)[1]]
    assert spec["rejection_sample_method"] == "standard" and spec["draft_sample_method"] == "greedy"
    # the recorded environment, in both lines (the card's built by the same builder, kconvert.engines.serve_lines)
    card = serve_commands(doc, "org/draft")["vllm"]
    for line in (card, live["serve_line"]):
        assert line.startswith("VLLM_BATCH_INVARIANT=1 VLLM_USE_V2_MODEL_RUNNER=0 vllm serve "), line


def test_the_policy_document_names_every_refused_and_recorded_key():
    doc = (ROOT / "docs" / "engine-policy.md").read_text(encoding="utf-8")
    missing = []
    for prefix, table in (("", P.ENGINE_ARGS), ("speculative_config.", P.SPECULATIVE_CONFIG), ("", P.ENVIRONMENT)):
        for key, rule in table.items():
            if rule.kind == P.REFUSED and f"`{prefix}{key}`" not in doc:
                missing.append(prefix + key)
            if rule.kind == P.RECORDED and f"`{key}`" not in doc:
                missing.append(prefix + key)
            missing += [f"{prefix}{key}={v}" for v in rule.refused_values if f"`{prefix}{key}={v}`" not in doc]
    assert missing == [], "docs/engine-policy.md does not name: " + ", ".join(missing)
