"""Knowledge distillation (method "distill"): the loss by hand, the config checks, and a real tiny run on CPU."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import stop_requested_at

from engine.config import GenerationSettings, QuantSettings, TrainConfig
from engine.errors import ConfigError
from engine.training.distill import _check_vocabularies, distillation_loss

# --------------------------------------------------------------------------------------------------
# The loss on tiny tensors
# --------------------------------------------------------------------------------------------------


def _batch(seed: int = 0, B: int = 2, T: int = 5, V: int = 7):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, T, V, generator=g) * 2
    t = torch.randn(B, T, V, generator=g) * 2
    labels = torch.randint(0, V, (B, T), generator=g)
    labels[0, :2] = -100  # a masked prompt
    labels[1, 3] = -100
    return s, t, labels


def _by_hand(s, t, labels, T, alpha):
    """Position by position with Python floats: alpha*T^2*KL(p_t||p_s) + (1-alpha)*CE, averaged over scored tokens."""
    kd = ce = 0.0
    n = 0
    for b in range(labels.shape[0]):
        for i in range(labels.shape[1] - 1):
            y = int(labels[b, i + 1])
            if y == -100:
                continue
            n += 1
            zs, zt = s[b, i].tolist(), t[b, i].tolist()
            ce += -(zs[y] - math.log(sum(math.exp(z) for z in zs)))
            ps = [math.exp(z / T) for z in zs]
            pt = [math.exp(z / T) for z in zt]
            ps = [p / sum(ps) for p in ps]
            pt = [p / sum(pt) for p in pt]
            kd += T * T * sum(a * math.log(a / b_) for a, b_ in zip(pt, ps, strict=True))
    return alpha * kd / n + (1 - alpha) * ce / n, kd / n, ce / n


@pytest.mark.parametrize("T,alpha", [(1.0, 0.5), (2.0, 0.3), (4.0, 0.9)])
def test_loss_matches_hand_computation(T, alpha):
    s, t, labels = _batch()
    out = distillation_loss(s, t, labels, temperature=T, alpha=alpha)
    loss, kd, ce = _by_hand(s, t, labels, T, alpha)
    assert out.loss.item() == pytest.approx(loss, rel=1e-5)
    assert out.kd.item() == pytest.approx(kd, rel=1e-5) and out.ce.item() == pytest.approx(ce, rel=1e-5)


def test_alpha_0_is_plain_cross_entropy():
    s, t, labels = _batch(1)
    out = distillation_loss(s, t, labels, temperature=3.0, alpha=0.0)
    ref = F.cross_entropy(s[:, :-1].reshape(-1, s.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-6)


def test_alpha_1_is_t2_kl():
    s, t, labels = _batch(2)
    T = 2.5
    out = distillation_loss(s, t, labels, temperature=T, alpha=1.0)
    mask = labels[:, 1:] != -100
    kl = F.kl_div(F.log_softmax(s[:, :-1][mask] / T, -1), F.log_softmax(t[:, :-1][mask] / T, -1), log_target=True, reduction="batchmean")
    assert out.loss.item() == pytest.approx(T * T * kl.item(), rel=1e-5)


def test_identical_logits_have_no_kl():
    s, _, labels = _batch(3)
    out = distillation_loss(s, s.clone(), labels, temperature=2.0, alpha=1.0)
    assert abs(out.kd.item()) < 1e-6 and abs(out.loss.item()) < 1e-6


def test_masked_positions_are_ignored():
    s, t, labels = _batch(4)
    base = distillation_loss(s, t, labels, temperature=2.0, alpha=0.5).loss.item()
    s2, t2 = s.clone(), t.clone()
    # position i predicts label i+1: row 0 positions 0 (label 1 masked) and row 1 position 2 (label 3 masked), and the last position
    for b, i in [(0, 0), (1, 2), (0, 4), (1, 4)]:
        s2[b, i] = torch.randn(s.shape[-1]) * 10
        t2[b, i] = torch.randn(s.shape[-1]) * 10
    assert distillation_loss(s2, t2, labels, temperature=2.0, alpha=0.5).loss.item() == pytest.approx(base, rel=1e-6)
    s2[0, 1, 0] += 5.0  # position 1 predicts label 2, which is scored
    assert distillation_loss(s2, t2, labels, temperature=2.0, alpha=0.5).loss.item() != pytest.approx(base, rel=1e-6)


def test_gradient_matches_autograd_in_chunks():
    """The hand-written gradient (computed chunk by chunk in forward) equals autograd's on the plain formula."""
    s, t, labels = _batch(5, B=3, T=6, V=11)
    T, alpha = 2.0, 0.7
    s1 = s.clone().requires_grad_(True)
    distillation_loss(s1, t, labels, temperature=T, alpha=alpha, chunk_rows=2).loss.backward()
    s2 = s.clone().requires_grad_(True)
    mask = labels[:, 1:] != -100
    zs, zt, y = s2[:, :-1][mask], t[:, :-1][mask], labels[:, 1:][mask]
    kl = F.kl_div(F.log_softmax(zs / T, -1), F.log_softmax(zt / T, -1), log_target=True, reduction="batchmean")
    (alpha * T * T * kl + (1 - alpha) * F.cross_entropy(zs, y)).backward()
    assert torch.allclose(s1.grad, s2.grad, atol=1e-6)
    assert s1.grad[0, 0].abs().sum() == 0  # a masked position gets no gradient


