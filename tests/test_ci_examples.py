"""examples/ci: the workflow parses and calls kconvert as documented; gate.sh maps every exit code."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CI = Path(__file__).resolve().parents[1] / "examples" / "ci"


def test_workflow_parses_and_uploads_the_three_reports():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((CI / "verify-draft.yml").read_text())
    triggers = wf.get("on", wf.get(True))  # PyYAML reads the bare key `on` as a boolean
    assert "workflow_dispatch" in triggers
    steps = wf["jobs"]["verify"]["steps"]
    run = next(s["run"] for s in steps if s.get("id") == "verify")
    assert "kconvert verify" in run and all(f in run for f in ("--report verify.json", "--junit verify.xml",
                                                               "--markdown verify.md"))
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and all(f in upload["with"]["path"] for f in ("verify.json", "verify.xml", "verify.md"))
    final = steps[-1]["run"]
    assert "exit 1" in final and "exit 3" in final
    summary = next(s for s in steps if s.get("name") == "Step summary")["run"]
    assert "GITHUB_STEP_SUMMARY" in summary and "exit 1" in summary and "exit 3" in summary


@pytest.mark.parametrize("code, word", [(0, "PASSED"), (1, "FAILED"), (2, "ERROR"), (3, "ENGINE FAILURE"), (130, "UNEXPECTED")])
def test_gate_script_maps_exit_codes(tmp_path, code, word):
    sh = shutil.which("dash") or shutil.which("sh")
    stub = tmp_path / "kconvert"
    stub.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\nexit {code}\n')
    stub.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "KCONVERT": str(stub), "DRAFT": "./my draft", "TARGET": "kimi-k2.5",
           "TP": "8", "MIN_AL": "2.8", "OUT_DIR": str(tmp_path / "out")}
    proc = subprocess.run([sh, str(CI / "gate.sh"), "--max-prompts", "4"], env=env, capture_output=True, text=True)
    assert proc.returncode == code
    assert word in proc.stdout + proc.stderr
    args = (tmp_path / "args").read_text()
    assert args.startswith("verify ./my draft --target kimi-k2.5 --tp 8")
    assert "--junit" in args and "--markdown" in args and "--max-prompts 4" in args and "--min-acceptance-length 2.8" in args


def test_gate_script_needs_a_draft_and_a_target(tmp_path):
    sh = shutil.which("dash") or shutil.which("sh")
    proc = subprocess.run([sh, str(CI / "gate.sh")], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert proc.returncode != 0 and "DRAFT" in proc.stderr
