"""The node commands' argument parsing and checks over random and malformed command lines:
every outcome is a checked command or one `ArgumentError` with a message, never a traceback."""

from __future__ import annotations

from hypothesis import given, settings

from nodeops.common.cliargs import ArgumentError
from nodeops.drain.command import NodeCommand, parse
from tests.argv_strategies import command_lines


@settings(max_examples=400, deadline=None)
@given(command_lines())
def test_any_command_line_parses_or_is_refused_in_one_line(argv: list[str]) -> None:
    try:
        command = parse(argv)
    except ArgumentError as exc:
        text = exc.lines(f"nodeops {argv[0]}")
        assert text.startswith(("error: ", "Error from server")), text
        assert len(text.splitlines()) <= 2, text
        return
    assert isinstance(command, NodeCommand)
    assert command.verb == argv[0]
    assert bool(command.names) != bool(command.selector)
    if command.verb == "drain":
        assert command.options is not None and command.parallel >= 1
        assert command.options.timeout >= 0 and command.options.volume_timeout >= 0


def test_flags_and_names_mix_in_any_order() -> None:
    command = parse(
        ["drain", "node-1", "--force", "node/node-2", "--timeout=5m", "--parallel", "2"]
    )
    assert command.names == ("node-1", "node-2")
    assert command.parallel == 2
    assert command.options is not None and command.options.timeout == 300
    assert command.options.force
