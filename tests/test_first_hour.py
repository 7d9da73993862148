"""Issue #31 ("A stranger's first hour"): commands keep each other's word, what is printed is what happens, 80
columns for real, messages that say what is wrong, where, and what to do. Each test drives the command line as a
user does (a subprocess at COLUMNS=80, no tty); the expected text is derived here from the inputs the test writes,
never from the code under test."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "examples" / "tiny"
TARGET = TINY / "target"
SPECFORGE = TINY / "drafts" / "llama-specforge"  # K404 (error, fixable) and two K902 warnings on tiny/target
FULLVOCAB = TINY / "drafts" / "llama-fullvocab"  # two K902 warnings, no error


def cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80", **(env or {})}
    e.pop("KCONVERT_OUTPUT_FORMAT", None)
    return subprocess.run([sys.executable, "-m", "kconvert", *args], capture_output=True, text=True, env=e,
                          cwd=cwd or ROOT, timeout=300)


def next_commands(out: str) -> list[list[str]]:
    return [shlex.split(line[len("next: "):].split("  # ", 1)[0]) for line in out.splitlines()
            if line.startswith("next: ")]


# --- 3. commands keep each other's word -----------------------------------------------------------------------

def test_fix_summary_names_the_finding_the_ignore_set_aside():
    r = cli("fix", str(SPECFORGE), "--target", str(TARGET), "--ignore", "K404", "--dry-run",
            "--output-format", "concise")
    assert r.returncode == 0, r.stderr
    summary = [ln for ln in r.stdout.splitlines() if "verdict" in ln]
    assert summary and "K404" in summary[-1] and "set aside" in summary[-1], r.stdout


def test_fix_full_view_names_the_finding_the_ignore_set_aside():
    r = cli("fix", str(SPECFORGE), "--target", str(TARGET), "--ignore", "K404", "--dry-run",
            "--output-format", "full", env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert any("set aside" in ln and "K404" in ln for ln in r.stdout.splitlines()), r.stdout


def test_next_lines_carry_the_ignore_and_fail_on_that_produced_them():
    r = cli("inspect", str(SPECFORGE), "--target", str(TARGET), "--ignore", "K902", "--output-format", "concise")
    cmds = next_commands(r.stdout)
    fix = [c for c in cmds if c[:2] == ["kconvert", "fix"]]
    assert fix, r.stdout
    i = fix[0].index("--ignore")
    assert fix[0][i + 1] == "K902"


def test_verify_line_after_a_noop_fix_keeps_the_ignore():
    # mla-torchspec passes on tiny/target; --select K4 narrows the gate: the verify line printed must keep it
    r = cli("inspect", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TARGET), "--select", "K4",
            "--output-format", "concise")
    cmds = next_commands(r.stdout)
    verify = [c for c in cmds if c[:2] == ["kconvert", "verify"]]
    assert verify, r.stdout
    assert verify[0][verify[0].index("--select") + 1] == "K4"


def test_matrix_reads_the_project_configuration_and_exits_as_inspect(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.kconvert]\nfail-on = "warning"\n', encoding="utf-8")
    i = cli("inspect", str(FULLVOCAB), "--target", str(TARGET), "--engine-version", "0.32", cwd=tmp_path)
    m = cli("matrix", str(FULLVOCAB), "--target", str(TARGET), "--engines", "vllm:0.32", "--cache", "off",
            cwd=tmp_path)
    assert i.returncode == 1, i.stdout + i.stderr  # two K902 warnings fail under fail-on = "warning"
    assert m.returncode == i.returncode, m.stdout + m.stderr


def test_matrix_takes_the_gate_flags_of_inspect():
    # Model Runner V1 reads eagle_config's [1, 4, 6] (one stream early: K404 alone); V2 reads none of its keys
    # and feeds its defaults (K405), so the row is the V1 one
    args = [str(SPECFORGE), "--target", str(TARGET), "--ignore", "K404"]
    i = cli("inspect", *args, "--engine-version", "0.32/v1", "--isolated")
    m = cli("matrix", *args, "--engines", "vllm:0.32/v1", "--cache", "off", "--isolated", "--json")
    assert i.returncode == 0, i.stdout + i.stderr
    assert m.returncode == 0, m.stdout + m.stderr
    doc = json.loads(m.stdout)
    (cell,) = doc["cells"]
    assert "K404" not in cell["finding_ids"] and cell["set_aside"] == ["K404"]
    for flag in ("--select", "--extend-ignore", "--fail-on", "--config"):
        assert flag in cli("matrix", "--help").stdout


def test_matrix_target_comes_from_the_configuration(tmp_path):
    (tmp_path / "kconvert.toml").write_text(f'target = "{TARGET}"\n', encoding="utf-8")
    m = cli("matrix", str(SPECFORGE), "--engines", "vllm:0.32", "--cache", "off", "--json", cwd=tmp_path)
    doc = json.loads(m.stdout)
    assert doc["cells"][0]["target"] == str(TARGET), doc["cells"][0]


@pytest.mark.parametrize("shell,first", [("zsh", "#compdef kconvert"), ("fish", "complete --command kconvert")])
def test_show_completion_honours_the_shell_given(shell, first):
    r = cli("--show-completion", shell)
    assert r.returncode == 0, r.stderr
    assert r.stdout.lstrip().startswith(first), r.stdout[:200]


def test_show_completion_refuses_an_unknown_shell():
    r = cli("--show-completion", "nosuch")
    assert r.returncode == 2
    assert "nosuch" in r.stderr and "zsh" in r.stderr and not r.stdout.strip()


# --- 4. what is printed is what happens -----------------------------------------------------------------------

def run_in_process(argv: list[str], capsys) -> tuple[int, str]:
    from kconvert.cli import main

    rc = main(argv)
    return rc, capsys.readouterr().out


def test_dry_run_without_vllm_says_so_and_the_exit_of_the_live_run(monkeypatch, capsys):
    # A core install: no vLLM distribution. The live run raises MissingPackageError, whose exit code is 3
    # (kconvert/errors.py EXIT_ENGINE; README "3 this machine cannot run the step").
    import kconvert.commands.verify.command as run

    monkeypatch.setattr(run, "installed_version", lambda engine: None)
    rc, out = run_in_process(["verify", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TARGET),
                              "--dry-run", "--output-format", "concise"], capsys)
    assert "would start" not in out, out
    note = [ln for ln in out.splitlines() if ln.startswith("note:")]
    assert note and "vLLM is not installed" in note[0] and "exit 3" in note[0], out


def test_dry_run_serve_line_carries_every_engine_arg(capsys):
    rc, out = run_in_process(["verify", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TARGET),
                              "--dry-run", "--engine-arg", "dtype=float32", "--json"], capsys)
    plan = json.loads(out)["dry_run"]
    argv = shlex.split(plan["serve_line"])
    assert argv[argv.index("--dtype") + 1] == "float32", plan["serve_line"]
    # every other argument verify passes has its `vllm serve` flag too (vLLM's EngineArgs: key with dashes)
    for key, value in plan["engine_args"].items():
        if key in ("model", "tensor_parallel_size", "speculative_config", "disable_log_stats") or value is False:
            continue
        assert "--" + key.replace("_", "-") in argv, (key, plan["serve_line"])


def test_dry_run_markdown_never_reads_as_live(tmp_path, capsys):
    md = tmp_path / "v.md"
    run_in_process(["verify", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TARGET), "--dry-run",
                    "--markdown", str(md), "--output-format", "concise"], capsys)
    text = md.read_text(encoding="utf-8")
    assert "Verified live" not in text and "dry run" in text.lower(), text


def test_dry_run_junit_says_no_engine_was_started(capsys):
    import xml.etree.ElementTree as ET

    rc, out = run_in_process(["verify", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TARGET),
                              "--dry-run", "--output-format", "junit"], capsys)
    root = ET.fromstring(out)
    run = root.find(".//testcase[@name='engine run']")
    assert run is not None and run.find("failure") is None
    assert "dry run" in run.find("skipped").get("message"), out


def test_dry_run_concise_summary_says_nothing_was_measured(capsys):
    rc, out = run_in_process(["verify", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TARGET),
                              "--dry-run", "--output-format", "concise"], capsys)
    summary = [ln for ln in out.splitlines() if "verdict:" in ln]
    assert summary and "dry run" in summary[-1] and "nothing measured" in summary[-1], out


# --- 7. messages say what is wrong, in which file, and what to do ---------------------------------------------

def draft_copy(tmp_path: Path, edit) -> Path:
    d = tmp_path / "draft"
    shutil.copytree(TINY / "drafts" / "mla-torchspec", d)
    cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return d


def concise_finding(out: str, rid: str) -> str:
    lines = [ln for ln in out.splitlines() if f": {rid} " in ln]
    assert lines, out
    return lines[0]


def test_architectures_as_a_string_is_named_as_such(tmp_path):
    want = json.loads((TINY / "drafts" / "mla-torchspec" / "config.json").read_text())["architectures"][0]
    d = draft_copy(tmp_path, lambda c: c.update(architectures=want))
    line = concise_finding(cli("inspect", str(d), "--output-format", "concise").stdout, "K101")
    assert "[]" not in line and line.split(": ", 1)[0].endswith("config.json:1") and "not a list" in line \
        and f'["{want}"]' in line, line


def test_hidden_size_as_a_string_is_not_called_missing(tmp_path):
    d = draft_copy(tmp_path, lambda c: c.update(hidden_size=str(c["hidden_size"])))
    line = concise_finding(cli("inspect", str(d), "--output-format", "concise").stdout, "K303")
    assert "has no hidden_size" not in line and '"128"' in line and "not an integer" in line, line


def test_empty_draft_argument_says_it_is_empty():
    r = cli("inspect", "")
    assert r.returncode == 2
    assert "error: :" not in r.stderr and "empty" in r.stderr and "Hub id" in r.stderr, r.stderr


def test_acceptance_of_a_device_says_it_is_not_a_file():
    r = cli("acceptance", "/dev/null")
    assert r.returncode == 2
    assert "not found" not in r.stderr and "not a regular file" in r.stderr and "/dev/null" in r.stderr, r.stderr


def test_empty_target_is_refused():
    r = cli("inspect", str(TINY / "drafts" / "mla-torchspec"), "--target", "", "--output-format", "concise")
    assert r.returncode == 2 and "--target ''" in r.stderr, r.stdout + r.stderr


def test_bad_config_json_names_its_folder(tmp_path):
    d = tmp_path / "cut-short"
    shutil.copytree(TINY / "drafts" / "mla-torchspec", d)
    (d / "config.json").write_text('{"a": ', encoding="utf-8")
    r = cli("inspect", str(d))
    assert r.returncode == 2
    assert f"{d}/config.json" in r.stderr and "hint:" in r.stderr, r.stderr


def test_bad_fail_on_in_kconvert_toml_names_the_file_not_a_flag(tmp_path):
    (tmp_path / "kconvert.toml").write_text('fail-on = "warnings"\n', encoding="utf-8")
    r = cli("inspect", str(TINY / "drafts" / "mla-torchspec"), cwd=tmp_path)
    assert r.returncode == 2
    assert "--fail-on" not in r.stderr and str(tmp_path / "kconvert.toml") in r.stderr and "'warning'" in r.stderr


def test_one_cell_is_not_one_cells():
    r = cli("matrix", str(TINY / "drafts" / "mla-torchspec"), "--target", str(TARGET), "--engines", "vllm:0.32",
            "--cache", "off", env={"COLUMNS": "120"})
    assert "1 cells" not in r.stdout and "1 cell" in r.stdout, r.stdout


# --- 5. 80 columns, for real ----------------------------------------------------------------------------------

def option_names() -> set[str]:
    """Every long option name of every command, from click's own command objects (not the help text)."""
    import typer

    from kconvert.cli import _register, app

    _register()
    group = typer.main.get_command(app)
    return {o for cmd in group.commands.values() for p in cmd.params for o in getattr(p, "opts", [])
            if o.startswith("--")}


