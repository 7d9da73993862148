"""The typer application every command module registers on (`kconvert.cli` imports those modules; they import
this one, so the command modules and the package import one way)."""
from __future__ import annotations

import functools

import typer
import typer.main

from kconvert._version import __version__
from kconvert.cli import _coercion

def _wrap_at_spaces() -> None:
    """click wraps help prose with textwrap, which breaks at hyphens: `--output-` / `format` at 80 columns. An
    option name cut in two cannot be searched for or copied; wrap at spaces only (a word longer than the line
    still breaks)."""
    from typer._click import _textwrap

    base = _textwrap.TextWrapper
    if getattr(base, "_kconvert", False):
        return

    class Wrapper(base):  # type: ignore[misc, valid-type]
        _kconvert = True

        def __init__(self, *a, **k):
            k.setdefault("break_on_hyphens", False)
            super().__init__(*a, **k)

    _textwrap.TextWrapper = Wrapper  # click.formatting.wrap_text imports it at each call


def _read_signatures_once() -> None:
    """typer reads each command function's signature twice while it builds the command (its parameters, then its
    callback), each time evaluating every annotation string twice (`inspect.signature(eval_str=True)` and
    `get_type_hints`); read once, `kconvert --help` builds its ten commands in ~15 ms instead of ~25. The result
    is a fresh dict of read-only records: one per function is enough."""
    if not hasattr(typer.main.get_params_from_function, "cache_info"):
        typer.main.get_params_from_function = functools.lru_cache(maxsize=None)(typer.main.get_params_from_function)


_wrap_at_spaces()
_read_signatures_once()
_coercion.install()  # str, int, float and choice values without typer's pydantic adapters (~70-100 ms)

app = typer.Typer(
    name="kconvert",
    help="Find, fix, prove live and publish EAGLE-3 draft checkpoints for vLLM and SGLang.\n\n"
         "Pipeline: inspect (static checks) → fix (write a corrected copy) → verify (live acceptance in a real "
         "engine) → push (publish only what passed).\n\n"
         "Exit codes: 0 passed; 1 error-level findings or a failed gate; 2 bad usage or unreadable input; "
         "3 this machine cannot run the step (engine failed, package missing); 70 internal error (a kconvert bug); "
         "130 and 143 interrupted by SIGINT and SIGTERM.",
    no_args_is_help=True,
    # ruff's habits: -h as well as --help on every command (click hands help_option_names down to subcommands),
    # and typer's --install-completion / --show-completion for bash, zsh, fish and PowerShell.
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain formatter: wraps at any width and never cuts an option name
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kconvert {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    pass
