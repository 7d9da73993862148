"""Every command kconvert prints for a user runs as printed and does what its comment says (tests/printed.py).

Over every zoo draft (built as tests/test_zoo.py builds them) and every shipped example draft and broken variant,
for every engine row: the `next:` lines of inspect and `verify --dry-run`, the lines those commands print in turn
(fix's own next line, after the fix ran), hint commands, the commands quoted in rule texts and the `--help`
examples that name files a user has. Run in-process (`kconvert.cli.main`); about 40 s on 2 shared cores, almost
all of it the fix lines writing Kimi-sized (sparse) checkpoints, hashing included.

The same collector measured main before this change (`printed.collect(..., baseline=True)`, verify lines run up to
the engine start): 116 printed commands, 48 of them failed as printed.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from kconvert.engines.expectations import ALL_ROWS
from tests import printed

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    for var in ("GITHUB_ACTIONS", "GITHUB_WORKSPACE", "KCONVERT_OUTPUT_FORMAT", "KCONVERT_DEBUG"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("printed")
    return root, printed.workspace(root)


def test_every_printed_next_line_runs_as_printed_on_every_draft_and_engine_row(workspace):
    root, pairs = workspace
    c = printed.collect(root, ALL_ROWS, pairs=pairs)
    print(c.summary())
    assert not c.failed(), c.summary()
    kinds = {shlex.split(o.printed.command)[1] for o in c.outcomes}
    # fix lines ran in full, verify lines as dry runs, score lines up to the trace, rules lines
    assert {"fix", "verify", "score", "rules"} <= kinds, kinds
    assert len(c.outcomes) >= 150, len(c.outcomes)


def test_commands_quoted_in_rule_texts_run(workspace):
    """A rule's why/fix text that quotes a kconvert command names one that parses and runs (its options exist)."""
    from kconvert.rules import REGISTRY

    root, _ = workspace
    quoted = sorted({c for r in REGISTRY.values() for c in printed.QUOTED.findall(f"{r.why} {r.fix} {r.summary}")})
    for cmd in quoted:
        argv = shlex.split(cmd)[1:]
        # a bare `kconvert verify --diagnose` names a flag: check the command knows it
        r = printed.run([*argv[:1], "--help"], root)
        assert r.rc == 0, cmd
        for flag in [a for a in argv[1:] if a.startswith("--")]:
            assert flag in r.out, (cmd, flag)


def test_rule_texts_cite_nothing_a_pip_install_lacks():
    """A rule's text cites public sources or files shipped in the package, never the repository's examples or
    READMEs, which a pip install does not have."""
    from kconvert.rules import REGISTRY

    for r in REGISTRY.values():
        text = f"{r.summary} {r.why} {r.fix}"
        assert not re.search(r"examples/|README|tests/", text), (r.id, text)


def test_help_examples_that_name_shipped_files_run(tmp_path, monkeypatch):
    """`--help` examples over the shipped example run as printed (in a copy of the repository's examples/)."""
    import shutil

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # matrix's cell cache, not the user's

    shutil.copytree(ROOT / "examples" / "tiny", tmp_path / "examples" / "tiny",
                    ignore=shutil.ignore_patterns("*.md"))
    ran = 0
    for command, line in printed.iter_help_examples():
        argv = shlex.split(line)
        paths = [a for a in argv if a.startswith("examples/")]
        if not paths or command not in ("inspect", "verify", "fix", "matrix"):
            continue
        args = argv[1:] + (["--dry-run"] if command == "verify" else [])
        r = printed.run(args, tmp_path)
        assert r.rc == 0, (line, r.err)
        ran += 1
    assert ran >= 1


def _hub_cache(root: Path, repo_id: str, folder: Path) -> Path:
    """A Hugging Face cache holding `folder` as `repo_id` (huggingface_hub's layout; blobs hard-linked, so a
    Kimi-sized sparse replica costs no disk)."""
    repo = root / "hub" / f"models--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in folder.iterdir():
        blob = repo / "blobs" / hashlib.sha256(f.name.encode()).hexdigest()
        os.link(f, blob)
        os.symlink(os.path.relpath(blob, snap), snap / f.name)
    return root


