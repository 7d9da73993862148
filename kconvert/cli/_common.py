"""Options shared by several commands, defined once so every command spells them the same way
(the habit of huggingface_hub's cli/_cli_utils.py)."""
from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from kconvert.cli._output import ENV_FORMAT, OutputFormat

SourceArg = Annotated[str, typer.Argument(help="Draft checkpoint: a local folder or a Hub id org/name[@revision].",
                                          show_default=False)]
TargetOpt = Annotated[Optional[str], typer.Option(
    "--target", "-t",
    help="The target model: a built-in profile (kimi-k2.5, kimi-k2, deepseek-v3, llama-3.1-8b, llama-3.3-70b, "
         "gpt-oss-120b), a local folder, or a Hub id. Only its config.json is read.")]
EngineOpt = Annotated[str, typer.Option("--engine", "-e", help="Engine the draft is meant for: vllm or sglang.")]
EngineVersionOpt = Annotated[Optional[str], typer.Option(
    "--engine-version",
    help="Engine version whose loading rules apply (vLLM: 0.32 or 0.33, a patch release maps to its minor; "
         "SGLang: pre-25454, post-25454 or post-32334). Any other version is refused. "
         "Default: the installed engine's row, else the newest known.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (schemas/report.schema.json) instead "
                                                      "of the terminal report; the same as --output-format json. A "
                                                      "failure prints a JSON error object (schemas/error.schema.json).")]


def json_opt(schema: str) -> Any:
    """`--json` of a command whose document has its own schema (rules, acceptance)."""
    return Annotated[bool, typer.Option("--json", help=f"Print one JSON document (schemas/{schema}.schema.json); a "
                                                       "failure prints a JSON error object (schemas/error.schema.json).")]


OutputFormatOpt = Annotated[Optional[OutputFormat], typer.Option(
    "--output-format", case_sensitive=False, envvar=ENV_FORMAT, show_default=False,
    help="full: the rich view; concise: one line per finding (path:line: ID severity [category] message "
         "(evidence) [fixable]); github: workflow commands that GitHub shows as pull-request annotations; gitlab: GitLab Code "
         "Quality JSON; json: the report (schemas/report.schema.json); junit: JUnit XML; sarif: SARIF 2.1.0 for "
         "GitHub code scanning. Default: github when GITHUB_ACTIONS=true, full on a terminal, concise otherwise.")]
FailOnOpt = Annotated[str, typer.Option(
    "--fail-on", help="Least severe finding that fails (exit 1): error, or warning for a strict gate.")]
AuxIdsOpt = Annotated[Optional[str], typer.Option(
    "--aux-ids", help="Layers the draft was trained on, in vLLM's input-of-layer numbering (e.g. 2,30,58), or "
                      "'default' for the engine defaults (2, L//2, L-3).")]
AuxConvOpt = Annotated[Optional[str], typer.Option(
    "--aux-convention", help="Convention the recorded aux ids follow: input (vLLM, speculators) or output "
                             "(SGLang, SpecForge).")]
D2tOpt = Annotated[Optional[str], typer.Option("--d2t", help="How d2t values were written: offsets or absolute.")]
