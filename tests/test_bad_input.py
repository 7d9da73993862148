"""Bad input exits 2 or is refused, by class (issue #45, classes 3 and 6).

- Numeric options: every numeric option of every command, enumerated from the click tree kconvert builds, declares
  a range (min and max) that `--help` shows, and refuses at parse time, with exit 2 and one error line, what no
  count, duration, rate or length can be: NaN, infinities, negative numbers; 0 and huge values as its range says. A
  new numeric option without a range fails here.
- Strict JSON: NaN, Infinity, -Infinity, a number beyond a double and a lone surrogate escape, anywhere in any JSON
  kconvert reads from a checkpoint (the draft's config, the target's config, the index, kconvert.json), exit 2 with
  one line naming the file; a config kconvert accepts is written back as strict JSON.
- Hub ids: ids huggingface_hub's own validator refuses, and names too long for the file system, as the draft, the
  target and push's repository: exit 2, one line.
- Sizes: each size a config gives (enumerated from the int fields of the canonical models, `DraftModel` and
  `TargetModel`), far beyond any model, exits 2 naming the key, for the draft and for the target, before it sizes
  an allocation (a target's vocab_size sized fix's t2d mask: 2^40 exited 70, "Unable to allocate").
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
from pathlib import Path
from typing import get_args, get_origin

import pytest

from kconvert.cli import _output, _register, _built, main
from tests.factories import make_draft, make_target


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        _output.console.file, _output.err_console.file = out, err
        try:
            rc = main(argv)
        finally:
            _output.console.file = _output.err_console.file = None
    return rc, out.getvalue(), err.getvalue()


def one_error_line(err: str) -> str:
    """The one line that says what is wrong: kconvert's `error:` or click's usage `Error:`."""
    lines = [ln for ln in err.splitlines() if ln.lower().startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


# ---------------------------------------------------------------------------------------------- numeric options

def numeric_options() -> list[tuple[str, object, type]]:
    _register()
    root = _built(None)
    found = []
    for name, cmd in sorted(root.commands.items()):
        for p in cmd.params:
            a = p.type_descriptor.annotation
            if get_origin(a) is list:
                a = get_args(a)[0]
            if a in (int, float):
                found.append((name, p, a))
    return found


NUMERIC = numeric_options()
IDS = [f"{name} {p.opts[0]}" for name, p, _ in NUMERIC]


def test_the_click_tree_has_numeric_options():
    # the enumeration itself: verify's -k and --timeout are among them (a derivation from `kconvert verify -h`)
    assert {"verify --num-speculative-tokens", "verify --timeout", "matrix --workers"} <= {
        f"{n} {o}" for n, p, _ in NUMERIC for o in p.opts}


@pytest.mark.parametrize("name,param,kind", NUMERIC, ids=IDS)
def test_every_numeric_option_declares_a_finite_range(name, param, kind):
    info = param.type_descriptor.parameter_info
    assert info.min is not None and info.max is not None, f"{name} {param.opts[0]}: no range declared"
    assert math.isfinite(info.min) and math.isfinite(info.max) and info.min <= info.max
    # no count, duration, rate or length is negative
    assert info.min >= 0


def required_args(name: str) -> list[str]:
    """A value for each required argument and option of command `name`, so that parsing reaches the others."""
    cmd = _built(None).commands[name]
    args = ["x" for p in cmd.params if p.required and not p.opts[0].startswith("-")]
    return args + [a for p in cmd.params if p.required and p.opts[0].startswith("-") for a in (p.opts[0], "x")]


def parse(name: str, argv: list[str]):
    """Parse `kconvert NAME ARGV` as the command line does, without running the command."""
    return _built(None).commands[name].make_context(name, required_args(name) + argv)


def refusal(name: str, param, value: str):
    from typer._click.exceptions import BadParameter

    try:
        parse(name, [param.opts[0], value])
    except BadParameter as e:
        assert e.param is not None and e.param.name == param.name, e
        return e
    return None


@pytest.mark.parametrize("name,param,kind", NUMERIC, ids=IDS)
def test_every_numeric_option_refuses_what_no_count_duration_or_rate_can_be(name, param, kind):
    info = param.type_descriptor.parameter_info
    for value in ("nan", "NaN", "inf", "-inf", "Infinity", "-1", "-0.5", "1e400"):
        assert refusal(name, param, value) is not None, f"{name} {param.opts[0]} {value}: accepted"
    # 0 and a huge value: as the declared range (shown by --help) says
    for value, number in (("0", 0), ("1000000000000000000", 10**18), (str(info.min), info.min),
                          (str(info.max), info.max)):
        if kind is int and isinstance(number, float) and not number.is_integer():
            continue
        text = str(int(number)) if kind is int else value
        inside = info.min <= number <= info.max
        assert (refusal(name, param, text) is None) == inside, f"{name} {param.opts[0]} {text}: range {info.min}.." \
                                                                f"{info.max}"


@pytest.mark.parametrize("name,param,kind", NUMERIC, ids=IDS)
def test_a_refused_numeric_value_is_exit_2_and_one_line(name, param, kind):
    rc, _, err = run([name, *required_args(name), param.opts[0], "nan"])
    assert rc == 2, err
    assert any(o in one_error_line(err) for o in param.opts), err


# ------------------------------------------------------------------------------------------------- strict JSON

NOT_JSON = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity", "1e400": "1e400",
            "lone surrogate": '"\\ud800"', "lone low surrogate": '"x\\udc00y"'}


def _with_value(text: str, key: str, raw: str) -> str:
    doc = json.loads(text)
    doc[key] = "__PLACEHOLDER__"
    return json.dumps(doc).replace('"__PLACEHOLDER__"', raw)


@pytest.mark.parametrize("what", sorted(NOT_JSON))
@pytest.mark.parametrize("where", ["draft config.json", "target config.json", "index"])
def test_json_that_is_not_strict_json_exits_2_naming_the_file(tmp_path, what, where):
    draft = make_draft(tmp_path / "d", "specforge", shards=2 if where == "index" else 1)
    target = make_target(tmp_path / "t")
    file = {"draft config.json": draft / "config.json", "target config.json": target / "config.json",
            "index": draft / "model.safetensors.index.json"}[where]
    file.write_text(_with_value(file.read_text(), "x_hostile", NOT_JSON[what]))
    for argv in (["inspect", str(draft), "--target", str(target)],
                 ["fix", str(draft), "-o", str(tmp_path / "out"), "--target", str(target)]):
        rc, _, err = run(argv)
        assert rc == 2, (argv[0], err)
        assert file.name in one_error_line(err), err
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("what", sorted(NOT_JSON))
def test_a_kconvert_json_that_is_not_strict_json_is_evidence_of_nothing(tmp_path, what):
    """kconvert.json (an earlier fix's record) is read as evidence only (formats/detect.py read_fix_record): one that
    is not strict JSON is refused by the reader and the run reads the draft as if it had none."""
    target = make_target(tmp_path / "t")
    without = make_draft(tmp_path / "a", "specforge")
    hostile = make_draft(tmp_path / "b", "specforge")
    (hostile / "kconvert.json").write_text(_with_value('{"input": {"producer": "eagle"}}', "x", NOT_JSON[what]))
    docs = []
    for d in (without, hostile):
        rc, out, err = run(["inspect", str(d), "--target", str(target), "--json"])
        assert rc in (0, 1), err
        docs.append([(f["id"], f["message"]) for f in json.loads(out)["findings"]])
    assert docs[0] == docs[1]


def test_a_config_kconvert_accepts_is_written_back_as_strict_json(tmp_path):
    # numbers Python's json writes as NaN/Infinity cannot come in, so none go out: every float of the output parses
    draft = make_draft(tmp_path / "d", "specforge", config=lambda c: c.update(rms_norm_eps=1e-300, big=1.7e308))
    rc, _, err = run(["fix", str(draft), "-o", str(tmp_path / "out"), "--target", str(make_target(tmp_path / "t"))])
    assert rc in (0, 1), err

    def refuse(name):
        raise ValueError(name)
    written = json.loads((tmp_path / "out" / "config.json").read_text(), parse_constant=refuse)
    assert written["big"] == 1.7e308


# ------------------------------------------------------------------------------------------------------ Hub ids

BAD_IDS = ["org/name.", "org/name-", "org/-name", "org/a--b", "org/a..b", "org/x.git", "org/" + "a" * 5000,
           "a" * 5000, "org/" + "a" * 97]


@pytest.mark.parametrize("ref", BAD_IDS, ids=lambda r: r[:20] + ("..." if len(r) > 20 else ""))
def test_a_hub_id_huggingface_hub_refuses_exits_2_with_one_line(tmp_path, monkeypatch, ref):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never the network: the refusal comes before any request
    monkeypatch.chdir(tmp_path)
    draft = make_draft(tmp_path / "d", "specforge")
    for argv in (["inspect", ref], ["inspect", str(draft), "--target", ref],
                 ["push", str(draft), ref, "--report", str(tmp_path / "r.json"), "--dry-run"]):
        rc, _, err = run(argv)
        assert rc == 2, (argv[:2], err[-500:])
        one_error_line(err)


# -------------------------------------------------------------------------------------------------------- sizes

def model_sizes(cls) -> list[str]:
    """The config keys the canonical model reads as integer sizes: its int fields (`int` or `int | None`)."""
    return [f.name for f in dataclasses.fields(cls) if f.type in ("int", "int | None")]


def test_the_canonical_models_have_the_sizes_the_issue_names():
    from kconvert.formats.model import DraftModel
    from kconvert.targets import TargetModel

    assert {"vocab_size", "hidden_size", "num_hidden_layers"} <= set(model_sizes(TargetModel))
    assert {"draft_vocab_size", "max_position_embeddings"} <= set(model_sizes(DraftModel))


def _draft_sizes() -> list[str]:
    from kconvert.formats.model import DraftModel

    return model_sizes(DraftModel)


def _target_sizes() -> list[str]:
    from kconvert.targets import TargetModel

    return model_sizes(TargetModel)


HUGE = 1 << 40  # a 1 TiB mask at one byte per id: no model is this size


@pytest.mark.parametrize("key", _draft_sizes())
def test_a_draft_size_beyond_any_model_exits_2_naming_the_key(tmp_path, key):
    draft = make_draft(tmp_path / "d", "specforge", config=lambda c: c.update({key: HUGE}))
    for argv in (["inspect", str(draft), "--target", str(make_target(tmp_path / "t"))],
                 ["fix", str(draft), "-o", str(tmp_path / "out")]):
        rc, _, err = run(argv)
        assert rc == 2, (key, argv[0], err[-300:])
        assert key in one_error_line(err)
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key", _target_sizes())
def test_a_target_size_beyond_any_model_exits_2_naming_the_key(tmp_path, key):
    draft = make_draft(tmp_path / "d", "specforge")
    target = make_target(tmp_path / "t")
    cfg = json.loads((target / "config.json").read_text())
    cfg["text_config"][key] = HUGE
    (target / "config.json").write_text(json.dumps(cfg))
    for argv in (["inspect", str(draft), "--target", str(target)],
                 ["fix", str(draft), "-o", str(tmp_path / "out"), "--target", str(target)]):
        rc, _, err = run(argv)
        assert rc == 2, (key, argv[0], err[-300:])
        assert key in one_error_line(err)
        assert not (tmp_path / "out").exists()


def test_a_target_vocabulary_of_real_size_still_fixes(tmp_path):
    # the bound is far above real models: Gemma 3's 262144 ids (its config.json) is a vocabulary like any other
    draft = make_draft(tmp_path / "d", "specforge")
    target = make_target(tmp_path / "t")
    cfg = json.loads((target / "config.json").read_text())
    cfg["text_config"]["vocab_size"] = 262144
    (target / "config.json").write_text(json.dumps(cfg))
    rc, _, err = run(["inspect", str(draft), "--target", str(target)])
    assert rc in (0, 1), err
