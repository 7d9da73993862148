"""K002's reading of `auto_map` (kconvert/rules/security.py _speculators_own_auto_map), against facts outside
kconvert:

- What speculators 0.9.0 itself writes: tests/data/producers/speculators-from-specforge/config.json, produced by
  `speculators convert` (tests/data/producers/provenance.json), holds `"auto_map": {"": "config.Eagle3SpeculatorConfig"}`
  and the config.py it names is not in the folder (tests/data/README.md, "Producer-native drafts").
- The rule's documented contract (docs/rules.md, K002): only "the `auto_map` that speculators writes itself
  ({"": "<module>.<Name>SpeculatorConfig"}, naming a module the folder does not hold) is reported as info and left
  alone"; any other auto_map is remote code referenced: a warning whose fix deletes it.
- transformers' dynamic modules (transformers/dynamic_module_utils.py get_class_from_dynamic_module): an auto_map
  value is "module_file.ClassName", one dot between the file and the class.

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
