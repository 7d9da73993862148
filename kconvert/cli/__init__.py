"""kconvert's command line: parse, call the library, render. One module per command."""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

import typer
from typer._click.exceptions import ClickException  # typer 0.29 raises its bundled click's, not click's

from kconvert.cli import _output
from kconvert.cli._app import app  # re-exported: `kconvert.cli.app`
from kconvert.errors import (EXIT_INTERNAL, EXIT_USAGE, Interrupted, KConvertError, end_process, exit_on_signal,
                             interrupt_of, raise_interrupted, signals_received)


def _register() -> None:
    """Register every command on `app` (each module's @app.command runs at its import). Imported here, at the first
    `main`, not at `import kconvert.cli`: a library user importing `kconvert.cli.app` or `main` pays for the
    commands only when the command line runs; an import error in a command is an error, never hidden."""
    from kconvert.cli import (acceptance_cmd, engines_cmd, fix_cmd, inspect_cmd, matrix_cmd,  # noqa: F401
                              push_cmd, push_trace_cmd, rules_cmd, score_cmd, trace_cmd, verify_cmd)


def _completion(args: list[str]) -> int | None:
    """`kconvert --show-completion [SHELL]` / `--install-completion [SHELL]` for the shell named (typer's own
    options take no value when they detect the shell, so `--show-completion zsh` printed the bash script); no
    shell named: the detected one, as typer does. None when the command line asks for neither."""
    if not args or args[0].split("=", 1)[0] not in ("--show-completion", "--install-completion"):
        return None
    flag, _, given = args[0].partition("=")
    shell = given or (args[1] if len(args) > 1 else "")
    from typer._completion_shared import Shells, _get_shell_name, get_completion_script, install

    names = [s.value for s in Shells]
    if not shell:
        shell = _get_shell_name() or ""
    if shell not in names:
        _output.error_line(f"{flag} {shell!r}: not a shell kconvert completes; choose one of {', '.join(names)}")
        return EXIT_USAGE
    if flag == "--show-completion":
        typer.echo(get_completion_script(prog_name="kconvert", complete_var="_KCONVERT_COMPLETE", shell=shell))
    else:
        sh, path = install(shell=shell, prog_name="kconvert", complete_var="_KCONVERT_COMPLETE")
        typer.echo(f"{sh} completion installed in {path}; it takes effect in a new terminal")
    return 0


def _click_command(args: list[str]):
    """The click command typer builds from `app`, built once per process: typer rebuilds it on every `app(...)`
    call (~40 ms of signature introspection), which a program calling `main` many times (tests) pays each time.
    When the command line starts with a command's name (`kconvert inspect ...`) only that command is built: the
    others' parameters are never read (~25 ms); anything else (`--help`, a mistyped name) builds them all."""
    names = {info.name for info in app.registered_commands} | {info.name for info in app.registered_groups}
    return _built(args[0] if args and args[0] in names else None)


@functools.cache
def _built(name: str | None):
    """The click command for one command name (None: all of them), built once per process."""
    everything, groups = app.registered_commands, app.registered_groups
    try:
        if name is not None:
            # a command (`inspect`) or a command group (`engines`): only that one is built
            app.registered_commands = [info for info in everything if info.name == name]
            app.registered_groups = [info for info in groups if info.name == name]
        command = typer.main.get_command(app)
    finally:
        app.registered_commands, app.registered_groups = everything, groups
    groups = [command]
    while groups:
        for cmd in getattr(groups.pop(), "commands", {}).values():
            # `kconvert -h` (and `kconvert engines -h`) lists each command by its first sentence, whole (click
            # cuts it at ~45 characters with "..."); click wraps the list at the terminal's width
            if not cmd.short_help and cmd.help:
                first = " ".join(cmd.help.split("\n\n", 1)[0].split())
                cmd.short_help = first.split(". ", 1)[0].rstrip(".") + "."
            _guarded(cmd)
            groups.append(cmd)
    return command


