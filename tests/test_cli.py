"""The CLI's help pages: every subcommand's --help prints (field help texts may contain '%', which argparse formats)."""

from __future__ import annotations

import pytest

from engine.cli import build_parser


def _subcommands() -> list[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(action.choices)


@pytest.mark.parametrize("command", _subcommands())
def test_every_subcommand_has_a_working_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--help"])
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out
