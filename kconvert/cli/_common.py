"""Options shared by several commands, defined once so every command spells them the same way
(the habit of huggingface_hub's cli/_cli_utils.py)."""
from __future__ import annotations

import contextvars
import functools
import inspect
from enum import Enum
from typing import Annotated, Any, Callable, Optional

import typer

from kconvert.cli._output import ENV_FORMAT
from kconvert.report.formats import file_options, output_formats, render

# What a parameter's value is, when it names a path: declared with the parameter (`path`), read back from the click
# command typer builds (`path_role`). kconvert.cli checks every command's destinations against its inputs before the
# command runs (`kconvert.cli._guarded`), and tests/test_path_options.py tries every kind of path in each such
# parameter; a parameter declared here is covered by both without another edit.
INPUT = "input"  # read: a file, a folder, or a name that may be one (a draft, a target, a prompt set)
OUTPUT_FILE = "output-file"  # a report file written (`-` is standard output)
OUTPUT_FOLDER = "output-folder"  # a folder written (fix -o, trace -o)
CACHE = "cache"  # a database kept between runs (matrix --cache)
PATH_ROLES = (INPUT, OUTPUT_FILE, OUTPUT_FOLDER, CACHE)


def path(role: str, info: Any) -> Any:
    """`info` (a typer.Option or typer.Argument) declared as taking a path of `role`."""
    if role not in PATH_ROLES:
        raise ValueError(f"path role {role!r}: one of {PATH_ROLES}")
    info.kconvert_path = role
    return info


def path_role(param: Any) -> str | None:
    """The role `path` declared for a parameter of the click command typer builds (None: not a path). typer 0.29
    keeps the typer.Option/Argument a parameter was built from as its type descriptor's `parameter_info`."""
    info = getattr(getattr(param, "type_descriptor", None), "parameter_info", None)
    return getattr(info, "kconvert_path", None)


SourceArg = Annotated[str, path(INPUT, typer.Argument(
    help="Draft checkpoint: a local folder or a Hub id org/name[@revision].", show_default=False))]


def _profile_names() -> str:
    """The built-in profiles, listed from the package's files (kconvert/targets/profiles/*.json), so a new one is
    named; read by path, since importing kconvert.targets would load the checkpoint readers on every --help."""
    from pathlib import Path

    return ", ".join(sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "targets" / "profiles").glob(
        "*.json")))


TargetOpt = Annotated[Optional[str], path(INPUT, typer.Option(
    "--target", "-t",
    help=f"The target model: a built-in profile ({_profile_names()}), a local folder, or a Hub id. Only its "
         "config.json is read."))]


def _engine_metavar() -> str:
    from kconvert.engines.expectations import ENGINES

    return "[" + "|".join(ENGINES) + "]"


# The choices are the engines kconvert has rows for (ENGINES, read from KNOWN): a new engine's rows make it a
# choice of every command that takes --engine, shown in its help; the value is checked where the row is chosen
# (kconvert.engines.expectations.engine_rules / check_engine: exit 2 naming every choice and the nearest one), not
# by a click callback, so that a shown command with a placeholder engine still parses (tests/test_hints.py).
EngineOpt = Annotated[Optional[str], typer.Option(
    "--engine", "-e", metavar=_engine_metavar(), show_default=False,
    help="Engine the draft is meant for (the engines kconvert has rows for). Default: the configuration's, else "
         "vllm.")]


def engine_version_help() -> str:
    """--engine-version's help, its rows listed from kconvert.engines.expectations.KNOWN (never typed here: a new
    row is in the help the moment it exists)."""
    from kconvert.engines.expectations import KNOWN, NEWEST

    from kconvert.report.markdown import ENGINE_LABEL as label

    rows = "; ".join(f"{label.get(e, e)}: " + ", ".join(v + (" (newest)" if v == NEWEST.get(e) else "")
                                                          for v in KNOWN[e]) for e in KNOWN)
    return (f"Engine version whose loading rules apply ({rows}; a vLLM patch release maps to its minor). Any "
            "other version is refused. Default: the installed engine's row, else the newest.")