def _offline_hub(monkeypatch, root: Path) -> None:
    """huggingface_hub reads its cache folder and offline flag into `constants` at import (an earlier test may
    have imported it): set both the environment and those constants."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HOME", str(root))
    monkeypatch.setenv("HF_HUB_CACHE", str(root / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def test_aqmedai_kimi_k25_goes_from_inspect_to_a_vllm_draft_by_following_printed_lines(tmp_path, monkeypatch):
    """The seed's AQ-MedAI/Kimi-K25-eagle3 (its replica, served from an offline Hub cache under its Hub id):
    `kconvert inspect` recommends the reading vLLM PR #35966 measured, and the printed lines alone lead to a
    written vLLM draft whose inspect no longer needs the decision, and to a preflight of the live check."""
    from tests.zoo.aqmedai_kimi_k25_eagle3.build import build

    replica = build(tmp_path / "replica")
    _offline_hub(monkeypatch, _hub_cache(tmp_path / "hf", "AQ-MedAI/Kimi-K25-eagle3", replica))
    work = tmp_path / "work"
    work.mkdir()

    r = printed.run(["inspect", "AQ-MedAI/Kimi-K25-eagle3", "--target", "kimi-k2.5", "--output-format", "concise"],
                    work)
    assert r.rc == 0, r.err
    lines = printed.next_lines(r.out, "inspect", work)
    fix_line = lines[0]
    assert fix_line.command.startswith("kconvert fix AQ-MedAI/Kimi-K25-eagle3 ")
    assert "--aux-convention input" in fix_line.command
    # the recommendation names the measurement and says the other reading was never measured
    assert "vLLM PR #35966" in fix_line.why and "51.78%" in fix_line.why and "no public run measured" in fix_line.why
    confirm = [p.command for p in lines[1:]]
    assert any(c.startswith("kconvert verify ") and "--diagnose" in c and "--trust-remote-code" in c
               for c in confirm), confirm
    assert any(c.startswith("kconvert score ") and "--diagnose" in c and "--trace" in c for c in confirm), confirm

    r = printed.run(shlex.split(fix_line.command)[1:] + ["--output-format", "concise"], work)
    assert r.rc == 0, r.err
    out = work / shlex.split(fix_line.command)[4]
    cfg = json.loads((out / "config.json").read_text())
    # vLLM reads the top-level key first: the ids the record measured, now where every runner reads them
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    prov = json.loads((out / "kconvert.json").read_text())
    assert prov["decisions"]["aux_convention"] == "input" and prov["left_as_is"] == []

    verify_line = printed.next_lines(r.out, "fix", work)[0]
    assert verify_line.command.startswith(f"kconvert verify {out.name} ") and "--trust-remote-code" in verify_line.command
    assert "--aux-convention" not in verify_line.command  # the output records it; inspect repeats no flag
    r = printed.run(shlex.split(verify_line.command)[1:] + ["--dry-run", "--json"], work)
    assert r.rc == 0, r.err
    doc = json.loads(r.out)
    assert [f["id"] for f in doc["findings"] if f["id"] in ("K404", "K405")] == []
    assert doc["dry_run"]["engine_args"]["trust_remote_code"] is True
    assert doc["dry_run"]["engine_args"]["model"] == "moonshotai/Kimi-K2.5"
    assert "vllm serve moonshotai/Kimi-K2.5" in doc["dry_run"]["serve_line"]


def test_fix_help_first_example_works_on_the_aqmedai_replica(tmp_path, monkeypatch):
    from tests.zoo.aqmedai_kimi_k25_eagle3.build import build

    replica = build(tmp_path / "replica")
    _offline_hub(monkeypatch, _hub_cache(tmp_path / "hf", "AQ-MedAI/Kimi-K25-eagle3", replica))
    first = next(line for command, line in printed.iter_help_examples() if command == "fix")
    assert first.startswith("kconvert fix AQ-MedAI/Kimi-K25-eagle3 ")
    r = printed.run(shlex.split(first)[1:], tmp_path)
    assert r.rc == 0, r.err
    assert (tmp_path / "kimi-draft-vllm" / "kconvert.json").is_file()


def test_verify_dry_run_starts_nothing_imports_no_engine_and_exits_by_the_static_verdict(tmp_path):
    """On a core install: no vLLM import (checked in a fresh interpreter), 0 for a static pass, 1 for static
    errors, 2 for bad input, never 3; --json is a valid report with the planned engine arguments."""
    import subprocess

    from kconvert.schemas import validate

    code = (
        "import sys, json\n"
        "from kconvert.cli import main\n"
        "rcs = [main(['verify', 'examples/tiny/drafts/mla-torchspec', '--target', 'examples/tiny/target', "
        "'--dry-run', '--json']),\n"
        "       main(['verify', 'examples/tiny/broken/d2t-absolute', '--target', 'examples/tiny/target', "
        "'--dry-run', '--output-format', 'concise']),\n"
        "       main(['verify', 'examples/tiny/no-such-draft', '--target', 'examples/tiny/target', '--dry-run']),\n"
        "       main(['verify', '--server', 'http://localhost:30000', '--engine', 'sglang', '-k', '3', '--dry-run'])]\n"
        "print('RCS', rcs, 'vllm' in sys.modules, 'torch' in sys.modules, file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("RCS")][0]
    assert line == "RCS [0, 1, 2, 0] False False", p.stderr
    doc, _ = json.JSONDecoder().raw_decode(p.stdout)  # the first command's report comes first
    validate(doc, "report")
    assert doc["dry_run"]["would_start"] is True and doc["live"] is None
    assert doc["dry_run"]["engine_args"]["speculative_config"]["method"] == "eagle3"
    assert "would measure the sglang server at http://localhost:30000" in p.stdout


def test_sglang_launch_lines_are_validated_against_the_files_and_the_verify_line_after_them(tmp_path):
    """A launch line is not run (no SGLang here): the draft it names must exist after the fix line ran, and its
    chain (steps, topk 1, steps + 1 draft tokens) must match the -k of the verify --server line printed next."""
    (tmp_path / "zoo" / "d-sglang").mkdir(parents=True)
    verify = printed.Printed("kconvert verify --server http://localhost:30000 --engine sglang -k 3", "", "t", tmp_path)

    def check(line: str) -> printed.Outcome:
        p = printed.Printed(line, "", "t", tmp_path, following=verify)
        return printed.check_sglang_line(p, shlex.split(line))

    base = ("python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 --speculative-algorithm EAGLE3 "
            "--speculative-draft-model-path {d} --speculative-num-steps {k} --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens {n}")
    assert check(base.format(d="zoo/d-sglang", k=3, n=4)).ok
    assert "does not exist" in check(base.format(d="zoo/missing-sglang", k=3, n=4)).detail
    assert "verify -k 3" in check(base.format(d="zoo/d-sglang", k=4, n=5)).detail
    assert "drafts a chain" in check(base.format(d="zoo/d-sglang", k=3, n=3)).detail


def test_score_diagnose_prints_a_fix_line_that_runs_as_printed(tmp_path):
    """`score --diagnose` with a tiny trace (a few seconds): the line it prints to apply the best reading runs as
    printed, repairs what it says, and its own next line (verify of the output) passes as a dry run. The trace
    names its target by the tiny-target folder name under tests (the factory's record), so that folder is where
    the user's target is. A Llama-layer draft: the trace comes from the independent reference forward
    (tests/eagle3_reference.py), which is written for Llama layers."""
    pytest.importorskip("torch")
    from tests.factories import make_draft, make_target
    from tests.score_factories import consistent_trace
    from tests.test_score import _ids, _reading

    make_target(tmp_path / "tests" / "tiny-target")
    good = make_draft(tmp_path / "good", "torchspec", config=lambda c: _ids(c, [2, 5, 7]))
    trace = consistent_trace(tmp_path / "trace", good, _reading(good)[1], work=tmp_path)
    make_draft(tmp_path / "b", "torchspec", config=lambda c: (
        c.pop("eagle_aux_hidden_state_layer_ids"), c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[1, 4, 6])))
    r = printed.run(["score", "b", "--trace", trace.name, "--diagnose", "--report", "score.json",
                     "--output-format", "concise"], tmp_path)
    assert r.rc == 1, r.err  # the draft as written fails (K404 error); the diagnosis names the repair
    (line,) = [ln.split("apply it with: ", 1)[1] for ln in r.out.splitlines() if "apply it with: " in ln]
    assert line.startswith("kconvert fix b -o b-fixed ") and "--aux-ids 2,5,7" in line
    c = printed.Collector()
    c.follow(printed.Printed(line, "repairs K404", "score --diagnose", tmp_path))
    assert not c.failed(), c.summary()
    # the fix ran in full (K404 gone on re-inspect of b-fixed), then its verify line as a dry run
    assert sorted(o.printed.command.split()[1] for o in c.outcomes) == ["fix", "verify"]


def _options(command: str) -> set[str]:
    """The options a kconvert command takes, from its click parameters."""
    import typer

    from kconvert.cli import _register, app

    _register()
    cmd = typer.main.get_command(app).commands[command]
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


def _on_row(argv: list[str], row: str) -> list[str]:
    """A fix line made for another engine row: its --engine and --engine-version replaced."""
    engine, version = row.split(":", 1)
    out: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("--engine", "-e", "--engine-version"):
            next(it)
        else:
            out.append(a)
    return out + ["--engine", engine, "--engine-version", version]


def _planned(argv: list[str], cwd: Path) -> tuple[list[dict], int]:
    """What a fix line would do, by its own dry run's report: the ops (without their reasons) and its exit."""
    r = printed.run([*argv[1:], "--dry-run", "--json"], cwd)
    doc = json.loads(r.out)
    assert doc.get("fix"), (argv, doc)
    return [{k: v for k, v in op.items() if k != "reason"} for op in doc["fix"]["ops"]], r.rc


def test_the_matrix_prints_one_next_line_per_draft_and_each_fix_serves_every_row_it_names(workspace):
    """Issue 48: `kconvert matrix` over every zoo and example draft (each with its own target, through --from) on
    every engine row prints one `next:` line per draft with a fix, whatever number of rows it fails on. Every fix
    command the document holds (the next line and the others the page's draft card shows) plans, as printed, what
    the fix line of each row it says it serves plans (their dry runs' reports), and exits as its comment says. The
    examples' lines run in full: the output, inspected on each row the command serves, no longer carries what that
    row's own fix repairs, and passes there unless that row's comment says fix exits 1. The options the comment
    names exist."""
    root, pairs = workspace
    (root / "drafts.txt").write_text("".join(f"{d} {t or ''}\n" for d, t in pairs))
    r = printed.run(["matrix", "--from", "drafts.txt", "--engines", "all", "--cache", "off",
                     "--report", "matrix.json"], root)
    assert r.rc in (0, 1), r.err
    doc = json.loads((root / "matrix.json").read_text())
    lines = printed.next_lines(r.out, "matrix", root)
    with_fix = [d for d in doc["drafts"] if d["fixes"]]
    assert len(with_fix) >= 10 and len(lines) == len(with_fix), r.out
    failing_cells = [c for c in doc["cells"] if c["state"] == "fail" and (c.get("fix") or {}).get("command")]
    assert len(failing_cells) > 2 * len(lines)  # the rows of a draft share a line
    fix_options, matrix_options = _options("fix"), _options("matrix")
    for line, d in zip(lines, with_fix):
        assert shlex.split(line.command)[2] == d["draft"] and line.command == d["fix_command"]
        assert line.why == d["fixes"][0]["why"]
        # the rows it serves, named; the rows of the draft's other outputs, named as such
        assert f"on {', '.join(d['fixes'][0]['rows'])}" in line.why.split(";")[0], line.why
        for other in d["fixes"][1:]:
            assert ", ".join(other["rows"]) in line.why.split("serve", 1)[1], line.why
        # the options a comment names: the fix line's own (inspect's comment on it), the matrix's where it says
        # where the other lines are
        fix_part, *where = re.split(r"\((?:its fix line|their fix lines): ", line.why)
        where = " ".join(where)
        assert bool(where) == (len(d["fixes"]) > 1), line.why
        assert set(re.findall(r"--[a-z][a-z-]+", fix_part)) <= fix_options, line.why
        assert set(re.findall(r"--[a-z][a-z-]+", where)) <= matrix_options, line.why
    # every failing cell with a fix is served by exactly one of its draft's commands, the one the cell names
    for c in failing_cells:
        d = next(x for x in doc["drafts"] if x["draft"] == c["draft"])
        row = f"{c['engine']}:{c['engine_version']}"
        serving = [f for f in d["fixes"] if row in f["rows"]]
        assert len(serving) == 1 and serving[0]["command"] == c["fix"]["command"], (row, d["fixes"])

    target = dict(pairs)
    collector = printed.Collector()
    for d in with_fix:
        for f in d["fixes"]:
            argv = shlex.split(f["command"])
            # as printed, planned: the exit its comment names; then on each row it serves, the same plan
            want, rc = _planned(argv, root)
            assert rc == (1 if "fix exits 1" in f["why"] else 0), (f["command"], rc)
            for row in f["rows"]:
                assert _planned(_on_row(argv, row), root)[0] == want, (f["command"], row)
            if not d["draft"].startswith("examples/"):
                # a zoo replica is Kimi-sized: writing one takes seconds, and the main test above writes each of
                # these drafts' fix lines on every row already; the examples are written and read back here
                continue
            collector.follow(printed.Printed(f["command"], f["why"], f"matrix {d['draft']}", root))
            assert not collector.failed(), collector.summary()
            out = printed.option(argv, "-o")
            for row in f["rows"]:
                engine, version = row.split(":", 1)
                cell = next(c for c in doc["cells"] if c["draft"] == d["draft"] and c.get("kind") == "static"
                            and (c["engine"], c["engine_version"]) == (engine, version))
                flags = ["--target", target[d["draft"]]] if target[d["draft"]] else []
                again = printed.run(["inspect", out, *flags, "--engine", engine, "--engine-version", version,
                                     "--json"], root)
                report = json.loads(again.out)
                assert "findings" in report, (f["command"], row, report)
                left = {x["id"] for x in report["findings"] if x["severity"] != "info"} & set(cell["fix"]["repairs"])
                assert not left, (f["command"], row, left)
                # as the row's own fix line would leave it: passing, unless its comment says fix exits 1
                assert again.rc == (1 if "fix exits 1" in cell["fix"]["why"] else 0), (f["command"], row, report)
            collector.clear_written()
    print(collector.summary())