def test_num_items_in_batch_divides_the_sums():
    s, t, labels = _batch(6)
    n = int((labels[:, 1:] != -100).sum())
    mean = distillation_loss(s, t, labels, temperature=2.0, alpha=0.5).loss
    summed = distillation_loss(s, t, labels, temperature=2.0, alpha=0.5, num_items_in_batch=torch.tensor(2 * n)).loss
    assert summed.item() == pytest.approx(mean.item() / 2, rel=1e-6)


def test_edge_cases_stay_finite():
    s, t, labels = _batch(7)
    t[..., 0] = float("-inf")  # a token the teacher never predicts: 0 * log 0 must count as 0, not nan
    assert math.isfinite(distillation_loss(s, t, labels, temperature=2.0, alpha=0.5).loss.item())
    none = torch.full_like(labels, -100)
    s1 = s.clone().requires_grad_(True)
    out = distillation_loss(s1, t, none, temperature=2.0, alpha=0.5)
    out.loss.backward()
    assert out.loss.item() == 0.0 and s1.grad.abs().sum() == 0
    with pytest.raises(ValueError, match="vocabularies"):
        distillation_loss(s, t[..., :5], labels, temperature=2.0, alpha=0.5)


def test_bf16_logits_train_in_fp32_math():
    s, t, labels = _batch(8)
    ref = distillation_loss(s, t, labels, temperature=2.0, alpha=0.5).loss.item()
    sb = s.bfloat16().requires_grad_(True)
    out = distillation_loss(sb, t.bfloat16(), labels, temperature=2.0, alpha=0.5)
    out.loss.backward()
    assert out.loss.dtype == torch.float32 and out.loss.item() == pytest.approx(ref, rel=2e-2)
    assert sb.grad.dtype == torch.bfloat16


# --------------------------------------------------------------------------------------------------
# Config, CLI, handoff
# --------------------------------------------------------------------------------------------------


def test_config_validation_names_the_field():
    with pytest.raises(ConfigError, match="teacher_model"):
        TrainConfig(method="distill", base_model="builtin:compact-mini")
    with pytest.raises(ConfigError, match="teacher_model"):
        TrainConfig(method="distill", teacher_model="   ")
    for bad in (0.0, -1.0, 100.0):
        with pytest.raises(ConfigError, match="distill_temperature"):
            TrainConfig(method="distill", teacher_model="builtin:compact-mini", distill_temperature=bad)
    for bad in (-0.1, 1.5):
        with pytest.raises(ConfigError, match="distill_alpha"):
            TrainConfig(method="distill", teacher_model="builtin:compact-mini", distill_alpha=bad)
    with pytest.raises(ConfigError, match="quant.mode"):
        TrainConfig(method="distill", teacher_model="builtin:compact-mini", quant=QuantSettings(mode="8bit"))
    cfg = TrainConfig(method="distill", teacher_model=" builtin:compact-mini ", distill_temperature=4, distill_alpha=1)
    assert cfg.teacher_model == "builtin:compact-mini" and cfg.distill_temperature == 4.0
    assert TrainConfig(method="lora").teacher_model == ""  # other methods need no teacher


def test_cli_flags_and_saved_config(tmp_path, capsys):
    from engine.cli import main

    rc = main(["train", "--method", "distill", "--teacher-model", "builtin:compact-mini", "--distill-temperature", "3",
               "--distill-alpha", "0.25", "--run-dir", str(tmp_path / "r"), "--print-config"])
    out = capsys.readouterr().out
    assert rc == 0 and "method: distill" in out and "teacher_model: builtin:compact-mini" in out
    assert "distill_temperature: 3.0" in out and "distill_alpha: 0.25" in out
    assert main(["train", "--method", "distill", "--run-dir", str(tmp_path / "r"), "--print-config"]) == 2
    assert "teacher_model" in capsys.readouterr().err


