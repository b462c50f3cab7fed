"""Typed widgets name their field when an API caller sends a wrong value (ui/widgets.py named)."""

from __future__ import annotations

import gradio as gr
import pytest

from ui import widgets as page_widgets


@pytest.mark.parametrize(("comp", "payload", "message"), [
    (gr.Dropdown(choices=["full", "lora"], value="full"), "rm -rf", "method = 'rm -rf' is not allowed: one of full, lora."),
    (gr.Slider(1, 64, value=8, step=1), [3], "method = 3 is not allowed: a number from 1 to 64."),
])
def test_wrong_api_values_name_the_field(comp, payload, message):
    widget = page_widgets.named(comp, "method")
    with pytest.raises(gr.Error) as err:
        widget.preprocess(payload)
    assert err.value.message == message


def test_form_dropdowns_are_named():
    from engine.config import TrainConfig

    method = page_widgets.make_inputs(TrainConfig, only=["method"])["method"]
    with pytest.raises(gr.Error, match="Method \\(method\\) = 'evil' is not allowed: one of qlora, lora, full"):
        method.preprocess("evil")
    assert method.preprocess("lora") == "lora"


def test_form_messages_follow_the_visitors_language(monkeypatch):
    """The field by its label and what is allowed, in the visitor's language (numbers written for people)."""
    from engine.config import MemoryQuery, TrainConfig

    monkeypatch.setattr(page_widgets, "lang_of", lambda request=None: "pt-BR")
    widgets = page_widgets.make_inputs(TrainConfig, only=["method", "max_steps", "lora.r"])
    cases = [(widgets["method"], "evil", "Método (method) = 'evil' não é permitido: uma destas opções: qlora, lora, full, scratch, distill, dpo, orpo, kto, grpo."),
             (widgets["max_steps"], "lots", "Máximo de passos (max_steps) = 'lots' não é permitido: um número inteiro."),
             (widgets["lora.r"], [3], "Rank do LoRA (lora.r) = 3 não é permitido: um número de 1 a 512."),
             (page_widgets.make_inputs(MemoryQuery, only=["seq_len"])["seq_len"], "long", "Comprimento da sequência (seq_len) = 'long' não é permitido: um número inteiro.")]
    for widget, payload, message in cases:
        with pytest.raises(gr.Error) as err:
            widget.preprocess(payload)
        assert err.value.message == message
