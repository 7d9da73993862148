"""K002's reading of `auto_map` (kconvert/rules/security.py _speculators_own_auto_map), against facts outside
kconvert; and K002, K003 and K005 (kconvert/rules/integrity.py) in full, as the user reads them:

- What speculators 0.9.0 itself writes: tests/data/producers/speculators-from-specforge/config.json, produced by
  `speculators convert` (tests/data/producers/provenance.json), holds `"auto_map": {"": "config.Eagle3SpeculatorConfig"}`
  and the config.py it names is not in the folder (tests/data/README.md, "Producer-native drafts").
- The rule's documented contract (docs/rules.md, K002): only "the `auto_map` that speculators writes itself
  ({"": "<module>.<Name>SpeculatorConfig"}, naming a module the folder does not hold) is reported as info and left
  alone"; any other auto_map is remote code referenced: a warning whose fix deletes it.
- transformers' dynamic modules (transformers/dynamic_module_utils.py get_class_from_dynamic_module): an auto_map
  value is "module_file.ClassName", one dot between the file and the class.
- The engines' weight-file fallback (docs/rules.md K001: engines load *.bin/*.pt when no safetensors file is present)
  and kconvert's documented messages (docs/rules.md K003, K005): the expected texts are written out by hand.

Engine-free; each test inspects a copy of the producer's folder with only its config edited (milliseconds).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kconvert.commands.inspect import inspect
from kconvert.writer.ops import DeleteConfig

ROOT = Path(__file__).resolve().parent.parent
PRODUCED = ROOT / "tests" / "data" / "producers" / "speculators-from-specforge"
OWN = {"": "config.Eagle3SpeculatorConfig"}


def k002(tmp_path: Path, auto_map) -> list:
    folder = tmp_path / "draft"
    shutil.copytree(PRODUCED, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = auto_map
    (folder / "config.json").write_text(json.dumps(cfg))
    res = inspect(str(folder), engine="vllm", engine_version="0.32/v1")
    return [f for f in res.findings if f.id == "K002"]


def test_the_auto_map_speculators_wrote_is_recorded_as_written():
    # The fixture is what speculators 0.9.0 wrote; the tests below edit only this key.
    assert json.loads((PRODUCED / "config.json").read_text())["auto_map"] == OWN


def test_speculators_own_auto_map_is_info_and_left_alone(tmp_path):
    (f,) = k002(tmp_path, OWN)
    assert f.severity == "info" and f.ops == []
    assert f.message.startswith("auto_map {'': 'config.Eagle3SpeculatorConfig'} is the one speculators writes itself")


@pytest.mark.parametrize("auto_map", [
    {},                                                            # names nothing speculators writes
    {"AutoConfig": "configuration_x.XConfig"},                     # a model's own config class, not speculators'
    {"": "config.Eagle3SpeculatorConfig", "AutoModel": "modeling_x.XModel"},  # speculators' plus a model class
    {"": "pkg.config.Eagle3SpeculatorConfig"},                     # two dots: not speculators' module.Class form
    {"": "Eagle3SpeculatorConfig"},                                # no module: not what speculators writes
    {"": "config.Eagle3SpeculatorConfigX"},                        # another class name
    {"": 5},                                                       # not a class reference
    "config.Eagle3SpeculatorConfig",                               # not a mapping
])
def test_any_other_auto_map_is_remote_code_a_warning_that_fix_deletes(tmp_path, auto_map):
    (f,) = k002(tmp_path, auto_map)
    assert f.severity == "warning"
    assert f.message == "remote code is referenced (never imported by kconvert): config 'auto_map'"
    assert f.ops == [DeleteConfig(("auto_map",), "EAGLE-3 drafts need no remote code")]


# --- K002, K003, K005 in full: the finding a user reads (message, severity, evidence, ops) -------------------------
# Each expected value below is written out by hand from the rule's documented contract (docs/rules.md) and the
# input the test builds; none is read back from kconvert.

def _evidence(f) -> list[tuple]:
    return [(e.where, e.observed, e.expected) for e in f.evidence]


def test_k002_speculators_own_auto_map_names_the_key_and_its_value_as_evidence(tmp_path):
    (f,) = k002(tmp_path, OWN)
    assert f.message == ("auto_map {'': 'config.Eagle3SpeculatorConfig'} is the one speculators writes itself; it "
                         "names a module this folder does not hold, so nothing can be imported, and vLLM reads the "
                         "speculators format natively")
    assert _evidence(f) == [("auto_map", OWN, None)]


def test_k002_remote_code_lists_the_config_keys_then_the_first_five_python_files(tmp_path):
    # Two config keys and six .py files: the message names both keys and five files (the sixth is counted out),
    # the evidence holds each key with its value and the same five files; fix deletes the two keys and no file
    # (fix copies only what an engine loads).
    folder = tmp_path / "draft"
    shutil.copytree(PRODUCED, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoModel": "modeling_x.XModel"}
    cfg["trust_remote_code"] = True
    (folder / "config.json").write_text(json.dumps(cfg))
    py = [f"m{i}.py" for i in range(1, 7)]
    for name in py:
        (folder / name).write_text("raise SystemExit('never imported')\n")
    res = inspect(str(folder), engine="vllm", engine_version="0.32/v1")
    (f,) = [x for x in res.findings if x.id == "K002"]
    assert f.severity == "warning"
    assert f.message == ("remote code is referenced (never imported by kconvert): config 'auto_map', "
                         "config 'trust_remote_code', m1.py, m2.py, m3.py, m4.py, m5.py")
    assert _evidence(f) == [("auto_map", {"AutoModel": "modeling_x.XModel"}, None), ("trust_remote_code", True, None),
                            ("m1.py", "python file", None), ("m2.py", "python file", None),
                            ("m3.py", "python file", None), ("m4.py", "python file", None),
                            ("m5.py", "python file", None)]
    assert f.ops == [DeleteConfig(("auto_map",), "EAGLE-3 drafts need no remote code"),
                     DeleteConfig(("trust_remote_code",), "EAGLE-3 drafts need no remote code")]


def _bin_draft(folder: Path, parts: int) -> list[str]:
    """The tiny EAGLE-reference draft saved as `parts` PyTorch zip files without an index (vLLM loads every *.bin
    of a folder without safetensors), the tensors dealt round-robin; returns the file names."""
    from tests.factories import TINY, draft_config, draft_tensors
    from tests.torch_factories import save_state_dict

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(draft_config(TINY, "eagle", "llama")))
    items = list(draft_tensors(TINY, "llama").items())
    names = [f"pytorch_model-{i:05d}-of-{parts:05d}.bin" for i in range(1, parts + 1)]
    for i, name in enumerate(names):
        save_state_dict(folder / name, dict(items[i::parts]))
    return names


def test_k003_pickle_weights_are_info_naming_three_files_with_the_first_as_evidence(tmp_path):
    # Four .bin files: the message names the first three (sorted), the evidence the first; info, not the error
    # of a folder with no weights, and no other K003 (no note: every entry of these files is a tensor).
    names = _bin_draft(tmp_path / "d", 4)
    res = inspect(str(tmp_path / "d"), engine="vllm", engine_version="0.32/v1")
    (f,) = [x for x in res.findings if x.id == "K003"]
    assert f.severity == "info"
    assert f.message == (f"the weights are PyTorch pickle files ({names[0]}, {names[1]}, {names[2]}), described "
                         "statically and never unpickled; engines load them when no safetensors file is present; "
                         "`kconvert fix --from-pickle` converts them to safetensors")
    assert _evidence(f) == [(names[0], "PyTorch zip", "safetensors")]


def _k003_without_weights(tmp_path: Path, notes: list[str]) -> list:
    """K003 on the tiny draft with its only safetensors file removed and the reader's notes set to `notes`."""
    from kconvert.engines.expectations import engine_rules
    from kconvert.formats.canonical import read_draft
    from kconvert.rules import Context, Decisions
    from kconvert.rules.base import REGISTRY
    from kconvert.source import open_checkpoint
    from tests.factories import make_draft

    folder = make_draft(tmp_path / "d", "torchspec")
    (folder / "model.safetensors").unlink()
    ckpt = open_checkpoint(str(folder))
    assert ckpt.tensors == {} and ckpt.torch_files == [] and ckpt.notes == []
    ckpt.notes.extend(notes)
    ctx = Context(read_draft(ckpt), None, engine_rules("vllm", "0.32/v1"), Decisions())
    return [(f.severity, f.message, _evidence(f)) for f in REGISTRY["K003"].fn(ctx)]


