"""`python -m kconvert` (and the `kconvert` script): the command line, with SIGINT and SIGTERM handled from its
first import on, so that a signal at any point of a command exits 130 or 143 with one line (issue #45), start-up
(~0.1 s of imports) included."""
import signal
import sys

from kconvert.errors import interrupt_exit_code, interrupt_message, raise_interrupted


def run() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # a signal the caller ignores stays ignored
            signal.signal(sig, raise_interrupted)
    try:
        from kconvert.cli import entry
    except KeyboardInterrupt as e:
        sys.stderr.write(f"error: {interrupt_message(e)}\n")
        sys.exit(interrupt_exit_code(e))
    entry()


if __name__ == "__main__":
    run()
