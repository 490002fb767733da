"""A signal that lands while a module is imported, inside a class statement, reaches the
command as Python 3.11's RuntimeError("Error calling __set_name__ ...") caused by the
KeyboardInterrupt (seen once in the suite on a loaded machine: a traceback and exit 1 for
a Ctrl-C). It is an interrupt: one line, exit 130, the JSON object saying so."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from genwire.cli.errors import signal_inside

SCRIPT = textwrap.dedent(
    """
    import click
    from genwire.cli.errors import handle_errors, run_cli

    class Landed:  # a Field whose __set_name__ the signal interrupts
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    @click.group()
    def group():
        pass

    @group.command()
    @handle_errors
    def imports():
        class Graph:
            nodes = Landed()

    run_cli(group, ["imports"])
    """
)


def test_a_signal_inside_a_class_statement_is_an_interrupt_not_a_traceback() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines() == ["interrupted"], proc.stderr


def test_signal_inside_follows_the_causes_and_stops_at_a_cycle() -> None:
    interrupt = KeyboardInterrupt()
    try:
        try:
            raise interrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__") from exc
    except RuntimeError as wrapped:
        assert signal_inside(wrapped) is interrupt
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert signal_inside(a) is None
