"""Who may stop a run: on a public link only the browser that started it (engine/training/jobs.py module docstring)."""

from __future__ import annotations

import pytest

from engine.config import TrainConfig
from engine.errors import JobError
from engine.run_access import owner_hash as _owner_hash
from engine.runs import save_config
from engine.training.jobs import JobManager


def _fake_run(runs_dir, name: str, owner: str | None) -> None:
    run_dir = runs_dir / name
    run_dir.mkdir(parents=True)
    save_config(run_dir, TrainConfig(run_name=name))
    if owner:
        (run_dir / "owner").write_text(_owner_hash(owner) + "\n")


def test_owner_only_mode_lets_only_the_starting_browser_control_its_run(tmp_path):
    _fake_run(tmp_path, "mine", "key-a")
    _fake_run(tmp_path, "from-cli", None)
    jobs = JobManager(tmp_path, owner_only=True)
    assert jobs.may_control("mine", "key-a")
    assert not jobs.may_control("mine", "key-b") and not jobs.may_control("mine", None)
    # a run without an owner key (the CLI) is controllable by nobody through a shared app
    assert not jobs.may_control("from-cli", "key-b") and not jobs.may_control("from-cli", None)
    with pytest.raises(JobError, match="started from another browser or session: only that browser can stop it") as err:
        jobs.check_control("mine", "key-b", "stop")
    assert "só aquele navegador pode pará-lo" in err.value.render("pt-BR")  # a visitor reads it in their language
    for action in ("resume", "retry", "delete", "download", "export", "merge", "push"):  # every action has its sentence
        with pytest.raises(JobError) as err:
            jobs.check_control("mine", "key-b", action)
        assert err.value.render("pt-BR").startswith("O treino 'mine' foi iniciado em outro navegador")
    assert "key-a" not in (tmp_path / "mine" / "owner").read_text()  # only a hash is kept


def test_single_user_mode_lets_anyone_control_every_run(tmp_path):
    _fake_run(tmp_path, "mine", "key-a")
    jobs = JobManager(tmp_path)
    assert jobs.may_control("mine", "key-b") and jobs.may_control("mine", None)
