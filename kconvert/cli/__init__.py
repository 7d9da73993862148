"""kconvert's command line: parse, call the library, render. One module per command."""
from __future__ import annotations

import os
import sys

import typer

from kconvert import __version__

app = typer.Typer(
    name="kconvert",
    help="Find, fix, prove live and publish EAGLE-3 draft checkpoints for vLLM and SGLang.\n\n"
         "Pipeline: inspect (static checks) → fix (write a corrected copy) → verify (live acceptance in a real "
         "engine) → push (publish only what passed).\n\n"
         "Exit codes: 0 passed; 1 error-level findings or a failed gate; 2 bad usage or unreadable input; "
         "3 the engine could not run the live test.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kconvert {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    pass


def _register() -> None:
    from kconvert.cli import fix_cmd, inspect_cmd, rules_cmd  # noqa: F401

    for mod in ("verify_cmd", "acceptance_cmd", "push_cmd", "score_cmd", "trace_cmd"):
        try:
            __import__(f"kconvert.cli.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"kconvert.cli.{mod}":
                raise


def main(argv: list[str] | None = None) -> int:
    from kconvert.cli._output import error_line
    from kconvert.errors import EXIT_USAGE, KConvertError

    _register()
    try:
        rc = app(args=argv, standalone_mode=False)
    except KConvertError as e:
        error_line(e.message, e.hint)
        last = getattr(e, "last_lines", None)
        if last:
            from kconvert.cli._output import err_console

            err_console.print("[dim]engine's last lines:[/]")
            for line in last:
                err_console.print(f"  {line}", highlight=False, markup=False)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        error_line("aborted")
        return 130
    except KeyboardInterrupt:
        error_line("interrupted")
        return 130
    except Exception as e:  # click usage errors and real bugs: one line, never a traceback
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            return EXIT_USAGE
        if os.environ.get("KCONVERT_DEBUG"):
            raise
        error_line(f"internal error: {type(e).__name__}: {e}", "this is a kconvert bug; rerun with KCONVERT_DEBUG=1 "
                                                               "for the traceback and report it")
        return EXIT_USAGE
    return rc if isinstance(rc, int) else 0


def entry() -> None:
    sys.exit(main())
