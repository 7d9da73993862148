"""The project configuration and the gate's options behave as ruff's (issue #48 item 5): a path in kconvert.toml /
[tool.kconvert] is relative to the file; an error names the file and the key; ruff's plain `ignore = [...]` is
accepted with a warning; `--extend-select`, `--exit-zero`, `--statistics`, `--show-settings` on every command
that gates (the commands with --select, read from click's command tree). In-process runs (tests/printed.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests import printed

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
SPECFORGE = TINY / "drafts" / "llama-specforge"  # K404 (error, fixable) and two K902 warnings on tiny/target
GATE = ("--extend-select", "--exit-zero", "--statistics", "--show-settings")


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    for var in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE", "KCONVERT_OUTPUT_FORMAT", "KCONVERT_DEBUG"):
        monkeypatch.delenv(var, raising=False)


def gating_commands() -> dict[str, set[str]]:
    """Every command with --select (the ones whose exit code is a gate), with its options."""
    from kconvert.cli import _built, _register

    _register()
    out = {}
    for name, cmd in _built(None).commands.items():
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        if "--select" in opts:
            out[name] = opts
    return out


def test_every_gating_command_has_ruffs_options():
    cmds = gating_commands()
    assert {"inspect", "fix", "verify", "score", "matrix"} <= set(cmds), cmds
    assert {name: sorted(set(GATE) - opts) for name, opts in cmds.items() if set(GATE) - opts} == {}


def project(tmp_path: Path, toml: str) -> Path:
    """A project folder with the tiny target inside it and a kconvert.toml; the draft is run from a subfolder."""
    proj = tmp_path / "proj"
    shutil.copytree(TINY / "target", proj / "models" / "target")
    (proj / "kconvert.toml").write_text(toml, encoding="utf-8")
    (proj / "sub").mkdir()
    return proj


def test_a_path_in_the_configuration_is_relative_to_the_file(tmp_path):
    # ruff resolves paths in its configuration against the file; kconvert read them against the working directory
    proj = project(tmp_path, 'target = "models/target"\n')
    r = printed.run(["inspect", str(SPECFORGE), "--json"], proj / "sub")
    assert r.rc == 1, r.err  # K404 on the tiny target: the target was found
    doc = json.loads(r.out)
    assert Path(proj / "sub", doc["target"]["name"]).resolve() == (proj / "models" / "target").resolve()
    # from the project's own folder the value is kept as written
    r = printed.run(["inspect", str(SPECFORGE), "--json"], proj)
    assert json.loads(r.out)["target"]["name"] == "models/target"
    # a profile name is no path
    proj2 = project(tmp_path / "b", 'target = "kimi-k2.5"\n')
    r = printed.run(["inspect", str(SPECFORGE), "--json"], proj2 / "sub")
    assert json.loads(r.out)["target"]["name"] == "kimi-k2.5", r.err


def test_a_bad_id_in_the_files_ignore_names_the_file_and_the_key(tmp_path):
    proj = project(tmp_path, '[ignore]\nK999 = "why"\n')
    r = printed.run(["inspect", str(SPECFORGE), "--target", str(TINY / "target")], proj)
    assert r.rc == 2
    assert "--ignore" not in r.err and f"{proj / 'kconvert.toml'}: ignore 'K999'" in r.err, r.err
    (proj / "kconvert.toml").write_text('select = ["K4", "nosuch-rule"]\n', encoding="utf-8")
    r = printed.run(["inspect", str(SPECFORGE), "--target", str(TINY / "target")], proj)
    assert r.rc == 2 and "--select" not in r.err and "kconvert.toml: select 'nosuch-rule'" in r.err, r.err


def test_a_configuration_error_under_json_is_a_json_error_object(tmp_path):
    from kconvert.schemas import validate

    proj = project(tmp_path, '[ignore]\nK999 = "why"\n')
    required = {"score": ["--trace", str(tmp_path / "no-trace")]}  # score's --trace is required; never read here
    for cmd in gating_commands():
        r = printed.run([cmd, str(SPECFORGE), "--target", str(TINY / "target"), *required.get(cmd, []), "--json"],
                        proj)
        assert r.rc == 2, (cmd, r.err)
        doc = json.loads(r.out)
        validate(doc, "error")
        assert "K999" in doc["error"]["message"], (cmd, doc)


def test_ruffs_plain_ignore_list_is_accepted_with_a_warning(tmp_path):
    proj = project(tmp_path, 'ignore = ["K902"]\n')
    r = printed.run(["inspect", str(SPECFORGE), "--target", str(TINY / "target"), "--json"], proj)
    assert r.rc == 1, r.err  # K404 still fails; the two K902 warnings are set aside
    doc = json.loads(r.out)
    [ign] = doc["rule_selection"]["ignored"]
    assert ign["selector"] == "K902" and ign["reason"] == "no reason given" and ign["findings"] == 2
    assert "warning:" in r.err and "gives no reason" in r.err and '[ignore] K902 = "the reason"' in r.err


def test_exit_zero_statistics_extend_select_and_show_settings(tmp_path):
    args = ["inspect", str(SPECFORGE), "--target", str(TINY / "target")]
    full = json.loads(printed.run([*args, "--json"], tmp_path).out)
    assert full["exit_code"] == 1
    # --exit-zero: the same report, exit 0
    r = printed.run([*args, "--exit-zero", "--json"], tmp_path)
    assert r.rc == 0 and json.loads(r.out)["findings"] == full["findings"]
    # --statistics: one line per rule, its count as the report has it, most first
    r = printed.run([*args, "--statistics"], tmp_path)
    counts: dict[str, int] = {}
    for f in full["findings"]:
        counts[f["id"]] = counts.get(f["id"], 0) + 1
    got = {ln.split()[1]: int(ln.split()[0]) for ln in r.out.splitlines()}
    assert r.rc == 1 and got == counts, r.out
    # --extend-select adds to the configuration's select
    proj = project(tmp_path, 'select = ["K9"]\n')
    r = printed.run([*args, "--extend-select", "K4", "--json"], proj)
    assert {f["id"] for f in json.loads(r.out)["findings"]} == {"K404", "K902"}
    r = printed.run([*args, "--json"], proj)
    assert {f["id"] for f in json.loads(r.out)["findings"]} == {"K902"}
    # --show-settings: what the run would use, and nothing run; JSON under --json, valid against its schema
    from kconvert.schemas import validate

    r = printed.run([*args, "--extend-select", "K4", "--show-settings", "--json"], proj)
    settings = json.loads(r.out)
    validate(settings, "settings")
    assert r.rc == 0 and settings["select"] == ["K9", "K4"] and settings["config_file"].endswith("kconvert.toml")
    assert "K404" in settings["selected"] and "K101" not in settings["selected"]
    r = printed.run([*args, "--show-settings"], proj)
    assert r.rc == 0 and "select: K9" in r.out and "findings" not in r.out