EngineVersionOpt = Annotated[Optional[str], typer.Option("--engine-version", help=engine_version_help())]
OracleOpt = Annotated[bool, typer.Option(
    "--oracle", help="Also ask the engine's own code about this draft and target (the installed vLLM, or the Python "
                     "files of the release the row was learned from; no GPU): the ids it feeds, fc width, errors "
                     "while building, the context served, the weights kept. A disagreement with the row's verdict is "
                     "a K107 error quoting both. Needs --target and the learn extra (torch, transformers).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (schemas/report.schema.json) instead "
                                                      "of the terminal report; the same as --output-format json. A "
                                                      "failure prints a JSON error object (schemas/error.schema.json).")]


def json_opt(schema: str) -> Any:
    """`--json` of a command whose document has its own schema (rules, acceptance)."""
    return Annotated[bool, typer.Option("--json", help=f"Print one JSON document (schemas/{schema}.schema.json); a "
                                                       "failure prints a JSON error object (schemas/error.schema.json).")]


def _choice_type() -> Any:
    """`--output-format`'s typer-visible choices: an Enum of the formats of kconvert.report.formats that print."""
    return Enum("OutputFormat", [(f.name, f.name) for f in output_formats()], type=str, module=__name__)


def format_help() -> str:
    """`--output-format`'s help: each format's line, in the registry's order."""
    return "; ".join(f"{f.name}: {f.help}" for f in output_formats()) + (
        ". Default: github when GITHUB_ACTIONS=true, full on a terminal, concise otherwise.")


OutputFormat = _choice_type()
FORMATS = tuple(f.value for f in OutputFormat)

# the choices and their help from kconvert.report.formats: a new format module is listed here by itself
OutputFormatOpt = Annotated[Optional[OutputFormat], typer.Option(
    "--output-format", case_sensitive=False, envvar=ENV_FORMAT, show_default=False, help=format_help())]