NO_WEIGHTS = ("error", "the checkpoint holds no safetensors tensor", [("*.safetensors", 0, ">= 1 file")])


def test_k003_no_weights_is_an_error_each_note_an_info(tmp_path):
    note = "safetensors files not named by the index are ignored: stray.safetensors"
    assert _k003_without_weights(tmp_path / "a", []) == [NO_WEIGHTS]
    assert _k003_without_weights(tmp_path / "b", [note]) == [NO_WEIGHTS, ("info", note, [])]


def test_k003_a_hub_read_that_skipped_the_tensors_is_no_missing_weights_error(tmp_path):
    # kconvert/source/hub.py, offline with no weight file in the cache: the tensors were not looked at, so "no
    # tensor" is not a finding; the note says why the tensor checks did not run.
    note = "no safetensors file of this repository is in the cache; tensor checks are skipped"
    assert _k003_without_weights(tmp_path, [note]) == [("info", note, [])]


def test_k005_names_five_unreadable_tensors_the_first_ones_reason_and_ten_as_evidence(tmp_path):
    # Twelve unreadable tensors (what the value checks record in ctx.unreadable: name -> the reader's reason):
    # sorted, the message names the first five and the first one's reason; the evidence holds the first ten.
    from kconvert.engines.expectations import engine_rules
    from kconvert.formats.canonical import read_draft
    from kconvert.rules import Context, Decisions
    from kconvert.rules.base import REGISTRY
    from kconvert.source import open_checkpoint
    from tests.factories import make_draft

    ctx = Context(read_draft(open_checkpoint(str(make_draft(tmp_path / "d", "torchspec")))), None,
                  engine_rules("vllm", "0.32/v1"), Decisions())
    names = [f"t{i:02d}" for i in range(12, 0, -1)]  # t12 .. t01, given out of order
    ctx.unreadable.update({n: f"{n}: not available locally" for n in names})
    (f,) = REGISTRY["K005"].fn(ctx)
    assert (f.severity, f.fixable) == ("warning", False)
    assert f.message == ("the values of t01, t02, t03, t04, t05 could not be read, so the checks on them were "
                         "skipped: t01: not available locally")
    assert _evidence(f) == [(f"t{i:02d}", "unreadable", "readable") for i in range(1, 11)]


def test_k001_pickles_are_listed_never_opened_five_named_ten_as_evidence(tmp_path):
    # Eleven trainer pickles beside the safetensors weights (docs/rules.md K001: listed, never unpickled; fix leaves
    # them out of its output, so no op): the message counts eleven and names five, the evidence holds ten.
    from tests.factories import make_draft

    folder = make_draft(tmp_path / "d", "torchspec")
    names = [f"state_{i:02d}.pkl" for i in range(11)]
    for n in names:
        (folder / n).write_bytes(b"\x80\x04never unpickled")
    res = inspect(str(folder), engine="vllm", engine_version="0.32/v1")
    (f,) = [x for x in res.findings if x.id == "K001"]
    assert (f.severity, f.fixable, f.ops) == ("warning", True, [])
    assert f.message == ("11 pickle file(s) present, never unpickled by kconvert: state_00.pkl, state_01.pkl, "
                         "state_02.pkl, state_03.pkl, state_04.pkl")
    assert _evidence(f) == [(n, "pickle", "safetensors") for n in names[:10]]