def test_memory_query_and_ui_checks(tmp_path):
    from engine.estimator.handoff import check_ui_train_config, query_from_train
    from engine.estimator.memory import estimate
    from engine.training.distill import estimate_distill

    cfg = TrainConfig(method="distill", base_model="builtin:compact-mini", teacher_model="builtin:compact-course", dataset="builtin:dates")
    q = query_from_train(cfg, "fp32")  # the student alone: full training of the preset
    assert q.task == "full" and q.model == "builtin:compact-mini"
    alone = estimate(q)
    est = estimate_distill(cfg, "fp32")
    # the student gets the teacher's 8192-token vocabulary (the preset has 2048) and the teacher's memory is added
    assert est.params > alone.params and est.allocated_gib > alone.allocated_gib and est.total_gib > alone.total_gib
    assert any("teacher" in n for n in est.notes)
    assert estimate_distill(cfg, "bf16").allocated_gib < est.allocated_gib
    assert estimate_distill(TrainConfig(method="distill", teacher_model="run:some-run"), "fp32") is None
    uploads = tmp_path / "_uploads"
    uploads.mkdir()
    check_ui_train_config(cfg, tmp_path, uploads)
    with pytest.raises(ConfigError, match="teacher_model"):
        check_ui_train_config(TrainConfig(method="distill", teacher_model="/etc/models"), tmp_path, uploads)


def test_app_form_predicts_shows_and_previews_distill(runs_dir):
    """Through the app's API: the fields are in the form, the prediction adds the teacher, the preview uses its tokenizer."""
    pytest.importorskip("gradio")
    from gradio_client import Client

    import app
    from engine.fields import field_specs
    from engine.views.finetune_form import FT_DATA, FT_DEFAULTS, FT_LORA, FT_MAIN, FT_RUN, FT_TRAIN

    names = FT_MAIN + FT_TRAIN + FT_LORA + FT_RUN + FT_DATA  # the order of the form's inputs
    assert {"teacher_model", "distill_temperature", "distill_alpha"} <= set(names)
    specs = {s.name: s.default for s in field_specs(TrainConfig)}

    def values(**over):
        v = {**specs, **FT_DEFAULTS, **over}
        return [None] + [v[n] for n in names] + [None]  # dataset upload first, eval upload last

    demo = app.build_app(runs_dir)
    demo.queue(default_concurrency_limit=1)
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=None, quiet=True)
    try:
        client = Client(demo.local_url, verbose=False)
        full = client.predict(*values(), api_name="/predict_memory")
        distill = client.predict(*values(method="distill", teacher_model="builtin:compact-course"), api_name="/predict_memory")
        peak = lambda text: float(text.split("Predicted peak **")[1].split(" GiB")[0])  # noqa: E731
        assert peak(distill) > peak(full)  # + the teacher's weights and logits
        missing = client.predict(*values(method="distill"), api_name="/predict_memory")
        assert "⚠" in missing and "teacher_model" in missing
        cmd = client.predict(*values(method="distill", teacher_model="builtin:compact-mini", distill_alpha=0.8), api_name="/show_command")
        text = cmd["value"] if isinstance(cmd, dict) else cmd
        assert "method: distill" in text and "teacher_model: builtin:compact-mini" in text and "distill_alpha: 0.8" in text
        summary = client.predict(*values(method="distill", teacher_model="builtin:compact-mini"), api_name="/inspect_data")[0]
        assert "tokenizer of builtin:compact-mini" in summary
    finally:
        demo.close()


class _Tok:
    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)


class _Model:
    def __init__(self, n: int) -> None:
        self.head = torch.nn.Linear(2, n, bias=False)

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.head


def test_vocabulary_mismatch_is_a_clear_config_error():
    cfg = TrainConfig(method="distill", base_model="run:student", teacher_model="org/teacher")
    a, b = _Tok({"a": 0, "b": 1, "c": 2}), _Tok({"a": 0, "x": 1, "c": 2})
    with pytest.raises(ConfigError, match="teacher_model.*same vocabulary"):
        _check_vocabularies(cfg, a, b, _Model(3), _Model(3))
    # same tokenizer, padded heads of different sizes: the common columns are compared
    assert _check_vocabularies(cfg, a, _Tok(a.vocab), _Model(8), _Model(4)) == 4
    with pytest.raises(ConfigError, match="teacher_model"):
        _check_vocabularies(cfg, a, _Tok(a.vocab), _Model(8), _Model(2))


# --------------------------------------------------------------------------------------------------
# A real run on CPU
# --------------------------------------------------------------------------------------------------


