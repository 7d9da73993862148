"""ruff's habits (issue 18, item 7): -h, shell completion, "did you mean", help at 80 columns with every option
name whole. The oracle for the option names is click's own command objects (typer.main.get_command), not the
help text under test."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="80", **(env or {}))
    e.pop("KCONVERT_OUTPUT_FORMAT", None)
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, env=e,
                          cwd=cwd or ROOT, timeout=120)


def commands() -> dict:
    import typer

    from kconvert.cli import _register, app

    _register()
    group = typer.main.get_command(app)
    return dict(group.commands)


COMMANDS = sorted(commands())


@pytest.mark.parametrize("name", COMMANDS)
def test_every_help_fits_80_columns_with_every_option_name_whole(name):
    cmd = commands()[name]
    r = cli(name, "--help")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 80, [ln for ln in lines if len(ln) > 80]
    words = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", r.stdout))
    for param in cmd.params:
        for opt in [*param.opts, *param.secondary_opts]:
            if opt.startswith("-"):
                assert opt in words, f"{name} --help at 80 columns does not show {opt} whole"
    assert "…" not in r.stdout


@pytest.mark.parametrize("name", [None, *COMMANDS])
def test_dash_h_is_help_on_every_command(name):
    args = [name] if name else []
    short, long = cli(*args, "-h"), cli(*args, "--help")
    assert short.returncode == long.returncode == 0
    assert short.stdout == long.stdout and "Usage: kconvert" in short.stdout


def test_shell_completion_script_and_completions():
    r = cli("--show-completion", "bash")
    assert r.returncode == 0 and "_KCONVERT_COMPLETE" in r.stdout
    r = cli(env={"_KCONVERT_COMPLETE": "complete_bash", "COMP_WORDS": "kconvert ins", "COMP_CWORD": "1"})
    assert r.stdout.split() == ["inspect"]
    r = cli(env={"_KCONVERT_COMPLETE": "complete_bash", "COMP_WORDS": "kconvert inspect --fail", "COMP_CWORD": "2"})
    assert "--fail-on" in r.stdout.split()


@pytest.mark.parametrize("args,suggestion", [
    (["--target", "kimi-k25"], "kimi-k2.5"),
    (["--target", "qwen3-8B"], "qwen3-8b"),
    (["--engine", "vlm"], "vllm"),
    (["--engine", "sglang", "--engine-version", "post-2545"], "post-25454"),
    (["--engine-version", "0.3.3"], "0.33"),
])
def test_a_misspelt_profile_or_engine_row_gets_did_you_mean(tmp_path, args, suggestion):
    from tests.factories import make_draft

    draft = make_draft(tmp_path / "d", "torchspec")
    r = cli("inspect", str(draft), *args)
    assert r.returncode == 2
    assert f"did you mean {suggestion!r}?" in r.stderr, r.stderr


# --- --select / --ignore / --extend-ignore and the project configuration ------------------------------------------

def _aux_broken(tmp_path: Path) -> tuple[Path, Path]:
    """The shipped broken variant whose ids [1, 4, 6] are SGLang's output convention (README: K404 error on vLLM,
    fixable to [2, 5, 7]) and its target."""
    return ROOT / "examples/tiny/broken/aux-ids-sglang-convention", ROOT / "examples/tiny/target"


def _json(r: subprocess.CompletedProcess) -> dict:
    import json

    return json.loads(r.stdout)


def test_the_broken_draft_fails_without_a_selection(tmp_path):
    draft, target = _aux_broken(tmp_path)
    r = cli("inspect", str(draft), "--target", str(target), "--json", cwd=tmp_path)
    doc = _json(r)
    assert r.returncode == 1 and "K404" in {f["id"] for f in doc["findings"]} and doc["rule_selection"] is None


@pytest.mark.parametrize("selector", ["K404", "K4", "aux-layers", "aux-ids-convention"])
def test_ignore_by_id_prefix_category_or_name_sets_the_finding_aside_and_records_it(tmp_path, selector):
    from kconvert.schemas import validate

    draft, target = _aux_broken(tmp_path)
    r = cli("inspect", str(draft), "--target", str(target), "--json", "--ignore", selector, cwd=tmp_path)
    doc = _json(r)
    validate(doc, "report")
    assert r.returncode == 0 and "K404" not in {f["id"] for f in doc["findings"]}
    sel = doc["rule_selection"]
    assert [a["id"] for a in sel["set_aside"]] == ["K404"]
    assert sel["ignored"][0]["selector"] == selector and "K404" in sel["ignored"][0]["rules"]
    assert sel["ignored"][0]["source"] == "command line"


def test_select_keeps_only_the_named_rules(tmp_path):
    draft, target = _aux_broken(tmp_path)
    doc = _json(cli("inspect", str(draft), "--target", str(target), "--json", "--select", "K9", cwd=tmp_path))
    assert all(f["id"].startswith("K9") for f in doc["findings"])
    assert "K404" in {a["id"] for a in doc["rule_selection"]["set_aside"]}


def test_an_unknown_selector_is_a_usage_error_with_did_you_mean(tmp_path):
    draft, target = _aux_broken(tmp_path)
    r = cli("inspect", str(draft), "--target", str(target), "--ignore", "aux-layer", cwd=tmp_path)
    assert r.returncode == 2 and "did you mean 'aux-layers'?" in r.stderr


def test_pyproject_configuration_found_upward_sets_the_gate_and_records_the_reason(tmp_path):
    from kconvert.schemas import validate

    draft, target = _aux_broken(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.kconvert]\nfail-on = "warning"\n\n[tool.kconvert.ignore]\n'
        'K404 = "ids reviewed: verify --diagnose measured the output reading best"\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    doc = _json(cli("inspect", str(draft), "--target", str(target), "--json", cwd=sub))
    validate(doc, "report")
    assert doc["fail_on"] == "warning"
    sel = doc["rule_selection"]
    assert sel["config_file"] == str(tmp_path / "pyproject.toml")
    assert sel["ignored"] == [{"selector": "K404", "rules": ["K404"], "reason":
                               "ids reviewed: verify --diagnose measured the output reading best",
                               "source": str(tmp_path / "pyproject.toml"), "findings": 1}]
    # the command line overrides the file: --fail-on, and --ignore replaces its ignore
    r = cli("inspect", str(draft), "--target", str(target), "--json", "--ignore", "K9", "--fail-on", "error", cwd=sub)
    doc = _json(r)
    assert doc["fail_on"] == "error" and r.returncode == 1 and "K404" in {f["id"] for f in doc["findings"]}
    # --extend-ignore adds to it; --isolated reads nothing
    doc = _json(cli("inspect", str(draft), "--target", str(target), "--json", "--extend-ignore", "K9", cwd=sub))
    assert [i["selector"] for i in doc["rule_selection"]["ignored"]] == ["K404", "K9"]
    doc = _json(cli("inspect", str(draft), "--target", str(target), "--json", "--isolated", cwd=sub))
    assert doc["rule_selection"] is None and doc["fail_on"] == "error"


def test_kconvert_toml_wins_over_pyproject_in_the_same_folder_and_an_ignore_asks_for_a_reason(tmp_path):
    draft, target = _aux_broken(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.kconvert]\nfail-on = "warning"\n')
    (tmp_path / "kconvert.toml").write_text('ignore = ["K404"]\n')
    r = cli("inspect", str(draft), "--target", str(target), cwd=tmp_path)
    # ruff's plain list is accepted (issue #48), with a warning that names the file and asks for the reason; the
    # pyproject's fail-on is not read (kconvert.toml wins), so the K404 set aside leaves nothing failing
    assert r.returncode == 0 and "kconvert.toml" in r.stderr and "reason" in r.stderr and "warning:" in r.stderr
    (tmp_path / "kconvert.toml").write_text('engine = "sglang"\nengine-version = "post-25454"\ntarget = "x"\n'
                                            'fail-on = "warning"\nselec = ["K"]\n')
    r = cli("inspect", str(draft), cwd=tmp_path)
    assert r.returncode == 2 and "did you mean 'select'?" in r.stderr


def test_fix_does_not_apply_an_ignored_rule_and_records_it(tmp_path):
    import json

    draft, target = _aux_broken(tmp_path)
    out = tmp_path / "out"
    # K404 is the draft's only finding: set aside, nothing is left to change, so fix writes nothing (exit 0) and
    # its report records what was set aside and why
    r = cli("fix", str(draft), "-o", str(out), "--target", str(target), "--ignore", "K404", "--no-fsync", "--json",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["rule_selection"]["set_aside"][0]["id"] == "K404"
    assert not out.exists()
    # without the selection the same fix repairs K404 and writes the ids it settles
    r = cli("fix", str(draft), "-o", str(out), "--target", str(target), "--no-fsync", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    prov = json.loads((out / "kconvert.json").read_text())
    assert "K404" in str(prov["findings_fixed"])
    src = json.loads((draft / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert json.loads((out / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] != src


def test_rules_list_reads_in_a_pipe_one_line_per_rule_at_80_columns():
    from kconvert.rules import REGISTRY

    r = cli("rules")
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and max(len(ln) for ln in lines) <= 80
    for rid, rule in REGISTRY.items():
        mine = [ln for ln in lines if ln.split()[:1] == [rid]]
        assert len(mine) == 1, rid
        # every severity its findings can have (tests/test_messages.py holds them to what the rules print)
        assert mine[0].split() == [rid, rule.name, rule.category, "/".join(rule.severities()),
                                   rule.fix_availability.value]
        assert rule.severity in rule.severities()
    assert len(lines) == len(REGISTRY) + 2  # the header and the closing line
    full = cli("rules", "K404")
    assert REGISTRY["K404"].why.split()[0] in full.stdout and "What it checks" in full.stdout
