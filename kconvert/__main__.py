"""`python -m kconvert` (and the `kconvert` script): the command line, with SIGINT and SIGTERM handled from its
first import on, so that a signal at any point of a command exits 130 or 143 with one line (issue #45), start-up
(~0.1 s of imports) included."""
import signal

from kconvert.errors import end_process, interrupt_exit_code, interrupt_message, raise_interrupted


def run() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # a signal the caller ignores stays ignored
            signal.signal(sig, raise_interrupted)
    try:
        from kconvert.cli import entry

        entry()  # ends the process (kconvert.errors.end_process)
    except KeyboardInterrupt as e:  # during the imports, or before entry's own guard
        end_process(interrupt_exit_code(e), f"error: {interrupt_message(e)}")


if __name__ == "__main__":
    run()