def test_distill_run_end_to_end(runs_dir, monkeypatch):
    from engine.inference import tasks
    from engine.inference.generate import generate_text
    from engine.models.loading import load_model
    from engine.runs import read_events
    from engine.training.run import run_training

    cfg = TrainConfig(method="distill", base_model="builtin:compact-mini", teacher_model="builtin:compact-mini", dataset="builtin:dates",
                      distill_temperature=2.0, distill_alpha=0.7, max_steps=6, micro_batch_size=4, max_seq_len=64, logging_steps=1,
                      save_steps=100, eval_fraction=0.1, learning_rate=2e-3, run_name="t-distill")
    run_dir = runs_dir / cfg.run_name
    items = tasks.date_items
    monkeypatch.setattr(tasks, "date_items", lambda split, n=None: items(split, 8))  # score 8 dates, not 100: CPU time
    done = run_training(cfg, run_dir, runs_dir=runs_dir)
    assert done["type"] == "done" and done["output"] == "model" and done["steps"] == 6
    events = read_events(run_dir)
    info = next(e for e in events if e["type"] == "distill")
    assert info["teacher"] == "builtin:compact-mini" and info["student_params"] == info["teacher_params"]
    progress = [e for e in events if e["type"] == "progress"]
    assert all("kd_loss" in e and "ce_loss" in e for e in progress)
    for e in progress:  # the logged loss is the weighted sum of the two parts
        assert e["loss"] == pytest.approx(0.7 * e["kd_loss"] + 0.3 * e["ce_loss"], rel=1e-3, abs=1e-3)
    assert progress[-1]["loss"] < progress[0]["loss"]  # a random student moves towards its teacher
    scores = {e["when"] for e in events if e["type"] == "task_score"}
    assert scores == {"teacher", "after"}  # no "before": a student from random weights has nothing to score
    assert any(e["type"] == "memory" for e in events)
    # a full model folder with the teacher's tokenizer, loadable like any run
    model_dir = run_dir / "model"
    assert json.loads((model_dir / "config.json").read_text())["model_type"] == "compact_llm"
    teacher_tok = json.loads((runs_dir / "_builtin" / "compact-mini" / "model" / "tokenizer.json").read_text())["model"]["vocab"]
    assert json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"] == teacher_tok
    loaded = load_model(f"run:{cfg.run_name}", runs_dir=runs_dir)
    text = generate_text(loaded, "Converta a data 05/09/2023 para o formato ISO (AAAA-MM-DD).", GenerationSettings(max_new_tokens=6, do_sample=False))
    assert isinstance(text, str)


def test_pretrained_student_with_the_teachers_vocabulary(runs_dir):
    """A student that is not a built-in preset is loaded pretrained and trained in full against the teacher."""
    from engine.training.run import run_training

    student = str(runs_dir / "_builtin" / "compact-mini" / "model")  # a local folder (allowed from the CLI / a run config)
    cfg = TrainConfig(method="distill", base_model=student, teacher_model="builtin:compact-mini", dataset="builtin:instructions",
                      max_steps=2, micro_batch_size=2, max_seq_len=32, logging_steps=1, save_steps=100, eval_fraction=0.0, run_name="t-distill-pre")
    done = run_training(cfg, runs_dir / cfg.run_name, runs_dir=runs_dir)
    assert done["type"] == "done" and (runs_dir / cfg.run_name / "model" / "config.json").exists()
    # the same weights as the teacher: the soft term starts at ~0
    assert done["final_loss"] < 10


def test_stopped_distill_run_resumes(runs_dir):
    """Stop after step 1 (a checkpoint of the student is saved), resume: the teacher is loaded again and the run finishes."""
    from engine.runs import read_events
    from engine.training.run import run_training

    cfg = TrainConfig(method="distill", base_model="builtin:compact-mini", teacher_model="builtin:compact-mini", dataset="builtin:instructions",
                      max_steps=3, micro_batch_size=2, max_seq_len=32, logging_steps=1, save_steps=100, eval_fraction=0.0, run_name="t-distill-stop")
    run_dir = runs_dir / cfg.run_name
    with stop_requested_at(1):
        stopped = run_training(cfg, run_dir, runs_dir=runs_dir)
    assert stopped["type"] == "stopped" and stopped["checkpoint"] == "checkpoint-1"
    done = run_training(cfg, run_dir, runs_dir=runs_dir, resume=True)
    assert done["type"] == "done" and done["steps"] == 3
    assert [e["resumed_from"] for e in read_events(run_dir) if e["type"] == "start"] == [None, "checkpoint-1"]