def file_outputs(document: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command's file options (`--report`, `--sarif`, `--junit`, `--markdown`, `--html`, `--csv`), one per format
    of kconvert.report.formats that writes `document` to a file, added to the command's signature after its own
    options. The command receives them as `outputs`: {format name: path} for the options given."""

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(command, eval_str=True)  # typer reads annotations evaluated, as they are here
        own = [p for p in sig.parameters.values() if p.name != "outputs"]
        formats = {f"{fmt.name}_file": (fmt, opt) for fmt, opt in file_options(document)}  # parameter -> format
        added = [inspect.Parameter(param, inspect.Parameter.KEYWORD_ONLY, default=None,
                                   annotation=Annotated[Optional[str], path(OUTPUT_FILE,
                                                                            typer.Option(opt.flag, help=opt.help))])
                 for param, (_, opt) in formats.items()]

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            given = {formats[p][0].name: kwargs.pop(p) for p in list(kwargs) if p in formats}
            outputs = {name: value for name, value in given.items() if value}
            # deferred: the report writer and the path guard, only when a file option is given
            if outputs:
                from kconvert.report.files import check_report

                for fmt, _ in file_options(document):
                    if fmt.name in outputs:  # refused before the command runs, not after minutes of it
                        check_report(outputs[fmt.name], fmt.name, document, inputs=command_inputs())
            return command(**kwargs, outputs=outputs)

        run.__signature__ = sig.replace(parameters=own + added)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in own + added}
        return run

    return add


def write_outputs(document: str, doc: dict[str, Any], outputs: dict[str, str]) -> None:
    """Write each file option given (`file_outputs`) through the path guard, in the registry's order."""
    # deferred: the writer of report files, only when one is asked for
    from kconvert.report.files import write_report

    for fmt, _ in file_options(document):
        if fmt.name in outputs:
            write_report(outputs[fmt.name], fmt.name, document, render(fmt.name, document, doc),
                         inputs=command_inputs())


# The values of the running command's input parameters (`path_role` INPUT), set by kconvert.cli before the command
# runs: what a report written at its end may not be, hold or lie inside.
_INPUTS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("kconvert_inputs", default=())


def add_inputs(document: str, outputs: dict[str, str], values: list[Any]) -> None:
    """Inputs a command learns of only as it runs (matrix's drafts a glob or a --from list names): every file option
    given (`outputs`, as `file_outputs` hands them) is checked against them at once, before the command's work, and
    the report writer checks against them again when it writes (it reads command_inputs)."""
    from kconvert.guard.paths import check_apart, existing_inputs
    from kconvert.report.formats import file_options

    found = tuple(existing_inputs(values))
    flags = {fmt.name: opt.flag for fmt, opt in file_options(document)}
    for name, dest in outputs.items():
        if dest != "-":
            check_apart(dest, found, f"{flags[name]} {dest}")
    set_command_inputs(command_inputs() + found)


def command_inputs() -> tuple[str, ...]:
    return _INPUTS.get()


def set_command_inputs(values: tuple[str, ...]) -> None:
    _INPUTS.set(values)


# The range of every numeric option, by kind (issue #45: `--max-prompts -1` and `--timeout nan` were accepted). Each
# numeric option of each command takes one of these (`typer.Option(..., **COUNT)`), which `--help` shows and the
# parser enforces; tests/test_bad_input.py reads them from the click tree and fails on a numeric option without one.
# NaN and the infinities are refused for every float option by kconvert/cli/_coercion.py.
COUNT = {"min": 1, "max": 2**31 - 1}  # prompts, tokens, sequences, positions, Hub results: engines count in int32
SMALL_COUNT = {"min": 1, "max": 1024}  # draft tokens a step, tensor-parallel sizes, threads, workers, batch sizes
TOKENS_AHEAD = {"min": 0, "max": 1024}  # trace --lookahead: 0 records none past the output
SECONDS = {"min": 1.0, "max": 7 * 24 * 3600.0}  # an engine run's time limit: a second to a week
FRACTION = {"min": 0.0, "max": 1.0}  # acceptance rates, --tolerance's share of the expected length
LENGTH = {"min": 0.0, "max": 1025.0}  # acceptance lengths: at most the most draft tokens per step (1024) + 1


FailOnOpt = Annotated[Optional[str], typer.Option(
    "--fail-on", help="Least severe finding that fails (exit 1): error, or warning for a strict gate. Default: "
                      "the configuration's, else error.")]
AuxIdsOpt = Annotated[Optional[str], typer.Option(
    "--aux-ids", help="Layers the draft was trained on, in vLLM's input-of-layer numbering (e.g. 2,30,58), or "
                      "'default' for the engine defaults (2, L//2, L-3).")]
AuxConvOpt = Annotated[Optional[str], typer.Option(
    "--aux-convention", help="Convention the recorded aux ids follow: input (vLLM, speculators) or output "
                             "(SGLang, SpecForge).")]
D2tOpt = Annotated[Optional[str], typer.Option("--d2t", help="How d2t values were written: offsets or absolute.")]

SelectOpt = Annotated[Optional[str], typer.Option(
    "--select", help="Rules that gate the run, comma-separated: ids (K404), id prefixes (K4), categories "
                     "(aux-layers) or rule names. Replaces the configuration's select. Default: every rule.")]
IgnoreOpt = Annotated[Optional[str], typer.Option(
    "--ignore", help="Rules set aside (same selectors): their findings are listed in the report as ignored, "
                     "never fail the gate and are not fixed. Replaces the configuration's ignore.")]
ExtendIgnoreOpt = Annotated[Optional[str], typer.Option(
    "--extend-ignore", help="Rules set aside in addition to the configuration's ignore.")]
ConfigOpt = Annotated[Optional[str], path(INPUT, typer.Option(
    "--config", help="Project configuration to read (kconvert.toml, or pyproject.toml with [tool.kconvert]). "
                     "Default: the closest one upward from the working directory."))]
IsolatedOpt = Annotated[bool, typer.Option("--isolated", help="Read no project configuration.")]

# The Hub commit options `kconvert push` and `kconvert push-trace` share.
HubRevisionOpt = Annotated[Optional[str], typer.Option(
    "--revision", help="Branch to commit to (created if missing). Default: main.")]
CreatePrOpt = Annotated[bool, typer.Option("--create-pr", help="Open a pull request instead of committing to the "
                                                               "branch.")]
PrivateOpt = Annotated[bool, typer.Option("--private", help="Create the repository private (ignored if it "
                                                            "exists).")]
HubTokenOpt = Annotated[Optional[str], typer.Option("--token", help="Hub token (default: HF_TOKEN or the saved "
                                                                    "login).")]


def project_settings(config: str | None, isolated: bool, **flags: Any):
    """The run's settings (`kconvert.project.project_settings`: the command line over the project configuration
    over the defaults), which library callers resolve the same way."""
    from kconvert.project import project_settings as resolve  # deferred: it loads the rule registry, not for --help

    return resolve(config, isolated, **flags)
