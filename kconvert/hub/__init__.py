"""Publishing: only a checkpoint whose files match a passing verify report reaches the Hub.

    import kconvert.hub
    result = kconvert.hub.push("./fixed", "org/draft", report="verify.json", dry_run=True)
    print(result.readme)
"""
from __future__ import annotations

from kconvert.hub.push import PushResult, push

__all__ = ["PushResult", "push"]
