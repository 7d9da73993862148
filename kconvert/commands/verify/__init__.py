"""`kconvert verify`: static checks, then the draft next to the target in a real engine, acceptance measured from
the engine's own counters, an optional lossless check, thresholds, and one report.

`run` is the live run (`verify`); the gate (flags or a policy file) is `kconvert.results.thresholds`; `lossless` the
comparison with the target alone; `diagnosis` the candidate readings of `--diagnose`; the result and its report are
`kconvert.results.verify`;
`deployment` measures a running server (`--server`) or its saved scrapes (`kconvert acceptance`).
"""
from kconvert.results.verify import VerifyResult, VerifySettings, build_verify_report
from kconvert.commands.verify.lossless import compare_outputs
from kconvert.commands.verify.run import replay_serve_line, verify

__all__ = ["VerifyResult", "VerifySettings", "build_verify_report", "compare_outputs",
           "replay_serve_line", "verify"]
