"""`kconvert verify`: static checks, then the draft next to the target in a real engine, acceptance measured from
the engine's own counters, an optional lossless check, thresholds, and one report.

`run` is the live run (settings, result, `verify`); `thresholds` the gate (flags or a policy file); `lossless` the
comparison with the target alone; `diagnosis` the candidate readings of `--diagnose`; `document` the report;
`deployment` measures a running server (`--server`) or its saved scrapes (`kconvert acceptance`).
"""
from kconvert.verify.document import build_verify_report
from kconvert.verify.lossless import compare_outputs
from kconvert.verify.run import VerifyResult, VerifySettings, verify

__all__ = ["VerifyResult", "VerifySettings", "build_verify_report", "compare_outputs", "verify"]
