"""The NeMo Automodel drafts both engine oracles record (tests/vllm_oracle/record.py, tests/sglang_oracle/record.py)
and their tests read back: each draft Automodel's recipe wrote (its model/consolidated/ folder, as a user hands it to
an engine), what Automodel's own vLLM helper exported, and what `kconvert fix` writes from each for each engine.
One list, so that the recorders and the tests cannot disagree on what was recorded.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "producers-automodel"
STEP = "epoch_1_step_8"
TARGETS = {"llama": "tests/data/producers-automodel/targets/llama",
           "deepseek": "tests/data/producers-automodel/targets/deepseek"}
# name -> (the folder under DATA, its target)
WRITTEN = {
    "automodel-eagle3": (f"automodel-eagle3/{STEP}/model/consolidated", "llama"),
    "automodel-eagle3-ids": (f"automodel-eagle3-ids/{STEP}/model/consolidated", "llama"),
    "automodel-eagle3-mla": (f"automodel-eagle3-mla/{STEP}/model/consolidated", "deepseek"),
    "automodel-vllm-export": ("automodel-vllm-export", "llama"),
    "automodel-mla-vllm-export": ("automodel-mla-vllm-export", "deepseek"),
}
# The engine rows kconvert fix writes for (one per engine, pinned so that a new default row does not change a
# recording): the outputs are named fixed-<engine>/<name>.
FIX_ROWS = {"vllm": "0.32", "sglang": "0.5.23"}
FIXED_FROM = ("automodel-eagle3", "automodel-eagle3-ids", "automodel-eagle3-mla")


def fixed(name: str, engine: str, work: Path) -> Path:
    """`kconvert fix` of the epoch folder of WRITTEN[name] for `engine`, written under `work` (once)."""
    from kconvert.commands.fix import fix

    out = work / f"fixed-{engine}" / name
    if not (out / "config.json").exists():
        folder = DATA / WRITTEN[name][0].split("/model/")[0]  # the epoch folder, as a user gives it
        fix(str(folder), out, target=str(ROOT / TARGETS[WRITTEN[name][1]]), engine=engine,
            engine_version=FIX_ROWS[engine], durable=False)
    return out


def keys() -> list[str]:
    """The names drafts() returns, without building anything."""
    return [*WRITTEN, *(f"fixed-{engine}/{name}" for engine in FIX_ROWS for name in FIXED_FROM)]


def drafts(work: Path) -> dict[str, tuple[Path, str]]:
    """key -> (folder, target ref relative to the repository): the Automodel drafts, fixed ones built under `work`."""
    out = {name: (DATA / rel, TARGETS[kind]) for name, (rel, kind) in WRITTEN.items()}
    for engine in FIX_ROWS:
        for name in FIXED_FROM:
            out[f"fixed-{engine}/{name}"] = (fixed(name, engine, work), TARGETS[WRITTEN[name][1]])
    return out
