"""The project configuration for the commands' `--config` / `--isolated`: found and validated by the library
(`kconvert.project`, which library callers use too); the CLI passes its flags in."""
from __future__ import annotations

from kconvert.project import KEYS, ProjectConfig, find_config, load_config

__all__ = ["KEYS", "ProjectConfig", "find_config", "load_config"]