@contextmanager
def _interrupts() -> Iterator[None]:
    """For the whole run, SIGINT and SIGTERM raise kconvert.errors.Interrupted, a KeyboardInterrupt: every command's
    cleanup runs as for Ctrl-C and the run exits 128 + the signal (130, 143) with one line. Restored after; a signal
    the caller ignores stays ignored; outside the main thread (a library caller's thread) nothing is installed,
    as Python allows handlers in the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        current = signal.getsignal(sig)
        if current is not signal.SIG_IGN:
            old[sig] = signal.signal(sig, raise_interrupted)
    old_hook = sys.unraisablehook

    def unraisable(u: Any) -> None:
        # A signal that arrives while Python runs a finalizer or a weakref callback raises there, where no exception
        # can propagate: Python printed "Exception ignored in: <function WeakKeyDictionary...remove>" with a
        # traceback and the run went on (a clean-clone CI run met it, 1 time in ~40 signals). The interrupt is
        # delivered again, to the code that runs next: by another thread, a millisecond later (raise_signal here
        # would run the handler inside this hook, where it raises unheard again), and only while kconvert's handler
        # is still the one in place (after the run, the default action would kill the process).
        if isinstance(u.exc_value, Interrupted):
            threading.Timer(0.001, _deliver_again, (u.exc_value.signum,)).start()
            return
        old_hook(u)

    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        sys.unraisablehook = old_hook
        for sig, handler in old.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _deliver_again(signum: int) -> None:
    # kconvert's handler of the run, or of the process's end (kconvert.errors.end_process) when the run has ended
    # since: either says it; any other handler (a library caller's default action) is never triggered from here
    if signal.getsignal(signum) in (raise_interrupted, exit_on_signal):
        signal.pthread_kill(threading.main_thread().ident, signum)


def _interrupted(e: BaseException | None) -> int:
    return _output.interrupt_line(e)


def _no_cache(value: str) -> bool:
    """`--cache off` and its other spellings: no file at all."""
    from kconvert.matrix.cache import OFF  # deferred: only a command with a cache option asks

    return value.strip().lower() in OFF


def _guarded(cmd) -> None:
    """Check, before `cmd` runs, that none of its destinations (the parameters `kconvert.cli._common.path` declares
    an output) is, holds or lies inside one of its inputs (those it declares an input), by the one guard
    (`kconvert.guard.paths.check_apart`), and hand the inputs to the report writer (`_common.command_inputs`). Read
    from the parameters themselves: an option declared a path is guarded without another edit."""
    from kconvert.cli._common import CACHE, INPUT, path_role, set_command_inputs

    roles = {p.name: (path_role(p), p.opts[0] if p.opts else p.name) for p in cmd.params if path_role(p)}
    if not roles or getattr(cmd.callback, "_kconvert_guarded", False):
        return
    run = cmd.callback

    @functools.wraps(run)
    def callback(**kwargs):
        from kconvert.guard.paths import check_apart, check_distinct, existing_inputs

        def values(name):
            v = kwargs.get(name)
            return [] if v is None else list(v) if isinstance(v, (list, tuple)) else [v]

        inputs = tuple(existing_inputs(v for n, (role, _) in roles.items() if role == INPUT for v in values(n)))
        inputs += _project_inputs(kwargs, inputs)
        dests = []
        for name, (role, flag) in roles.items():
            if role != INPUT:
                for v in values(name):
                    if str(v) != "-" and not (role == CACHE and _no_cache(str(v))):  # standard output; no cache
                        check_apart(v, inputs, f"{flag} {v}")
                    if not (role == CACHE and _no_cache(str(v))):
                        dests.append((f"{flag} {v}", v))
        check_distinct(dests)  # before anything is written: no output replaces, or is refused after, another
        set_command_inputs(inputs)
        return run(**kwargs)

    callback._kconvert_guarded = True
    cmd.callback = callback


def _project_inputs(kwargs: dict, given: tuple[str, ...]) -> tuple[str, ...]:
    """What a command reads because its project configuration names it (kconvert.toml or `--config`: the file
    itself and its `target`, when the command line gives none), as inputs no destination may be, hold or lie
    inside: with `target = "./t"` in kconvert.toml, `inspect d --report` into that folder wrote there."""
    if "config" not in kwargs:
        return ()
    from kconvert.guard.paths import existing_inputs
    from kconvert.project import load_config

    cfg = load_config(kwargs.get("config"), isolated=bool(kwargs.get("isolated")))
    named = [cfg.path] + ([cfg.get("target")] if "target" in kwargs and kwargs.get("target") is None else [])
    return tuple(p for p in existing_inputs(named) if p not in given)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code (0 pass, 1 findings or failed gate, 2 bad usage or unreadable
    input, 3 this machine cannot run the step, 70 a kconvert bug, 130 and 143 interrupted by SIGINT and SIGTERM)."""
    with _interrupts():
        signals, lines = signals_received(), _output.interrupt_lines()
        try:
            rc = _main(argv)
        except KeyboardInterrupt as e:  # a second signal while the first one's line was being printed
            return _interrupted(e)
        # typer's own main turns a KeyboardInterrupt in a command into a silent exit 130 (typer 0.29, `core._main`:
        # `raise Exit(130) from e`), whichever signal it was: a signal handled during the run and not yet said is
        # said here, with its own exit code
        if signals_received() > signals and _output.interrupt_lines() == lines:
            return _interrupted(None)
        return rc


