"""examples/ci: the workflow parses and calls kconvert as documented; gate.sh maps every exit code."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CI = Path(__file__).resolve().parents[1] / "examples" / "ci"


def _workflow():
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((CI / "verify-draft.yml").read_text())


def test_workflow_parses_and_uploads_the_reports():
    wf = _workflow()
    triggers = wf.get("on", wf.get(True))  # PyYAML reads the bare key `on` as a boolean
    assert "workflow_dispatch" in triggers
    steps = wf["jobs"]["verify"]["steps"]
    run = next(s["run"] for s in steps if s.get("id") == "verify")
    assert "kconvert verify" in run and all(f in run for f in ("--report verify.json", "--junit verify.xml",
                                                               "--markdown verify.md", "--sarif verify.sarif"))
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and all(f in upload["with"]["path"]
                                              for f in ("verify.json", "verify.xml", "verify.md", "verify.sarif"))
    final = steps[-1]["run"]
    assert "exit 1" in final and "exit 3" in final and "exit 70" in final
    summary = next(s for s in steps if s.get("name") == "Step summary")["run"]
    assert "GITHUB_STEP_SUMMARY" in summary and "exit 1" in summary and "exit 3" in summary and "exit 70" in summary


def test_workflow_annotates_the_pull_request_and_uploads_sarif_to_code_scanning():
    wf = _workflow()
    steps = wf["jobs"]["verify"]["steps"]
    run = next(s["run"] for s in steps if s.get("id") == "verify")
    assert "--output-format github" in run
    sarif = next(s for s in steps if str(s.get("uses", "")).startswith("github/codeql-action/upload-sarif"))
    assert sarif["with"]["sarif_file"] == "verify.sarif" and sarif["if"].startswith("always()")
    assert wf["permissions"]["security-events"] == "write"


def test_workflow_checks_out_lfs_keeps_the_hf_cache_and_keeps_forks_off_the_gpu_runner():
    wf = _workflow()
    job = wf["jobs"]["verify"]
    checkout = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout"))
    assert checkout["with"]["lfs"] is True
    assert job["env"]["HF_HOME"] and "HF_HOME" in next(s["run"] for s in job["steps"] if "pip install" in s.get("run", ""))
    # a fork's pull request never runs on the self-hosted runner; a dispatch or a same-repository PR does
    assert "self-hosted" in job["runs-on"]
    cond = job["if"].replace(" ", "")
    assert cond == ("github.event_name!='pull_request'||"
                    "github.event.pull_request.head.repo.full_name==github.repository")


def test_workflow_inputs_left_empty_fall_back_to_their_defaults():
    """Each input reaches the job as `inputs.X || '<default>'` with the default the input declares, so an input
    emptied in the dispatch form (or absent on a pull request) means the default, never an empty argument."""
    import re

    wf = _workflow()
    triggers = wf.get("on", wf.get(True))
    inputs = triggers["workflow_dispatch"]["inputs"]
    env = wf["jobs"]["verify"]["env"]
    seen = set()
    for value in env.values():
        for name, fallback in re.findall(r"inputs\.(\w+) \|\| '([^']*)'", str(value)):
            seen.add(name)
            assert str(inputs[name]["default"]) == fallback, name
    string_inputs = {n for n, i in inputs.items() if i.get("type", "string") == "string"}
    assert string_inputs <= seen, string_inputs - seen
    # the lossless check is opt-in: a boolean input, off by default, mapped to the flag only when true
    assert inputs["lossless"]["type"] == "boolean" and inputs["lossless"]["default"] is False
    assert env["LOSSLESS"] == "${{ inputs.lossless && '--lossless' || '' }}"


@pytest.mark.parametrize("code, word", [(0, "PASSED"), (1, "FAILED"), (2, "ERROR"), (3, "ENGINE FAILURE"),
                                        (70, "INTERNAL ERROR"), (130, "UNEXPECTED")])
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
    assert "--sarif" in args and "--output-format" not in args  # kconvert picks the log's format by default


def test_gate_script_needs_a_draft_and_a_target(tmp_path):
    sh = shutil.which("dash") or shutil.which("sh")
    proc = subprocess.run([sh, str(CI / "gate.sh")], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert proc.returncode != 0 and "DRAFT" in proc.stderr


def test_gate_script_passes_the_output_format_and_keeps_stdout_for_it(tmp_path):
    """OUTPUT_FORMAT reaches kconvert; the script's own verdict line goes to stderr, so `gate.sh > report` holds
    only kconvert's output (a GitLab Code Quality file stays valid JSON)."""
    sh = shutil.which("dash") or shutil.which("sh")
    stub = tmp_path / "kconvert"
    stub.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\necho "[]"\nexit 0\n')
    stub.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "KCONVERT": str(stub), "DRAFT": "d", "TARGET": "t", "OUTPUT_FORMAT": "gitlab",
           "OUT_DIR": str(tmp_path / "out")}
    proc = subprocess.run([sh, str(CI / "gate.sh")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout == "[]\n" and "PASSED" in proc.stderr
    assert "--output-format gitlab" in (tmp_path / "args").read_text()
