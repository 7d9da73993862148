"""Apply the config ops of a plan (`SetConfig`, `DeleteConfig`) to a config dict.

Pure: the input dict is never mutated; the result keeps the input's key order (a set key that already
exists stays where it was, a new key goes last) so that `config.json` diffs stay readable.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from kconvert.errors import UsageError
from kconvert.writer.ops import DeleteConfig, SetConfig


def apply_config(config: dict[str, Any], ops: Iterable[object]) -> dict[str, Any]:
    """Return a copy of `config` with every SetConfig/DeleteConfig in `ops` applied in order.

    Other op kinds are ignored. A SetConfig whose path crosses a missing key creates the intermediate
    objects; one that crosses a non-object value raises UsageError. Deleting a missing key is a no-op
    (so that fixing an already fixed checkpoint stays idempotent).
    """
    out = copy.deepcopy(config)
    for op in ops:
        if isinstance(op, SetConfig):
            _check_path(op.path)
            node = out
            for i, key in enumerate(op.path[:-1]):
                child = node.get(key)
                if child is None:
                    child = node[key] = {}
                elif not isinstance(child, dict):
                    where = ".".join(op.path[: i + 1])
                    raise UsageError(f"config: cannot set {'.'.join(op.path)}: {where} is not an object")
                node = child
            node[op.path[-1]] = copy.deepcopy(op.value)
        elif isinstance(op, DeleteConfig):
            _check_path(op.path)
            node = out
            for key in op.path[:-1]:
                node = node.get(key) if isinstance(node, dict) else None
                if not isinstance(node, dict):
                    break
            else:
                node.pop(op.path[-1], None)
    return out


def deep_merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `patch` merged in, recursively where both hold an object there (patch wins elsewhere); neither
    input is changed."""
    out = dict(base)
    for k, v in patch.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def _check_path(path: tuple[str, ...]) -> None:
    if not path or not all(isinstance(k, str) and k for k in path):
        raise UsageError(f"config: invalid key path {path!r}")
