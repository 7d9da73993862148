"""Rope: the draft's rotary embedding against the target's."""
from __future__ import annotations

from typing import Any, Iterator

from kconvert.engines.expectations import ALL_ROWS
from kconvert.engines.rope_schema import OLDER_STACKS, SCHEMAS, read_rope, schemas_present
from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule
from kconvert.writer.ops import SetConfig


def _rope_kind(rs: Any) -> tuple[Any, Any]:
    if not isinstance(rs, dict):
        return (None, None)
    return (rs.get("rope_type") or rs.get("type"), rs.get("factor"))


@rule("K902", "warning",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="Rope settings differ from the target's, or the two RoPE schemas (`rope_parameters` vs `rope_scaling` "
              "+ `rope_theta`) give different readings.",
      why="The draft attends over the target's positions; a different rope_theta or a dropped yarn scaling "
          "(speculators PR #574: a converter dropped rope_scaling) rotates its queries differently from training "
          "on long inputs. transformers 5 writes rope_parameters and older stacks read rope_scaling plus a top-level "
          "rope_theta (SpecForge #742, speculators #921). Each engine row reads one schema "
          "(kconvert/engines/rope_schema.py): vLLM 0.32/0.33 and SGLang 0.5.23 run transformers 5, whose "
          "standardize_rope_params lets a rope_scaling dict replace rope_parameters whole and otherwise takes "
          "rope_parameters' rope_theta over a top-level one (vLLM transformers_utils/config.py "
          "patch_rope_parameters; SGLang srt/models/llama_eagle3.py:132, deepseek_v2.py:2605). A draft that writes "
          "only one schema, or both disagreeing, is read differently by different stacks: the finding gives each "
          "row's reading.",
      fix="With --rope-from-target, fix copies the target's rope_scaling into a draft that has none (when a "
          "converter dropped it). Never by default: a draft trained without scaling would change its math, and "
          "the files cannot tell which happened. A different rope_theta is reported, not changed.")
def rope(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    cfg = d.config  # the effective flat config (speculators: transformer_layer_config merged in)
    rs, rp = cfg.get("rope_scaling"), cfg.get("rope_parameters")
    t = ctx.target
    schema = ctx.engine.rope_schema
    # the base as this row's loader reads it, when the draft states one; rows with no schema read: the top level
    reading = read_rope(cfg, schema) if schema else None
    theta = (reading.theta if reading.theta_from != "class default" else None) if reading else cfg.get("rope_theta")
    if t is not None:
        t_theta = _target_theta(t, schema)
        if theta is not None and t_theta is not None and float(theta) != float(t_theta):
            where = reading.theta_from if reading else "rope_theta"
            yield rope.finding(f"{where} {theta:g} != the target's {t_theta:g}",
                               evidence=[Evidence(where, theta, t_theta)])
        if t.rope_scaling and not rs and not (isinstance(rp, dict) and rp.get("factor")):
            restore = ctx.decisions.rope_from_target
            # The EAGLE reference trainer's config template (eagle/traineagle3/config.json) has no rope keys at all:
            # its drafts were trained with LlamaConfig's defaults, not stripped by a converter.
            if ("rope_scaling" in d.config or d.format.producer == "eagle") and not restore:
                # `rope_scaling: null` written out is the producer's statement (SpecForge's Kimi-K2.5 template,
                # configs/kimi-k25-eagle3.json); a key that is absent may have been dropped by a converter.
                stated = "states rope_scaling null" if "rope_scaling" in d.config else \
                    "comes from the EAGLE reference trainer, whose config has no rope_scaling"
                yield rope.finding(
                    f"the draft {stated}: it was trained without the target's "
                    f"{_rope_kind(t.rope_scaling)[0]} scaling, so positions past the original window are rotated "
                    "differently from the target (a training choice; kconvert keeps it)", severity="info",
                    evidence=[Evidence("rope_scaling", None, t.rope_scaling)])
            else:
                yield rope.finding(f"the target uses {_rope_kind(t.rope_scaling)[0]} rope scaling and the draft config "
                                   "has no rope_scaling key (dropped by a converter, or trained without it?)",
                                   evidence=[Evidence("rope_scaling", None, t.rope_scaling)],
                                   ops=[SetConfig(ctx.key_path("rope_scaling"), t.rope_scaling,
                                                  "--rope-from-target")] if restore else [],
                                   needs_decision=None if restore else "--rope-from-target (if a converter dropped it)")
        elif t.rope_scaling and rs and _rope_kind(rs) != _rope_kind(t.rope_scaling):
            yield rope.finding(f"rope scaling {_rope_kind(rs)} != the target's {_rope_kind(t.rope_scaling)}",
                               evidence=[Evidence("rope_scaling", rs, t.rope_scaling)])
    yield from _schema_readings(ctx, cfg)


def _target_theta(t: Any, schema: str | None) -> float | None:
    """The target's rope base as the row's loader reads its config (a folder or Hub target keeps its rope keys as
    written); a profile states one value, or null where no source states it (kimi-k2.6)."""
    raw = (t.extra or {}).get("rope_config")
    if schema and raw:
        r = read_rope(raw, schema)
        return None if r.theta_from == "class default" else r.theta
    return t.rope_theta


def _schema_readings(ctx: Context, cfg: dict[str, Any]) -> Iterator[Finding]:
    """The draft as each RoPE schema reads it; a finding when the readings differ, naming every engine row's."""
    readings = {name: read_rope(cfg, name) for name in SCHEMAS}
    first = next(iter(readings.values()))
    rs, rp = cfg.get("rope_scaling"), cfg.get("rope_parameters")
    top, inner = cfg.get("rope_theta"), rp.get("rope_theta") if isinstance(rp, dict) else None
    # the file states two things: both scalings given and different, or two bases given and different (a reader that
    # takes rope_parameters first, as Model-Optimizer PR #2221 does, gets the other one)
    conflict = bool(isinstance(rs, dict) and rs and isinstance(rp, dict) and rp and _rope_kind(rs) != _rope_kind(rp)) \
        or (isinstance(top, (int, float)) and isinstance(inner, (int, float)) and float(top) != float(inner))
    if not conflict and all(r.same(first) for r in readings.values()):
        return
    rows: dict[str | None, list[str]] = {}
    for row in ALL_ROWS:
        rows.setdefault(row.rope_schema, []).append(row.key)
    parts = []
    for name, r in readings.items():
        who = rows.get(name, []) + (["trainers and converters on transformers 4"] if name == OLDER_STACKS else [])
        parts.append(f"{', '.join(who) or SCHEMAS[name].name} ({SCHEMAS[name].name}): {r.label()}")
    if rows.get(None):
        parts.append(f"{', '.join(rows[None])}: schema not read")
    if conflict:
        what = "rope_scaling/rope_theta and rope_parameters disagree"
    else:
        written = " and ".join(schemas_present(cfg))
        what = f"the draft writes {written}, one schema lacking what the other states"
    yield rope.finding(f"{what}; each stack's reading: " + "; ".join(parts),
                       severity="warning" if conflict else "info",
                       evidence=[Evidence(f"rope as {SCHEMAS[n].name} reads it", r.label(), None)
                                 for n, r in readings.items()])
