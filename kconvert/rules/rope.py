"""Rope: the draft's rotary embedding against the target's."""
from __future__ import annotations

from typing import Any, Iterator

from kconvert.rules.base import Context, Evidence, Finding, FixAvailability, rule
from kconvert.writer.ops import SetConfig


def _rope_kind(rs: Any) -> tuple[Any, Any]:
    if not isinstance(rs, dict):
        return (None, None)
    return (rs.get("rope_type") or rs.get("type"), rs.get("factor"))


@rule("K902", "warning",
      fix_availability=FixAvailability.NEEDS_DECISION,
      summary="Rope settings differ from the target's, or `rope_scaling` and `rope_parameters` disagree.",
      why="The draft attends over the target's positions; a different rope_theta or a dropped yarn scaling "
          "(speculators PR #574: a converter dropped rope_scaling) rotates its queries differently from training "
          "on long inputs. transformers 5 reads rope_parameters, older code rope_scaling: both should say the same.",
      fix="With --rope-from-target, fix copies the target's rope_scaling into a draft that has none (when a "
          "converter dropped it). Never by default: a draft trained without scaling would change its math, and "
          "the files cannot tell which happened. A different rope_theta is reported, not changed.")
def rope(ctx: Context) -> Iterator[Finding]:
    d = ctx.draft
    rs, rp = d.config.get("rope_scaling"), d.config.get("rope_parameters")
    t = ctx.target
    if t is not None:
        if d.config.get("rope_theta") is not None and t.rope_theta is not None and \
                float(d.config["rope_theta"]) != float(t.rope_theta):
            yield rope.finding(f"rope_theta {d.config['rope_theta']} != the target's {t.rope_theta}",
                               evidence=[Evidence("rope_theta", d.config["rope_theta"], t.rope_theta)])
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
    if isinstance(rs, dict) and isinstance(rp, dict) and rp.get("factor") is not None and \
            _rope_kind(rs) != _rope_kind(rp):
        yield rope.finding("rope_scaling and rope_parameters disagree",
                           evidence=[Evidence("rope_parameters", rp, rs)])
