"""The table of rule ids, as ruff keeps its codes (crates/ruff_linter/src/codes.rs): each id's name, category
and group in one place.

A rule's decorator (`@rule("K502", "error", ...)` in kconvert/rules/<category>.py) names its id, its usual severity
and its texts; the id's name, category and group come from this table. So an id is spelled once here and once at its
rule, it is never reused, and its lifecycle is visible:

- stable: runs on every inspect, fix and verify; its name and meaning change only with a changelog entry.
- preview: runs and reports as a stable rule does, marked `preview` by `kconvert rules`: its message, severity or reach
  may still change (for instance a new engine's behaviour that no oracle pins yet).
- deprecated: still runs, marked `deprecated` by `kconvert rules`; the next minor release removes it.
- removed: never runs; its id stays here so that no other rule takes it (a decorator that names it is an error).

A rule lives in the module named after its category (hyphens as underscores: `vocab-mapping` is vocab_mapping.py);
tests/test_rule_codes.py checks the table, the registry and the modules against each other.
"""
from __future__ import annotations

from typing import NamedTuple

STABLE, PREVIEW, DEPRECATED, REMOVED = "stable", "preview", "deprecated", "removed"
GROUPS = (STABLE, PREVIEW, DEPRECATED, REMOVED)


class Code(NamedTuple):
    name: str
    category: str
    group: str


CODES: dict[str, Code] = {
    "K000": Code("target-checks-skipped", "config-hygiene", STABLE),
    "K001": Code("pickle-weights", "security", STABLE),
    "K002": Code("remote-code", "security", STABLE),
    "K003": Code("no-tensors", "integrity", STABLE),
    "K004": Code("producer-unknown", "architecture", STABLE),
    "K005": Code("values-unreadable", "integrity", STABLE),
    "K101": Code("architecture-unmapped", "architecture", STABLE),
    "K102": Code("mla-model-type-mtp", "architecture", STABLE),
    "K103": Code("num-hidden-layers", "config-hygiene", STABLE),
    "K104": Code("target-only-fields", "config-hygiene", STABLE),
    "K105": Code("other-method", "architecture", STABLE),
    "K106": Code("engine-release-unknown", "config-hygiene", STABLE),
    "K107": Code("engine-oracle-disagrees", "architecture", STABLE),
    "K108": Code("target-not-served", "architecture", PREVIEW),
    "K109": Code("served-as-other-method", "architecture", PREVIEW),
    "K201": Code("key-layout", "tensor-names", STABLE),
    "K202": Code("missing-tensors", "tensor-names", STABLE),
    "K203": Code("unexpected-tensors", "tensor-names", STABLE),
    "K301": Code("fc-width", "shapes", STABLE),
    "K302": Code("attention-shapes", "attention", STABLE),
    "K303": Code("hidden-size", "shapes", STABLE),
    "K304": Code("tensor-parallel-split", "attention", STABLE),
    "K305": Code("draft-attention-backend", "attention", PREVIEW),
    "K401": Code("aux-ids-missing", "aux-layers", STABLE),
    "K402": Code("aux-ids-invalid", "aux-layers", STABLE),
    "K403": Code("aux-ids-count", "aux-layers", STABLE),
    "K404": Code("aux-ids-convention", "aux-layers", STABLE),
    "K405": Code("aux-ids-location", "aux-layers", STABLE),
    "K406": Code("aux-states-disabled", "aux-layers", STABLE),
    "K501": Code("draft-vocab-size", "vocab-mapping", STABLE),
    "K502": Code("d2t", "vocab-mapping", STABLE),
    "K503": Code("t2d", "vocab-mapping", STABLE),
    "K504": Code("vocab-size", "vocab-mapping", STABLE),
    "K601": Code("norms-missing", "norms", STABLE),
    "K602": Code("norm-before-residual", "norms", STABLE),
    "K603": Code("norm-before-fc", "norms", STABLE),
    "K604": Code("fc-norm", "norms", STABLE),
    "K605": Code("norm-output", "norms", STABLE),
    "K606": Code("modelopt-norm-flags", "norms", STABLE),
    "K701": Code("embeddings", "embeddings", STABLE),
    "K801": Code("lm-head-missing", "lm-head", STABLE),
    "K901": Code("max-positions", "positions", STABLE),
    "K902": Code("rope", "rope", STABLE),
    "K911": Code("config-dtype", "dtype", STABLE),
    "K912": Code("tensor-dtype", "dtype", STABLE),
}
