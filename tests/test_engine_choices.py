"""Every place a user chooses an engine takes exactly the engines kconvert has rows for (issue #49 item 2: tokenspeed
joined vLLM and SGLang). Enumerated from the code: the commands' click parameters named --engine / --engines, the
rows of kconvert.engines.expectations.KNOWN, the server next-step table and the metrics each --server engine reads.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kconvert.engines.expectations import ENGINES, KNOWN, NEWEST, engine_rules

ROOT = Path(__file__).resolve().parents[1]
# `trace --engine` chooses who runs the target to record a trace (hf or vllm: kconvert/trace/sources.py), not the
# engine a draft is meant for; every other --engine is that choice.
TRACE_SOURCE = {("trace", "--engine")}


def _commands() -> dict:
    import typer

    from kconvert.cli import _register, app

    _register()
    group = typer.main.get_command(app)
    out = {}

    def walk(prefix: str, cmd) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(f"{prefix} {name}".strip(), sub)
        if not hasattr(cmd, "commands"):
            out[prefix] = cmd

    walk("", group)
    return out


ENGINE_PARAMS = [(name, p) for name, cmd in sorted(_commands().items()) for p in cmd.params
                 if "--engine" in p.opts and (name, "--engine") not in TRACE_SOURCE]


def test_every_engine_has_rows_and_a_newest_row():
    assert ENGINES == tuple(KNOWN) and set(NEWEST) == set(ENGINES)
    assert "tokenspeed" in ENGINES
    for engine in ENGINES:
        assert engine_rules(engine, NEWEST[engine]).engine == engine


@pytest.mark.parametrize("name, param", ENGINE_PARAMS, ids=[n for n, _ in ENGINE_PARAMS])
def test_every_engine_option_offers_exactly_the_engines_with_rows(name, param):
    from kconvert.errors import UsageError

    assert param.metavar == "[" + "|".join(ENGINES) + "]", name  # what --help shows
    # where each command's engine is checked: the row it chooses (kconvert.engines.expectations.engine_rules)
    for engine in ENGINES:
        assert engine_rules(engine).engine == engine
    with pytest.raises(UsageError) as e:
        engine_rules("tokenspeeed")
    assert all(engine in str(e.value) for engine in ENGINES) and "did you mean 'tokenspeed'" in str(e.value)


@pytest.mark.parametrize("name", sorted({n for n, _ in ENGINE_PARAMS}))
def test_every_command_refuses_an_unknown_engine_naming_every_choice(tmp_path, name):
    args = {"inspect": ["examples/tiny/drafts/llama-specforge"], "fix": ["examples/tiny/drafts/llama-specforge", "-o",
            str(tmp_path / "out")], "verify": ["examples/tiny/drafts/llama-specforge", "--target",
            "examples/tiny/target", "--dry-run"], "score": ["examples/tiny/drafts/llama-specforge", "--trace",
            "tests/data/trace-1.0"]}[name]
    r = subprocess.run([sys.executable, "-m", "kconvert", name, *args, "--engine", "tokenspeeed"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2, (name, r.stderr)
    assert all(e in r.stderr for e in ENGINES) and "did you mean 'tokenspeed'" in r.stderr, (name, r.stderr)


def test_the_engine_options_are_found():
    # inspect, fix, verify, score take --engine (their docs: docs/manual.md)
    assert {n for n, _ in ENGINE_PARAMS} >= {"inspect", "fix", "verify", "score"}


@pytest.mark.parametrize("engine", ENGINES)
def test_matrix_engines_takes_each_engine_and_all_includes_its_rows(engine):
    from kconvert.matrix.build import engine_rows

    rows = engine_rows(engine)
    assert rows and {r.engine for r in rows} == {engine}
    assert {r.key for r in rows} <= {r.key for r in engine_rows("all")}


@pytest.mark.parametrize("engine", ENGINES)
def test_verify_server_dry_run_takes_each_engine_and_names_where_its_figures_come_from(engine):
    r = subprocess.run([sys.executable, "-m", "kconvert", "verify", "--server", "http://127.0.0.1:9", "--engine", engine,
                        "--dry-run", "--prompts", "_smoke"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"would measure the {engine} server" in r.stdout


def test_each_server_engine_kconvert_does_not_start_has_its_next_lines_and_each_metrics_engine_its_names():
    from kconvert.engines.metrics import BY_ENGINE
    from kconvert.engines.serve_lines import SERVER_NEXT_LINES, serve_lines

    # vLLM is started by verify itself; every other engine is a server the user starts from kconvert's line
    assert set(SERVER_NEXT_LINES) == set(ENGINES) - {"vllm"}
    assert set(serve_lines("d", "t", k=3, tp=1, engine_aux_note=False)) == set(ENGINES)
    for engine, lines in SERVER_NEXT_LINES.items():
        launch, measure = lines("d", "t", k=3, tp=1)
        assert measure.endswith(f"--engine {engine} -k 3")
    # verify --server reads Prometheus counters for every engine but SGLang (its answers' meta_info)
    assert set(BY_ENGINE) == set(ENGINES) - {"sglang"}


def test_an_unknown_engine_names_every_choice():
    from kconvert.errors import UsageError

    with pytest.raises(UsageError) as e:
        engine_rules("tokenspeeed")
    for engine in ENGINES:
        assert engine in str(e.value)


def _engine_enums(node, path=""):
    """Every `engine` / `engine.name` property with an enum in a schema, with its JSON path."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("engine", "name") and isinstance(value, dict) and "enum" in value and \
                    (key == "engine" or path.endswith("engine/properties")):
                yield f"{path}/{key}", value["enum"]
            yield from _engine_enums(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _engine_enums(value, f"{path}/{i}")


@pytest.mark.parametrize("schema", ["report", "matrix"])
def test_every_schema_enum_of_engines_is_the_engines_with_rows(schema):
    from kconvert.schemas import load_schema

    found = list(_engine_enums(load_schema(schema)))
    assert found, schema
    for path, enum in found:
        assert tuple(enum) == ENGINES, (schema, path)


@pytest.mark.parametrize("key", [r.key for r in __import__("kconvert.engines.expectations",
                                                           fromlist=["ALL_ROWS"]).ALL_ROWS])
def test_fix_on_every_row_writes_ids_its_own_inspect_reads_back_as_the_same_streams(tmp_path, key):
    """Ids that name the stream after the last layer (nvidia/gpt-oss-120b-Eagle3-v3's [24, 30, 36] shape, here on
    the tiny 8-layer target: [2, 5, 8] as SGLang's GPT-OSS capture reads them): fix writes them in each row's own
    numbering (tokenspeed's is neither convention alone: [1, 4, 8]), and its kconvert.json lets a later inspect on
    the same row read them back as the streams the draft was trained on, so fix's self-check passes."""
    import kconvert
    from tests.factories import make_draft, make_target

    import json

    engine, version = key.split(" ", 1)
    row = engine_rules(engine, version)
    # the tiny target as a GPT-OSS model (its config's model_type is what target_family reads): the family whose
    # final stream vLLM, SGLang since #32334 and tokenspeed collect
    target = make_target(tmp_path / "target")
    cfg = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**cfg["text_config"], "model_type": "gpt_oss",
                                                    "architectures": ["GptOssForCausalLM"]}))
    from kconvert.targets import load_target

    if "gpt_oss" not in row.final_boundary or load_target(str(target)).num_hidden_layers != 8:
        pytest.skip(f"{key} does not collect the stream after the last layer of a GPT-OSS target")
    aux = "eagle_aux_hidden_state_layer_ids"
    draft = make_draft(tmp_path / "d", "specforge", config=lambda c: c["eagle_config"].__setitem__(aux, [1, 4, 7]))
    streams = [2, 5, 8]  # SpecForge's ids are output-of-layer ids: streams = ids + 1
    out = tmp_path / "out"
    res = kconvert.fix(str(draft), out, target=str(target), engine=engine, engine_version=version, durable=False)
    again = kconvert.inspect(str(out if res.written else draft), target=str(target), engine=engine,
                             engine_version=version)
    # settled: no reading left open, no shift (a later inspect reads fix's record of these very ids)
    assert not [f.message for f in again.findings if f.id == "K404"], key
    from kconvert.engines.fed_streams import fed_ids

    fed, _ = fed_ids(again.draft, row, 8, again.target)
    collectable = row.collectable(8, again.target)
    want = [s for s in streams if collectable[0] <= s <= collectable[1]]
    assert sorted(s for s in fed if collectable[0] <= s <= collectable[1]) == want, (key, fed)


def test_every_engine_has_a_label_and_the_server_labels_are_those():
    from kconvert.engines.expectations import ENGINE_LABELS
    from kconvert.engines.serve_lines import SERVER_LABEL

    assert set(ENGINE_LABELS) == set(ENGINES)
    assert all(SERVER_LABEL[e] == ENGINE_LABELS[e] for e in SERVER_LABEL)
