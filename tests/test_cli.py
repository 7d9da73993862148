"""First contact: usage mistakes are usage errors (exit 2, typer's usage message), a bug is an internal error (exit
70), the library API works on every call with real signatures and typed results, machine output everywhere,
no contradictions in fix and acceptance, a strict gate (--fail-on warning) and exact next-step commands."""
from __future__ import annotations

import inspect as pyinspect
import json
import os
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest

import kconvert
from kconvert.cli import main
from kconvert.errors import EXIT_INTERNAL, SelfCheckError, UsageError
from kconvert.schemas import validate
from tests.factories import make_draft, make_target

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    for var in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE", "KCONVERT_OUTPUT_FORMAT", "KCONVERT_DEBUG"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A work folder with the tiny Kimi-shaped `target`, a `bad` draft (K404, fixable), a `warn` draft (K902
    warning only) and a `clean` one, named by relative paths. The default row is Model Runner V1's, as a user gets
    it with VLLM_USE_V2_MODEL_RUNNER=0: `bad` keeps its ids in eagle_config only, which V1 feeds one stream early
    (K404) and V2 does not read at all (it feeds its defaults, the trained streams: a K405 warning), and the
    default runner otherwise follows the machine (V1 on the CPU build, V2 where no vLLM is installed)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    make_target(tmp_path / "target")
    make_draft(tmp_path / "bad", "specforge")
    make_draft(tmp_path / "warn", "torchspec", config=lambda c: c.pop("rope_scaling", None))
    make_draft(tmp_path / "clean", "torchspec")
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def cli(*argv: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real entry point in a child process: exit status and streams as a shell sees them."""
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    e.pop("KCONVERT_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "kconvert", *argv], capture_output=True, text=True, cwd=cwd, env=e,
                          timeout=120)


# ------------------------------------------------------------------------------------------------ usage errors

@pytest.mark.parametrize("argv, fragment", [
    (["inspec", "x"], "No such command 'inspec'"),
    (["inspect", "x", "--bogus"], "No such option: --bogus"),
    (["push", "x"], "Missing argument"),
    (["fix", "x", "--cast"], "requires an argument"),
])
def test_usage_mistakes_print_typers_usage_and_exit_2(argv, fragment):
    r = cli(*argv)
    assert r.returncode == 2, r.stderr
    assert fragment in r.stderr
    if argv[-1] != "--cast":  # typer prints an option's missing value without the usage line
        assert "Usage: kconvert" in r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr


def test_plain_kconvert_prints_the_help_and_exits_2():
    r = cli()
    assert r.returncode == 2 and "Usage: kconvert" in r.stdout + r.stderr and "inspect" in r.stdout + r.stderr
    assert "internal error" not in r.stderr


def test_usage_error_under_json_also_prints_a_json_error_object():
    r = cli("inspect", "x", "--bogus", "--json")
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    validate(doc, "error")
    assert doc["exit_code"] == 2 and doc["error"]["type"] == "UsageError" and "--bogus" in doc["error"]["message"]


def test_a_bug_is_an_internal_error_exit_70_one_line_with_the_debug_hint(ws, capsys, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("boom")

    import importlib

    # the implementation the CLI calls (kconvert.commands.inspect), not the package's re-export of it
    monkeypatch.setattr(importlib.import_module("kconvert.commands.inspect"), "inspect", boom)
    rc, out, err = run(capsys, "inspect", "clean")
    assert rc == EXIT_INTERNAL == 70
    lines = err.strip().splitlines()
    assert lines[0] == "error: internal error: RuntimeError: boom" and "KCONVERT_DEBUG=1" in lines[1]
    assert len(lines) == 2 and "Traceback" not in err
    rc, out, err = run(capsys, "inspect", "clean", "--json")
    doc = json.loads(out)
    validate(doc, "error")
    assert rc == doc["exit_code"] == 70 and doc["error"]["type"] == "InternalError"
    monkeypatch.setenv("KCONVERT_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["inspect", "clean"])


def test_a_bad_input_is_still_exit_2_not_an_internal_error(ws, capsys):
    rc, _, err = run(capsys, "inspect", "no-such-folder")
    assert rc == 2 and "internal error" not in err


def test_help_lists_the_exit_codes_and_the_output_formats():
    r = cli("--help", env={"COLUMNS": "200"})
    assert "70 internal error" in r.stdout
    r = cli("inspect", "--help", env={"COLUMNS": "200"})
    for fmt in ("full", "concise", "github", "gitlab", "json", "junit", "sarif"):
        assert fmt in r.stdout
    assert "--fail-on" in r.stdout


def test_typer_is_pinned_to_the_tested_range():
    import tomllib

    import typer

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(d for d in deps if d.startswith("typer"))
    assert spec == "typer>=0.29,<0.30" and typer.__version__.startswith("0.29.")


# ------------------------------------------------------------------------------------------------ library API

def test_library_functions_survive_importing_their_modules_and_work_twice(ws, capsys, monkeypatch):
    import importlib

    for name in ("kconvert.commands.inspect", "kconvert.commands.fix", "kconvert.commands.verify",
                 "kconvert.commands.push"):
        importlib.import_module(name)
    for name in ("inspect", "fix", "verify", "push"):
        fn = getattr(kconvert, name)
        assert pyinspect.isfunction(fn) and fn.__doc__ and len(fn.__doc__) > 200, name
    # --- inspect, twice; to_dict() is the --json report
    monkeypatch.setattr(sys.modules["kconvert.results.inspection"], "_now", lambda: "2026-01-01T00:00:00+00:00")
    a = kconvert.inspect("bad", target="target")
    b = kconvert.inspect("bad", target="target")
    assert isinstance(a, kconvert.InspectResult) and a.verdict == b.verdict == "fail" and a.exit_code == 1
    _, out, _ = run(capsys, "inspect", "bad", "--target", "target", "--json")
    assert a.to_dict() == b.to_dict() == json.loads(out)
    # --- fix, twice
    f1 = kconvert.fix("bad", "out1", target="target")
    f2 = kconvert.fix("bad", "out2", target="target")
    assert isinstance(f1, kconvert.FixResult) and f1.verdict == f2.verdict == "pass" and f1.written == Path("out1")
    _, out, _ = run(capsys, "fix", "bad", "-o", "out3", "--target", "target", "--json")
    cli_doc, lib_doc = json.loads(out), f1.to_dict()
    assert cli_doc["fix"]["output"] == "out3" and lib_doc["fix"]["output"] == "out1"
    for d in (cli_doc, lib_doc):
        d["fix"]["output"] = None
        d["next_steps"] = [s["command"].replace("out3", "OUT").replace("out1", "OUT") for s in d["next_steps"]]
    assert lib_doc == cli_doc
    # --- verify, twice, through its static path (no engine: the static error stops it)
    v1 = kconvert.verify("bad", "target")
    v2 = kconvert.verify("bad", "target")
    assert isinstance(v1, kconvert.VerifyResult) and v1.static_blocked and v1.verdict == v2.verdict == "fail"
    rc, out, _ = run(capsys, "verify", "bad", "--target", "target", "--json")
    assert rc == 1
    assert {k: v for k, v in v1.to_dict().items() if k != "subject"} == {
        k: v for k, v in json.loads(out).items() if k != "subject"}
    validate(v1.to_dict(), "report")


def test_library_push_twice_against_the_loopback_hub(tmp_path, capsys, monkeypatch):
    from tests.test_push import REPO, FakeHub, make_checkpoint, make_report

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)
    folder = make_checkpoint(tmp_path / "draft")
    report = make_report(folder)
    with FakeHub() as hub:
        r1 = kconvert.push(folder, REPO, report=report, endpoint=hub.url, token="hf_x")
        r2 = kconvert.push(folder, REPO, report=report, endpoint=hub.url, token="hf_x")
    assert isinstance(r1, kconvert.PushResult) and r1.verdict == r2.verdict == "pass"
    assert r1.commit_oid and r2.commit_oid and r1.to_dict()["verdict"] == "pass"
    assert r1.to_dict()["operations"] == r2.to_dict()["operations"]


def test_library_names_are_the_implementations_re_exported():
    """`kconvert.inspect` and the others are the command modules' own functions and classes (no wrapper whose
    parameters could drift), and no module of the package takes a public name (`kconvert/commands/` holds them)."""
    from kconvert.commands.fix import fix
    from kconvert.commands.inspect import inspect
    from kconvert.commands.push import PushResult, push
    from kconvert.commands.verify import verify
    from kconvert.results.fix import FixResult
    from kconvert.results.inspect_result import InspectResult
    from kconvert.results.thresholds import Thresholds
    from kconvert.results.verify import VerifyResult, VerifySettings
    from kconvert.rules import Decisions, Options

    expected = {"inspect": inspect, "fix": fix, "verify": verify, "push": push, "InspectResult": InspectResult,
                "FixResult": FixResult, "VerifyResult": VerifyResult, "VerifySettings": VerifySettings,
                "PushResult": PushResult, "Decisions": Decisions, "Options": Options, "Thresholds": Thresholds}
    assert set(kconvert.__all__) == set(expected) | {"__version__"}
    for name, obj in expected.items():
        assert getattr(kconvert, name) is obj, name
    assert type(kconvert) is types.ModuleType  # no module-class swapping
    package = Path(kconvert.__file__).parent
    for name in ("inspect", "fix", "verify", "push"):
        assert not (package / f"{name}.py").exists() and not (package / name).exists(), f"a module {name} shadows"


# ------------------------------------------------------------------------------------------------ fix

def test_fix_only_an_unknown_id_is_refused_with_the_list(ws, capsys):
    rc, out, err = run(capsys, "fix", "bad", "-o", "out", "--target", "target", "--only", "K999")
    assert rc == 2 and "K999" in err and "K404" in err and "known ids:" in err
    assert not Path("out").exists()
    with pytest.raises(UsageError):
        kconvert.fix("bad", "out", target="target", only={"K999"})


def test_fix_only_an_id_without_a_finding_says_so(ws, capsys):
    """`--only` a known id with no finding here is the same case as a fix with nothing to do (README's rule):
    exit 0, nothing written, fix says so and names the next command, which verifies the input."""
    rc, out, err = run(capsys, "fix", "bad", "-o", "out", "--target", "target", "--only", "K502",
                       "--output-format", "full")
    assert rc == 0, err
    assert "--only K502: no K502 finding in this checkpoint" in out and "nothing written" in out
    assert not Path("out").exists()
    res = kconvert.fix("bad", "out", target="target", only={"K502"})
    assert res.noop and res.written is None and res.exit_code == 0 and not Path("out").exists()
    # one of two named ids has a finding: fix applies it and names the other
    rc, out, err = run(capsys, "fix", "bad", "-o", "out", "--target", "target", "--only", "K404,K502",
                       "--output-format", "full")
    assert rc == 0 and "--only K502: no K502 finding in this checkpoint" in out and Path("out").is_dir()
    doc = kconvert.fix("bad", "out2", target="target", only={"K404", "K502"}).to_dict()
    assert doc["fix"]["only_without_finding"] == ["K502"] and doc["fix"]["applied_findings"] == ["K404"]


def test_fix_only_other_findings_leaves_the_rest_without_contradiction(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")  # Model Runner V1's row: K404 (see `ws`)
    make_target(tmp_path / "target")
    make_draft(tmp_path / "two", "specforge", config=lambda c: c.pop("rope_scaling", None))  # K404 + K902
    rc, out, err = run(capsys, "fix", "two", "-o", "out", "--target", "target", "--only", "K902",
                       "--rope-from-target", "--output-format", "full")
    assert rc == 0, err
    assert "already loads as intended" not in out and "kconvert bug" not in out + err
    assert "left as is (not selected by --only): K404" in out
    assert json.loads(Path("out/config.json").read_text()).get("rope_scaling")


def test_a_failed_fix_leaves_no_output_folder(ws, capsys, monkeypatch):
    """A fix whose output would still carry a fixable error (simulated: a plan that lost its ops) is a kconvert
    bug the self-check catches before the rename: nothing at the destination, an existing one untouched."""
    fixmod = sys.modules["kconvert.commands.fix"]
    real = fixmod.plan_fix

    def plan_without_ops(*a, **k):
        plan = real(*a, **k)
        plan.ops = []
        return plan

    monkeypatch.setattr(fixmod, "plan_fix", plan_without_ops)
    with pytest.raises(SelfCheckError, match="K404"):
        kconvert.fix("bad", "out", target="target")
    assert not Path("out").exists() and not [p for p in Path(".").iterdir() if p.name.startswith(".out")]
    # an earlier output (its kconvert.json lists every file in it: the only folder --force may replace)
    Path("keep").mkdir()
    (Path("keep") / "marker").write_text("old")
    (Path("keep") / "kconvert.json").write_text('{"tool": "kconvert", "output": {"files": {"marker": {}}}}')
    rc, out, err = run(capsys, "fix", "bad", "-o", "keep", "--target", "target", "--force")
    assert rc == 1 and "self-check" in err and "nothing written" in err
    assert "already loads" not in out
    assert sorted(p.name for p in Path("keep").iterdir()) == ["kconvert.json", "marker"]


def test_fix_prints_the_verify_command_and_that_command_works_statically(ws, capsys):
    rc, out, _ = run(capsys, "fix", "bad", "-o", "fixed", "--target", "target", "--output-format", "concise")
    assert rc == 0
    nxt = [ln for ln in out.splitlines() if ln.startswith("next: ")]
    assert nxt == ["next: kconvert verify fixed --target target  # measure the corrected draft live next to the "
                   "target"]
    # the static part of that command passes on what fix wrote
    assert kconvert.inspect("fixed", target="target").verdict == "pass"


# ------------------------------------------------------------------------------------------------ next steps

def test_fixable_errors_print_the_exact_fix_command_and_it_repairs_them(ws, capsys):
    rc, out, _ = run(capsys, "inspect", "bad", "--target", "target", "--aux-convention", "output",
                     "--output-format", "concise")
    assert rc == 1
    (line,) = [ln for ln in out.splitlines() if ln.startswith("next: ")]
    command = line[len("next: "):].split("  # ")[0]
    assert command == "kconvert fix bad -o bad-vllm --target target --aux-convention output"
    argv = shlex.split(command)
    assert argv[0] == "kconvert"
    rc, _, err = run(capsys, *argv[1:])
    assert rc == 0, err
    assert kconvert.inspect("bad-vllm", target="target").verdict == "pass"


def test_a_static_pass_on_sglang_prints_the_launch_line_and_verify_server(ws, capsys):
    rc, out, _ = run(capsys, "inspect", "clean", "--target", "target", "--engine", "sglang",
                     "--output-format", "concise")
    assert rc == 0
    nxt = [ln[len("next: "):].split("  # ")[0] for ln in out.splitlines() if ln.startswith("next: ")]
    assert nxt == ["python -m sglang.launch_server --model-path target --tp 1 --speculative-algorithm EAGLE3 "
                   "--speculative-draft-model-path clean --speculative-num-steps 3 --speculative-eagle-topk 1 "
                   "--speculative-num-draft-tokens 4",
                   "kconvert verify --server http://127.0.0.1:30000 --engine sglang -k 3"]


def test_fix_for_sglang_prints_the_launch_line_for_what_it_wrote_and_verify_server(ws, capsys):
    # a speculators-format draft: SGLang reads no such config (K101), so fix writes the flat layout
    make_draft(Path("spec"), "speculators")
    rc, out, _ = run(capsys, "fix", "spec", "-o", "fixed-sg", "--target", "target", "--engine", "sglang",
                     "--output-format", "concise")
    assert rc == 0 and Path("fixed-sg", "config.json").is_file()
    nxt = [ln[len("next: "):].split("  # ")[0] for ln in out.splitlines() if ln.startswith("next: ")]
    assert len(nxt) == 2 and nxt[1] == "kconvert verify --server http://127.0.0.1:30000 --engine sglang -k 3"
    argv = shlex.split(nxt[0])
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert argv[argv.index("--speculative-draft-model-path") + 1] == "fixed-sg"
    assert argv[argv.index("--model-path") + 1] == "target"


def test_a_static_pass_names_what_it_cannot_see_and_the_verify_command(ws, capsys):
    rc, out, _ = run(capsys, "inspect", "clean", "--target", "target", "--output-format", "concise")
    assert rc == 0
    gaps = [ln for ln in out.splitlines() if ln.startswith("not checked statically: ")]
    assert any("lm_head[d2t + arange]" in g for g in gaps)
    assert any("aux ids" in g and "trained on" in g for g in gaps)
    assert "next: kconvert verify clean --target target  # static checks passed; measure acceptance live" in out
    doc = kconvert.inspect("clean", target="target").to_dict()
    assert doc["not_checked"] and doc["next_steps"][0]["command"] == "kconvert verify clean --target target"
    # a draft that records no aux ids: the engine's defaults, and a draft trained elsewhere collapses
    make_draft(Path("noids"), "torchspec", config=lambda c: (c.pop("eagle_config", None),
                                                             c.pop("eagle_aux_hidden_state_layer_ids", None)))
    res = kconvert.inspect("noids", target="target")
    assert res.verdict == "pass" and [f.id for f in res.findings] == ["K401"]  # a warning, not an error
    assert any("no aux layer ids are recorded" in g for g in res.to_dict()["not_checked"])


# ------------------------------------------------------------------------------------------------ --fail-on

def test_fail_on_warning_fails_inspect_on_a_warning(ws, capsys):
    assert run(capsys, "inspect", "warn", "--target", "target")[0] == 0
    rc, out, _ = run(capsys, "inspect", "warn", "--target", "target", "--fail-on", "warning")
    assert rc == 1 and out.splitlines()[-2].endswith("verdict: FAIL (--fail-on warning)") or \
        "verdict: FAIL (--fail-on warning)" in out
    assert run(capsys, "inspect", "clean", "--target", "target", "--fail-on", "warning")[0] == 0
    assert run(capsys, "inspect", "warn", "--target", "target", "--fail-on", "info")[0] == 2
    doc = kconvert.inspect("warn", target="target", fail_on="warning").to_dict()
    assert doc["fail_on"] == "warning" and doc["verdict"] == "fail" and doc["exit_code"] == 1


def test_fail_on_warning_stops_verify_before_the_engine(ws, capsys):
    rc, out, _ = run(capsys, "verify", "warn", "--target", "target", "--fail-on", "warning", "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["static_blocked"] is True and doc["live"] is None and doc["fail_on"] == "warning"


# ------------------------------------------------------------------------------------------------ machine output

def test_verify_diagnose_is_the_librarys_and_the_cli_only_renders_it(ws, capsys):
    """`verify --diagnose` is `kconvert.verify(..., diagnose=True)`: a dry run plans the diagnosis in the library's
    result, and the CLI's --json is that result's document (the live run is tests/test_cli_live.py's)."""
    lib = kconvert.verify("clean", "target", dry_run=True, diagnose=True).to_dict()
    assert "candidate readings" in lib["dry_run"]["diagnose"]
    assert "diagnose" not in kconvert.verify("clean", "target", dry_run=True).to_dict()["dry_run"]
    rc, out, _ = run(capsys, "verify", "clean", "--target", "target", "--dry-run", "--diagnose", "--json")
    assert rc == 0
    when = {"subject", "created"}  # where it ran and the second it was made
    assert {k: v for k, v in lib.items() if k not in when} == {
        k: v for k, v in json.loads(out).items() if k not in when}


def test_rules_json_validates_against_the_schema_its_help_names(capsys):
    r = cli("rules", "--help", env={"COLUMNS": "200"})
    assert "schemas/rules.schema.json" in r.stdout
    rc, out, _ = run(capsys, "rules", "--json")
    validate(json.loads(out), "rules")
    rc, out, _ = run(capsys, "rules", "K404", "--json")
    validate(json.loads(out), "rules")
    rc, out, _ = run(capsys, "rules", "K999", "--json")
    assert rc == 2 and json.loads(out)["error"]["type"] == "UsageError"


def test_acceptance_json_validates_against_the_schema_its_help_names(capsys):
    r = cli("acceptance", "--help", env={"COLUMNS": "200"})
    assert "schemas/acceptance.schema.json" in r.stdout
    rc, out, _ = run(capsys, "acceptance", str(DATA / "vllm_metrics_after.txt"), "--before",
                     str(DATA / "vllm_metrics_before.txt"), "--json")
    assert rc == 0
    validate(json.loads(out), "acceptance")


SCRAPE = """# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{model_name="m",engine="0"}} {drafts}
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{{model_name="m",engine="0"}} {tokens}
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{{model_name="m",engine="0"}} {accepted}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",engine="0",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",engine="0",position="1"}} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",engine="0",position="2"}} {p2}
"""


@pytest.mark.parametrize("counts, fragment", [
    (dict(drafts=10, tokens=30, accepted=10, p0=9, p1=8, p2=1), "add up to 18, more than the 10 accepted"),
    (dict(drafts=10, tokens=30, accepted=12, p0=3, p1=5, p2=4), "position 2 was accepted 5 times"),
    (dict(drafts=10, tokens=30, accepted=40, p0=10, p1=10, p2=10), "exceed the 30 draft tokens"),
    (dict(drafts=10, tokens=30, accepted=12, p0=12, p1=0, p2=0), "exceed the 10 drafts"),
])
def test_acceptance_refuses_counters_no_server_produces(tmp_path, capsys, counts, fragment):
    p = tmp_path / "metrics.txt"
    p.write_text(SCRAPE.format(**counts))
    rc, out, err = run(capsys, "acceptance", str(p), "--json")
    assert rc == 2 and fragment in err
    assert json.loads(out)["error"]["type"] == "InputError"
    p.write_text(SCRAPE.format(drafts=10, tokens=30, accepted=15, p0=8, p1=5, p2=2))
    rc, out, _ = run(capsys, "acceptance", str(p), "--json")
    acc = json.loads(out)["acceptance"]
    assert rc == 0 and all(0 <= c <= 1 for c in acc["conditional"])


# ------------------------------------------------------------------------------------------------ model card

def test_model_card_serve_lines_name_hub_ids_never_a_local_path(tmp_path):
    from tests.test_push import REPO, make_checkpoint, make_report

    folder = make_checkpoint(tmp_path / "d")
    doc = make_report(folder)
    local = str(tmp_path / "target")
    doc["target"] = {"name": local, "origin": "folder"}
    doc["live"]["target"] = local
    res = kconvert.push(folder, REPO, report=doc, dry_run=True)
    assert local not in res.readme and "vllm serve '<target-hub-id>' " in res.readme
    assert any("--base-model" in n for n in res.notes)
    res = kconvert.push(folder, REPO, report=doc, dry_run=True, base_model="org/target")
    assert local not in res.readme and "vllm serve org/target " in res.readme
    assert f'"model": "{REPO}"' in res.readme  # the draft by its Hub id too