def _main(argv: list[str] | None) -> int:
    _register()
    args = sys.argv[1:] if argv is None else list(argv)
    done = _completion(args)
    if done is not None:
        return done
    # the command and format `begin` records, for the failure path below; the command named on the line until then
    # (a failure before `begin`, a bad configuration, still says which command failed)
    names = {info.name for info in app.registered_commands}
    run = _output.Run(command=args[0] if args and args[0] in names else None)
    try:
        rc = _click_command(args).main(args=args, standalone_mode=False, prog_name="kconvert", obj=run)
    except KConvertError as e:
        if interrupt_of(e) is not None:  # raised while cleaning up after the interrupt: the interrupt's
            return _interrupted(e)
        _output.error_line(e.message, e.hint)
        last = getattr(e, "last_lines", None)
        if last:
            _output.err_console.print("[dim]engine's last lines:[/]")
            for line in last:
                _output.echo_line(f"  {line}")
        # a failure before the command recorded its format (a bad configuration key) still answers --json
        _output.emit_failure(run.failure(type(e).__name__, e.message, e.exit_code, hint=e.hint, last_lines=last),
                             run.format or _output.format_from_argv(args))
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt) as e:  # click wraps an interrupt in Abort (its __cause__)
        return _interrupted(e)
    except ClickException as e:
        # A mistyped command, an unknown option, a missing argument: the usage message, exit 2 (click's own
        # rendering, as the help is click's: bare `kconvert` prints the whole help this way).
        if type(e).__name__ == "NoArgsIsHelpError" and getattr(e, "ctx", None) is not None:
            typer.echo(e.ctx.get_help())  # bare `kconvert`: the help on stdout, as --help prints it
        else:
            e.show()
        # a machine format answers on stdout (emit_failure: full and concise print nothing there)
        _output.emit_failure(run.failure("UsageError", e.format_message(), EXIT_USAGE), _output.format_from_argv(args))
        return EXIT_USAGE
    except BrokenPipeError:
        # `kconvert inspect ... | head -1`: the reader left; say nothing more on a closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:  # a kconvert bug: one line, never a traceback, its own exit code
        if interrupt_of(e) is not None:  # raised while cleaning up after an interrupt: the interrupt's, no bug
            return _interrupted(e)
        if os.environ.get("KCONVERT_DEBUG"):
            raise
        message = f"internal error: {type(e).__name__}: {e}"
        _output.error_line(message, "this is a kconvert bug; rerun with KCONVERT_DEBUG=1 for the traceback and "
                                    "report it")
        _output.emit_failure(run.failure("InternalError", message, EXIT_INTERNAL),
                             run.format or _output.format_from_argv(args))
        return EXIT_INTERNAL
    return rc if isinstance(rc, int) else 0


# numpy's bundled OpenBLAS starts one thread per core when numpy loads, and they spin a while waiting for work that
# these commands never give them (kconvert does no linear algebra in numpy; torch has its own MKL): 0.06-0.1 CPU-s
# per command, which a `fix` takes from its hashing (bench/NOTES.md). Only for commands that never start an engine,
# whose children inherit the environment; a user's own setting wins.
_ONE_BLAS_THREAD = {"inspect", "fix", "rules"}


def entry() -> None:
    """The command line as a process: run it, then end the process (kconvert.errors.end_process), 128 + the signal
    with one line for SIGINT and SIGTERM from here to the end."""
    try:
        if sys.argv[1:2] and sys.argv[1] in _ONE_BLAS_THREAD:
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        rc = main()
    except KeyboardInterrupt as e:  # outside main's own guard: its first or last instructions
        rc = _interrupted(e)
    end_process(rc)
