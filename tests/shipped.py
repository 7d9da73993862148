"""Every draft the repository ships, in one list: the zoo replicas (each built by its tests/zoo/*/build.py), the
drafts the producers' own code wrote (tests/data/producers*, the NeMo Automodel ones and kconvert fix's outputs of
them: tests/producers/automodel_drafts.py) and the example drafts (examples/tiny/drafts, examples/tiny/broken).

The engine oracles' recorders (tests/sglang_oracle/record.py `manifest`, which tests/vllm_oracle/record.py reads) and
the tests that go over every shipped draft (tests/test_messages.py) read this list, so that a draft added to any of
those folders is recorded and checked without a second list to keep. A draft is found by its folder (a config.json,
or a zoo build.py), never named here.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "tests" / "zoo"
# the producers' tiny target: they ship no target folder, provenance.json records its config
PRODUCERS_TARGET = "tests/data/producers/provenance.json#target"
PRODUCER_DIRS = (ROOT / "tests" / "data" / "producers", ROOT / "tests" / "data" / "producers-modelopt")
EXAMPLES = ROOT / "examples" / "tiny"
EXAMPLE_KINDS = ("drafts", "broken")


@dataclass(frozen=True)
class Shipped:
    group: str  # "zoo", "producers", "automodel" or "examples"
    name: str  # within its group: the zoo case, the folder name, automodel_drafts' key, "drafts/<name>"
    folder: Path
    target: str  # a profile name, a folder relative to ROOT, or PRODUCERS_TARGET
    method: str = "eagle3"  # a zoo case of another method says so (METHOD in its build.py)

    @property
    def key(self) -> str:
        return f"{self.group}/{self.name}"


def drafts(work: Path) -> list[Shipped]:
    """Every shipped draft; the zoo replicas are built under `work`/zoo, kconvert fix's outputs of the Automodel
    drafts under `work`/automodel."""
    from tests.producers.automodel_drafts import drafts as automodel_drafts

    out: list[Shipped] = []
    for build in sorted(ZOO.glob("*/build.py")):
        name = build.parent.name
        mod = importlib.import_module(f"tests.zoo.{name}.build")
        folder = Path(mod.build(work / "zoo" / name))
        out.append(Shipped("zoo", name, folder, mod.TARGET, getattr(mod, "METHOD", "eagle3")))
    # ModelOpt's export beside the others in one group: the names do not collide
    for folder in sorted((p for d in PRODUCER_DIRS for p in d.iterdir() if (p / "config.json").exists()),
                         key=lambda p: p.name):
        out.append(Shipped("producers", folder.name, folder, PRODUCERS_TARGET))
    for key, (folder, tref) in automodel_drafts(work / "automodel").items():
        out.append(Shipped("automodel", key, folder, tref))
    for kind in EXAMPLE_KINDS:
        for folder in sorted((EXAMPLES / kind).iterdir()):
            if (folder / "config.json").exists():
                out.append(Shipped("examples", f"{kind}/{folder.name}", folder,
                                   str((EXAMPLES / "target").relative_to(ROOT))))
    return out


def load_target(ref: str):
    """The target a shipped draft stands beside (`Shipped.target`), as kconvert reads it."""
    from kconvert.targets import from_config
    from kconvert.targets import load_target as load

    if ref == PRODUCERS_TARGET:
        prov = json.loads((PRODUCER_DIRS[0] / "provenance.json").read_text())
        return from_config(prov["target"], name="producers-target", origin=ref)
    return load(str(ROOT / ref) if (ROOT / ref).exists() else ref)
