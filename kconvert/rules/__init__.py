"""One rule per defect class. Importing this package registers them all (see base.REGISTRY)."""
from kconvert.rules import (  # noqa: F401
    architecture, attention, aux_layers, config_hygiene, dtype, embeddings, integrity, lm_head, norms, positions, rope,
    security, shapes, tensor_names, vocab_mapping)
from kconvert.rules.base import (CATEGORIES, REGISTRY, Context, Evidence, Finding, FixAvailability, Rule,
                                 run_rules)
from kconvert.rules.decisions import Decisions, Options

__all__ = ["CATEGORIES", "REGISTRY", "Context", "Decisions", "Evidence", "Finding", "FixAvailability", "Options",
           "Rule", "run_rules"]
