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
    out = capsys.readouterr().out
    assert "usage:" in out
    assert "option_strings" not in out  # an unescaped % in a help text makes argparse print the action's dict


def test_resuming_a_run_saved_before_packing_keeps_it_padded(tmp_path, monkeypatch):
    """config.yaml files written before the `packing` field existed describe padded runs: --resume keeps them so."""
    import yaml

    import engine.training.run
    from engine.cli import main

    seen = {}
    monkeypatch.setenv("COMPACT_LAB_RUNS", str(tmp_path))
    monkeypatch.setattr(engine.training.run, "run_training", lambda cfg, run_dir, **kw: seen.setdefault("cfg", cfg) and {"type": "done"})
    old = tmp_path / "r" / "config.yaml"  # a resumed run always continues with its own config.yaml
    old.parent.mkdir()
    old.write_text(yaml.safe_dump({"method": "full", "dataset": "builtin:dates"}))
    assert main(["train", "--run-dir", str(tmp_path / "r"), "--resume"]) == 0
    assert seen.pop("cfg").packing is False
    assert main(["train", "--config", str(old), "--run-dir", str(tmp_path / "r2")]) == 0  # a new run: the default
    assert seen.pop("cfg").packing is True