@pytest.mark.parametrize("command", ["inspect", "verify", "fix", "matrix"])
def test_help_prose_never_splits_an_option_name(command):
    out = cli(command, "-h").stdout
    lines = out.splitlines()
    names = option_names()
    for a, b in zip(lines, lines[1:]):
        tail = a.rstrip().rsplit(" ", 1)[-1]
        head = b.strip().split(" ", 1)[0]
        if tail.startswith("--") and tail.endswith("-"):
            joined = (tail + head).rstrip(".,;:)")
            assert joined not in names, f"{joined} split over two lines:\n{a}\n{b}"


def test_engine_version_help_lists_every_engine_row():
    from kconvert.engines.expectations import KNOWN

    text = " ".join(cli("inspect", "-h").stdout.split())
    start = text.index("--engine-version")
    block = text[start:start + 600]
    for engine, rows in KNOWN.items():
        for version in rows:
            assert version in block, (engine, version, block)


def test_top_help_never_cuts_a_command_summary():
    out = cli("-h").stdout
    commands = out.split("Commands:", 1)[1]  # the Usage line's "[ARGS]..." is click's, not a cut
    assert "..." not in commands and "…" not in commands, out


def test_rules_help_promises_only_the_columns_it_prints():
    header = cli("rules").stdout.splitlines()[0].split()
    help_text = " ".join(cli("rules", "-h").stdout.split())
    promised = help_text.split("List every rule (", 1)[1].split(")", 1)[0]
    assert "summary" not in promised
    for col in ("id", "name", "category", "severity", "fix"):
        assert col in header and col in promised, (header, promised)


