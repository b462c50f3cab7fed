"""The run's pictures (engine/views/run_charts.py): the loss plot's smoothing and log scale, and the date task's
accuracy bars with right and wrong answers."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from engine.views.run_charts import ema, loss_plot_frame, series_colors, series_label, task_examples, task_html, y_title
from engine.views.run_view import loss_frame

LOSSES = [{"step": s, "loss": v, "kind": "train"} for s, v in ((10, 4.0), (20, 2.0), (30, 3.0), (40, 1.0))] + [{"step": 40, "loss": 1.5, "kind": "eval"}]


def test_ema_is_debiased():
    assert ema([2.0, 2.0, 2.0], 0.9) == pytest.approx([2.0, 2.0, 2.0])  # a constant stays constant from the first point
    assert ema([4.0, 2.0], 0.5) == pytest.approx([4.0, (0.25 * 4 + 0.5 * 2) / 0.75])
    assert ema([1.0, 5.0], 0.0) == [1.0, 5.0]


def test_smoothing_adds_a_series_and_keeps_the_raw_points():
    df = loss_plot_frame(loss_frame(LOSSES), smoothing=0.6)
    assert list(df.columns) == ["step", "y", "loss", "kind"]
    assert df[df["kind"] == "train"]["loss"].tolist() == [4.0, 2.0, 3.0, 1.0]  # raw points kept
    smooth = df[df["kind"] == "train (smoothed)"]["y"].tolist()
    assert smooth == pytest.approx(ema([4.0, 2.0, 3.0, 1.0], 0.6)) and len(df[df["kind"] == "eval"]) == 1  # eval is not smoothed
    assert set(loss_plot_frame(loss_frame(LOSSES), smoothing=0)["kind"]) == {"train", "eval"}
    assert str(df["step"].dtype) == "int64" and df["kind"].dtype == object


def test_log_scale_plots_log10_and_keeps_the_loss_for_the_tooltip():
    df = loss_plot_frame(loss_frame(LOSSES + [{"step": 50, "loss": 0.0, "kind": "train"}]), log_scale=True, smoothing=0.0)
    assert 0.0 not in df["loss"].tolist()  # no log of 0
    first = df.iloc[0]
    assert first["loss"] == 4.0 and first["y"] == pytest.approx(math.log10(4.0))
    assert y_title(True).startswith("log₁₀") and y_title(False) == "loss" and y_title(True, "pt-BR").startswith("log₁₀ da loss")


def test_series_names_follow_the_language_and_keep_their_colours():
    df = loss_plot_frame(loss_frame(LOSSES + [{"step": 5, "loss": 6.0, "kind": "pretraining"}, {"step": 6, "loss": 5.0, "kind": "pretraining"}]),
                         smoothing=0.5, lang="pt-BR")
    assert set(df["kind"]) == {"treino", "treino (suavizado)", "avaliação", "pré-treino", "pré-treino (suavizado)"}
    colors = series_colors()
    assert colors["treino (suavizado)"] == colors["train (smoothed)"] and colors["treino"] != colors["treino (suavizado)"]
    assert series_label("other") == "other" and loss_plot_frame(pd.DataFrame(columns=["step", "loss", "kind"])).empty


EVENTS = [
    {"type": "task_score", "when": "before", "accuracy": 0.0, "n": 100, "examples": [["Converta 02/01/2018", "2018-01-02", ",,,,"]]},
    {"type": "task_score", "when": "after", "accuracy": 0.75, "n": 100,
     "examples": [["a", "2018-01-02", "2018-01-02"], ["b", "2011-03-17", "2011-03-17."], ["c", "1999-04-11", "1999-04-11"]],
     "misses": [["d <script>", "1912-10-07", "1912-07-10"]]},
]


def test_accuracy_bars_with_right_and_wrong_examples():
    html = task_html(EVENTS)
    assert "width:0.0%" in html and "width:75.0%" in html and ">75%<" in html and "100 test dates" in html
    assert html.index(">before<") < html.index(">after<")
    assert html.count("✔") == 2 and html.count("✖") == 1  # two right answers (scored as the task does), then the wrong one
    assert "&lt;script&gt;" in html and "<script>" not in html  # model outputs and prompts are escaped
    pt = task_html(EVENTS, "pt-BR")
    assert ">antes<" in pt and ">depois<" in pt and "o modelo disse" in pt and "Algumas respostas (depois)" in pt
    assert task_html([{"type": "progress"}]) == ""
    assert [ok for ok, *_ in task_examples(EVENTS[1])] == [True, True, False]


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_every_objective_chart_has_its_name_and_a_line_on_what_good_looks_like(lang):
    """Each metric a DPO/ORPO/KTO/GRPO run draws (KTO's KL too) is named and says what a good value is, in both languages."""
    from engine import i18n
    from engine.views.run_charts import OBJECTIVE_PLOTS

    for method, metrics in OBJECTIVE_PLOTS.items():
        for metric in metrics:
            for key in (f"preference.plot.{metric}", f"pref_run.good.{metric}"):
                assert i18n.t(key, lang) != key, (method, key)
