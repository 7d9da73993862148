"""A config value of the wrong JSON type never makes `fix` fail its own self-check, on any engine (issue #45 class 6).

The self-check ("the output would still carry fixable errors ... this is a kconvert bug", exit 1) is for kconvert's
own bugs. It fired on inputs: `architectures` of any wrong type on an unrecognised draft (fix wrote the engine's
class, the output then read as SpecForge's and its aux-id convention was assumed for ids nobody had settled: 11
of 11 values), and a speculators draft's `transformer_layer_config.model_type` of any value vLLM does not map (fix
wrote `architectures`, which vLLM's speculators config ignores: 8 of 8). Seen failing on 8e35b40 with this
enumeration: 19 self-check failures over 4 drafts x 3 engines x every key x 11 values; none after.

Enumerated, not sampled: every key of every shipped example draft's config.json (top level and one level down),
each given a value of another JSON type, on every engine kconvert has rows for; then hypothesis over any JSON value.
The outcome may be a written fix or any refusal kconvert names (exit 1 or 2); never a self-check failure, never an
exception kconvert does not name, and the input is byte-identical after.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kconvert.commands.fix import fix
from kconvert.engines.expectations import ENGINE_LABELS
from kconvert.errors import KConvertError, SelfCheckError

ROOT = Path(__file__).resolve().parents[1]
DRAFTS = sorted(p for p in (ROOT / "examples" / "tiny" / "drafts").iterdir() if (p / "config.json").is_file())
TARGET = str(ROOT / "examples" / "tiny" / "target")


def _other_type(value):
    """A value of another JSON type than `value` (a list for a string, a string for a number, ...)."""
    if isinstance(value, bool):
        return "x"
    if isinstance(value, (int, float)):
        return "x"
    if isinstance(value, str):
        return 7
    if isinstance(value, list):
        return {}
    if isinstance(value, dict):
        return []
    return 7  # null


def _paths(cfg: dict) -> list[tuple[str, ...]]:
    out = []
    for k, v in cfg.items():
        out.append((k,))
        if isinstance(v, dict):
            out.extend((k, k2) for k2 in v)
    return out


def _set(cfg: dict, path: tuple[str, ...], value) -> dict:
    cfg = json.loads(json.dumps(cfg))
    node = cfg
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return cfg


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _fix_never_blames_itself(folder: Path, out: Path, cfg: dict, engine: str) -> str:
    (folder / "config.json").write_text(json.dumps(cfg))
    before = _digest(folder)
    if out.exists():
        shutil.rmtree(out)
    try:
        fix(str(folder), out, target=TARGET, engine=engine, durable=False)
        outcome = "written"
    except SelfCheckError as e:  # pragma: no cover - the failure this test is for
        pytest.fail(f"fix failed its own self-check on {engine} for config {json.dumps(cfg)[:300]}: {e}")
    except KConvertError as e:
        outcome = type(e).__name__
    assert _digest(folder) == before, "the input changed"
    return outcome


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    base = tmp_path_factory.mktemp("wrong-types")
    folders = {}
    for d in DRAFTS:
        folders[d.name] = base / d.name
        shutil.copytree(d, folders[d.name])
    return base, folders


@pytest.mark.parametrize("engine", sorted(ENGINE_LABELS))
@pytest.mark.parametrize("draft", [d.name for d in DRAFTS])
def test_every_key_of_another_type_is_fixed_or_refused_never_a_self_check_failure(scratch, draft, engine):
    base, folders = scratch
    cfg0 = json.loads((ROOT / "examples" / "tiny" / "drafts" / draft / "config.json").read_text())
    outcomes = {}
    for path in _paths(cfg0):
        bad = _other_type(_get(cfg0, path))
        outcomes[".".join(path)] = _fix_never_blames_itself(folders[draft], base / f"out-{draft}",
                                                           _set(cfg0, path, bad), engine)
    assert len(outcomes) >= 10, outcomes  # the enumeration ran over the keys it names


def _get(cfg: dict, path: tuple[str, ...]):
    node = cfg
    for k in path:
        node = node[k]
    return node


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**40, max_value=2**40) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_json_value_at_any_key_is_fixed_or_refused_never_a_self_check_failure(scratch, data):
    base, folders = scratch
    draft = data.draw(st.sampled_from([d.name for d in DRAFTS]), label="draft")
    engine = data.draw(st.sampled_from(sorted(ENGINE_LABELS)), label="engine")
    cfg0 = json.loads((ROOT / "examples" / "tiny" / "drafts" / draft / "config.json").read_text())
    path = data.draw(st.sampled_from(_paths(cfg0)), label="key")
    value = data.draw(JSON_VALUES, label="value")
    _fix_never_blames_itself(folders[draft], base / f"out-h-{draft}", _set(cfg0, path, value), engine)