def test_concise_finding_lines_are_whole():
    # llama-specforge on tiny/target: each concise line carries its message and every evidence whole, on one line,
    # as ruff prints its message (issue #48: a line cut at 120 characters lost K405's one fact); the rules keep their
    # messages short enough for that (tests/test_messages.py)
    r = cli("inspect", str(SPECFORGE), "--target", str(TARGET), "--output-format", "concise", cwd=TINY)
    doc = json.loads(cli("inspect", str(SPECFORGE), "--target", str(TARGET), "--json").stdout)
    import re

    lines = [ln for ln in r.stdout.splitlines() if re.match(r"^\S+: K\d{3} ", ln)]
    assert len(lines) == len(doc["findings"]) >= 2, r.stdout
    for line, f in zip(lines, doc["findings"]):
        loc = line.split(": ", 1)[0]
        rest = line[len(loc) + 2:]
        assert rest.startswith(f"{f['id']} {f['severity']} [{f['category']}] {f['message']}"), line
        assert "…" not in line, line
        # the manual's form, "(where: observed → expected)": JSON values, a dash for none
        shown = ["—" if v is None else v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                 for e in f["evidence"] for v in (e["observed"], e["expected"])]
        for e, (o, x) in zip(f["evidence"], zip(shown[::2], shown[1::2])):
            assert f"{e['where']}: {o} → {x}" in rest, (line, e)


