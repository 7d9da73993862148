"""`kconvert verify`: static checks, then the draft next to the target in a real engine, acceptance measured from
the engine's own counters, an optional lossless check, thresholds, and one report.

`command` is `verify` itself (static checks, the live run, the gate); the gate's thresholds (flags or a policy
file) are `kconvert.results.thresholds`; `lossless` the comparison with the target alone; `diagnose_live` the
candidate readings of `--diagnose`; `model_runner` which vLLM model runner a run measures; the result and its
report are `kconvert.results.verify`;
`deployment` measures a running server (`--server`) or its saved scrapes (`kconvert acceptance`).
"""
from kconvert.results.verify import VerifyResult, VerifySettings, build_verify_report
from kconvert.commands.verify.lossless import compare_outputs
from kconvert.commands.verify.command import replay_serve_line, verify

__all__ = ["VerifyResult", "VerifySettings", "build_verify_report", "compare_outputs",
           "replay_serve_line", "verify"]
