"""`--json` everywhere (issue #48 item 6): every command with a --json option is enumerated from click's command
tree; its --json help names the schema(s) of what it prints (schemas/); a run that succeeds prints one JSON
document valid against one of them, and a run that fails prints one JSON object on stdout (the error object,
schemas/error.schema.json, or the command's own document with its exit code, as a matrix with an error cell).

The failing runs are built from each command's own parameters (a path that does not exist for every argument,
a placeholder for every required option), so a new command is checked the day it exists; the succeeding runs need
real inputs, one line each in SUCCEEDS, and a command with --json that has none there fails
`test_every_json_command_has_a_run_that_succeeds`."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests import printed

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "examples" / "tiny"
SCHEMA = re.compile(r"schemas/([\w-]+)\.schema\.json")


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch, tmp_path):
    for var in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE", "KCONVERT_OUTPUT_FORMAT", "KCONVERT_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    # (no HF_HUB_OFFLINE here: huggingface_hub reads it once, at its import, for the whole process)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def json_commands() -> dict[str, object]:
    from kconvert.cli import _built, _register

    _register()
    return {name: cmd for name, cmd in sorted(_built(None).commands.items())
            if any("--json" in getattr(p, "opts", []) for p in cmd.params)}


def schemas_of(cmd) -> list[str]:
    """The schemas the --json help names, the error object's left out (every command's failures)."""
    param = next(p for p in cmd.params if "--json" in getattr(p, "opts", []))
    return [s for s in SCHEMA.findall(param.help or "") if s != "error"]


COMMANDS = json_commands()


def test_every_json_command_names_a_schema_that_exists():
    assert {"inspect", "fix", "verify", "score", "trace", "matrix", "push", "push-trace", "acceptance", "rules"} \
        <= set(COMMANDS)
    for name, cmd in COMMANDS.items():
        named = schemas_of(cmd)
        assert named, f"{name} --json names no schema"
        for s in named:
            assert (ROOT / "kconvert" / "schemas" / f"{s}.schema.json").is_file(), (name, s)


def failing_argv(cmd, tmp: Path) -> list[str]:
    """The command with every argument a path that does not exist and every required option a placeholder."""
    argv: list[str] = []
    for p in cmd.params:
        if getattr(p, "param_type_name", "") == "argument":
            argv += [str(tmp / "no-such-input")] * (p.nargs if p.nargs > 0 else 1)
        elif p.required:
            argv += [p.opts[0], str(tmp / "no-such-input")]
    return argv


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_failure_under_json_is_one_json_object_on_stdout(name, tmp_path):
    from kconvert.schemas import validate

    cmd = COMMANDS[name]
    r = printed.run([name, *failing_argv(cmd, tmp_path), "--json"], tmp_path)
    assert r.rc != 0, (name, r.out[:500])
    doc = json.loads(r.out)  # one object: anything else on stdout fails here
    if doc.get("verdict") == "error" and "error" in doc:
        validate(doc, "error")
        assert doc["exit_code"] == r.rc and doc["command"] == name, doc
    else:  # the command's own document, reporting the failure itself (a matrix's error cell)
        errors = []
        for s in schemas_of(cmd):
            try:
                validate(doc, s)
                break
            except Exception as e:  # noqa: BLE001
                errors.append(str(e))
        else:
            raise AssertionError(f"{name}: {errors}")
        assert doc.get("exit_code") == r.rc


def _push_inputs(tmp: Path) -> list[str]:
    from tests.test_push import make_checkpoint, make_report, write_report

    folder = make_checkpoint(tmp / "draft")
    report = write_report(tmp / "verify.json", make_report(folder))
    return [str(folder), "org/draft", "--report", str(report), "--dry-run"]


def _score_inputs(tmp: Path) -> list[str]:
    pytest.importorskip("torch")
    from tests.factories import make_draft
    from tests.score_factories import random_trace

    return [str(make_draft(tmp / "d", "torchspec")), "--trace", str(random_trace(tmp / "t")), "--skip-static"]


SUCCEEDS = {
    "inspect": lambda tmp: [str(TINY / "drafts" / "mla-torchspec"), "--target", str(TINY / "target")],
    "fix": lambda tmp: [str(TINY / "broken" / "aux-ids-sglang-convention"), "--target", str(TINY / "target"),
                        "-o", str(tmp / "fixed")],
    "verify": lambda tmp: [str(TINY / "drafts" / "mla-torchspec"), "--target", str(TINY / "target"), "--dry-run"],
    "score": _score_inputs,
    "trace": lambda tmp: ["kimi-k2.5", "--estimate", "--positions", "100"],
    "matrix": lambda tmp: [str(TINY / "drafts" / "mla-torchspec"), "--target", str(TINY / "target"),
                           "--engines", "vllm:0.33", "--cache", "off"],
    "push": _push_inputs,
    "push-trace": lambda tmp: [str(ROOT / "tests" / "data" / "trace-1.0"), "org/trace", "--dry-run"],
    "acceptance": lambda tmp: [str(ROOT / "tests" / "data" / "vllm_metrics_after.txt"), "--before",
                               str(ROOT / "tests" / "data" / "vllm_metrics_before.txt")],
    "rules": lambda tmp: ["K405"],
}


def test_every_json_command_has_a_run_that_succeeds():
    assert sorted(set(COMMANDS) - set(SUCCEEDS)) == []


@pytest.mark.parametrize("name", [n for n in SUCCEEDS if n in COMMANDS])
def test_a_success_under_json_is_valid_against_its_schema(name, tmp_path):
    from kconvert.schemas import validate

    r = printed.run([name, *SUCCEEDS[name](tmp_path), "--json"], tmp_path)
    assert r.rc in (0, 1), (name, r.err[-800:])
    doc = json.loads(r.out)
    named = schemas_of(COMMANDS[name])
    problems = []
    for s in named:
        try:
            validate(doc, s)
            break
        except Exception as e:  # noqa: BLE001
            problems.append(f"{s}: {e}")
    else:
        raise AssertionError(f"{name} --json matches none of {named}: {problems}")
    if name == "rules":  # one rule's document; the list is each rule's too
        listed = json.loads(printed.run(["rules", "--json"], tmp_path).out)
        validate(listed, "rules")


def test_trace_without_torch_answers_json(tmp_path):
    """`trace --json` on a core install printed nothing on stdout: the missing package was raised before the
    command recorded its format. Hidden torch, as on a core install (the meta path finder of
    tests/test_distribution_name.py)."""
    import subprocess
    import sys

    from kconvert.schemas import validate

    code = ("import sys\n"
            "class NoTorch:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "from kconvert.cli import entry\n"
            "sys.argv = ['kconvert'] + sys.argv[1:]\n"
            "entry()\n")
    r = subprocess.run([sys.executable, "-c", code, "trace", str(TINY / "target"), "--prompts", "_smoke",
                        "-o", str(tmp_path / "t"), "--json"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 3, r.stderr
    doc = json.loads(r.stdout)
    validate(doc, "error")
    assert doc["command"] == "trace" and doc["error"]["type"] == "MissingPackageError"
    shutil.rmtree(tmp_path / "t", ignore_errors=True)