def test_matrix_at_80_columns_loses_no_id_and_prints_one_runnable_fix_per_draft(tmp_path):
    import fnmatch
    import re

    for run in ("a", "b"):
        (tmp_path / "runs" / run).mkdir(parents=True)
        shutil.copytree(SPECFORGE, tmp_path / "runs" / run / "epoch_1")
    r = cli("matrix", "runs/*/epoch_*", "--target", str(TARGET), "--cache", "off", cwd=tmp_path)
    doc = json.loads(cli("matrix", "runs/*/epoch_*", "--target", str(TARGET), "--cache", "off", "--json",
                         cwd=tmp_path).stdout)
    out = r.stdout
    assert "(cached)" not in out
    # every finding id of every cell is printed whole, on the line of its engine row
    for c in doc["cells"]:
        ids = sorted({f["id"] for f in c["findings"] if f["severity"] != "info"})
        label = f"{c['engine']} {c['engine_version']}"
        rows = [ln for ln in out.splitlines() if ln.strip().startswith(label + " ") or ln.strip() == label]
        assert rows, (label, out)
        for i in ids:
            assert any(re.search(rf"\b{i}\b", ln) for ln in rows), (i, label, out)
    fixes = [ln for ln in out.splitlines() if ln.startswith("next: kconvert fix ")]
    failing = [c for c in doc["cells"] if c["state"] == "fail" and (c.get("fix") or {}).get("command")]
    # issue 48: one line per draft, whatever number of rows it fails on: two drafts, each failing K404/K405 on every
    # vLLM row (both runners of 0.32 and 0.33, and 0.34), whose fixes write one output; the comment names the rows
    from kconvert.engines.expectations import KNOWN

    n = len(KNOWN["vllm"])
    assert len(failing) == 2 * n and len(fixes) == 2, out
    vllm_rows = sorted({f"{c['engine']}:{c['engine_version']}" for c in failing})
    assert len(vllm_rows) == n and all(r.startswith("vllm:") for r in vllm_rows), vllm_rows
    outputs = []
    for ln in fixes:
        command, why = ln[len("next: "):].split("  # ", 1)
        argv = shlex.split(command)
        assert "--engine-version" in argv
        assert all(r in why for r in vllm_rows) and "another output" not in why, why
        outputs.append(argv[argv.index("-o") + 1])
        # a whole command on one line: its last word is the last argument, not a wrapped fragment
    assert len(set(outputs)) == len(outputs), outputs
    # one folder under kconvert-fixed each, a runner row's /v1 included (not a nested v1 folder)
    assert all(o.count("/") == 1 for o in outputs), outputs
    # the installed engine's mark is on the row of the runner it runs (the CPU build: Model Runner V1)
    from kconvert.engines.expectations import default_runner
    from kconvert.engines.installed import installed_version
    if installed_version("vllm"):
        marked = [ln.split()[1] for ln in out.splitlines() if ln.strip().startswith("vllm ") and " * " in ln]
        assert marked and all(m.endswith("/v1") == (default_runner() == "v1") for m in marked), out
    assert not any(fnmatch.fnmatch(o, "runs/*/epoch_*") for o in outputs), outputs
    # the next lines run as printed (a dry run: nothing written)
    argv = shlex.split(fixes[1][len("next: "):].split("  # ", 1)[0])
    dry = cli(*argv[1:], "--dry-run", cwd=tmp_path)
    assert dry.returncode in (0, 1) and "error:" not in dry.stderr, dry.stderr
