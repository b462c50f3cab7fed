"""The run page's pictures and log for DPO, ORPO and GRPO, in both languages, and the form's method-specific fields."""

from __future__ import annotations

from engine.config import TrainConfig
from engine.fields import from_flat
from engine.views.finetune_form import DISTILL_ONLY, FT_TRAIN, METHOD_DEFAULTS, OBJECTIVE_ONLY, method_values, visible_fields
from engine.views.run_charts import completions_html, objective_frame, objective_metrics
from engine.views.run_log import event_line

DPO_EVENTS = [{"type": "progress", "step": 10, "loss": 0.6, "reward_margin": 0.25, "pref_accuracy": 0.75},
              {"type": "progress", "step": 20, "loss": 0.5, "reward_margin": 0.5, "pref_accuracy": 0.875}]
GRPO_EVENTS = [{"type": "progress", "step": 10, "loss": 0.0, "reward_mean": 0.4, "reward_std": 0.3, "completion_len": 11.0},
               {"type": "completions", "step": 10, "samples": [{"prompt": "p", "completion": "2023-09-05", "answer": "2023-09-05", "reward": 1.0},
                                                               {"prompt": "p", "completion": "<b>05/09</b>", "answer": "2023-09-05", "reward": 0.0}]}]


def test_the_objective_plot_has_the_methods_metrics_in_the_visitors_language():
    frame = objective_frame(DPO_EVENTS, "dpo")
    assert list(frame.columns) == ["step", "value", "metric"] and len(frame) == 4
    assert set(frame["metric"]) == {"reward margin (chosen − rejected)", "preference accuracy"}
    pt = objective_frame(GRPO_EVENTS, "grpo", "pt-BR")
    assert set(pt["metric"]) == {"recompensa média", "dispersão da recompensa (desvio)", "tamanho da resposta (tokens)"}
    assert objective_frame(DPO_EVENTS, "lora").empty and objective_metrics("full") == ()


def test_sampled_answers_with_their_reward_escaped():
    page = completions_html(GRPO_EVENTS, "pt-BR")
    assert "Respostas amostradas no passo 10" in page and "<b>+1</b>" in page and "<b>0</b>" in page and "&lt;b&gt;05/09&lt;/b&gt;" in page and "<b>05/09" not in page
    assert completions_html(DPO_EVENTS) == ""


def test_log_lines_carry_the_metrics():
    assert "margin 0.5" in event_line(DPO_EVENTS[1]) and "chosen wins 88%" in event_line(DPO_EVENTS[1])
    assert "recompensa 0,4 ± 0,3" in event_line(GRPO_EVENTS[0], "pt-BR") and "respostas de 11 tokens" in event_line(GRPO_EVENTS[0], "pt-BR")
    line = event_line(GRPO_EVENTS[1])
    assert line.startswith("⚄") and "+1 «2023-09-05» (expected «2023-09-05»)" in line and " 0 «<b>05/09</b>»" in line
    # partial credit in the visitor's notation (issue 32: not +0.00, not 0.33 on the Portuguese page)
    partial = {"type": "completions", "step": 20, "samples": [{"completion": "2023-09", "answer": "2023-09-05", "reward": 0.333},
                                                             {"completion": "x", "answer": "2023-09-05", "reward": -0.5}]}
    assert "+0,33 «2023-09»" in event_line(partial, "pt-BR") and "−0,5 «x»" in event_line(partial, "pt-BR")
    assert "+0.33 «2023-09»" in event_line(partial) and "<b>+0,33</b>" in completions_html([partial], "pt-BR")
    assert "margin" not in event_line({"type": "progress", "step": 1, "loss": 1.0})


def test_method_fields_are_shown_only_for_their_methods():
    assert set(OBJECTIVE_ONLY) <= set(FT_TRAIN)
    assert visible_fields("grpo")["reward"] and not visible_fields("dpo")["reward"] and visible_fields("dpo")["beta"]
    assert visible_fields("kto")["beta"] and visible_fields("kto")["tuning"] and not visible_fields("kto")["reward"]
    assert not any(visible_fields("lora")[n] for n in OBJECTIVE_ONLY) and all(visible_fields("distill")[n] for n in DISTILL_ONLY)
    assert method_values("lora") == {}


def test_the_measured_method_defaults_make_valid_configs():
    for method in ("dpo", "orpo", "kto", "grpo"):
        values = method_values(method)
        cfg = from_flat(TrainConfig, {"method": method, "base_model": "run:sft", **values})
        assert cfg.weights == values["tuning"] and cfg.dataset == METHOD_DEFAULTS[method]["dataset"]
