"""JSON schemas shipped with kconvert (the repository's `schemas/` folder links here)."""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from kconvert.errors import InputError


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict[str, Any]:
    return json.loads((resources.files("kconvert.schemas") / f"{name}.schema.json").read_text())


@lru_cache(maxsize=None)
def load_sarif_schema() -> dict[str, Any]:
    """The published SARIF 2.1.0 schema (JSON Schema draft-04), vendored; its origin is in SOURCES.md."""
    return json.loads((resources.files("kconvert.schemas") / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))


def validate(doc: Any, name: str, *, what: str | None = None) -> None:
    """Validate `doc` against schemas/<name>.schema.json; raise InputError naming the first problem."""
    import jsonschema  # deferred: ~35 ms (80 modules); inspect and --help validate nothing

    schema = load_schema(name)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        e = errors[0]
        where = "/".join(str(p) for p in e.path) or "(root)"
        raise InputError(f"{what or name}: {where}: {e.message}")
