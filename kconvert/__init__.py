"""kconvert: find, fix, prove and publish EAGLE-3 draft checkpoints for vLLM and SGLang.

Library use mirrors the CLI:

    import kconvert
    result = kconvert.inspect("org/draft", target="kimi-k2.5", engine="vllm")
    for f in result.findings: print(f.id, f.severity, f.message)
"""
from __future__ import annotations

__version__ = "0.1.0"


def inspect(*args, **kwargs):  # noqa: D401 - thin re-export, imported lazily to keep `import kconvert` cheap
    from kconvert.inspect import inspect as _inspect

    return _inspect(*args, **kwargs)


def fix(*args, **kwargs):
    from kconvert.fix import fix as _fix

    return _fix(*args, **kwargs)


def verify(*args, **kwargs):
    from kconvert.verify import verify as _verify

    return _verify(*args, **kwargs)


def push(*args, **kwargs):
    from kconvert.hub import push as _push

    return _push(*args, **kwargs)
