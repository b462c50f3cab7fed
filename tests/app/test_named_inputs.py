"""Typed widgets name their field when an API caller sends a wrong value (app.named)."""

from __future__ import annotations

import gradio as gr
import pytest

import app


@pytest.mark.parametrize(("comp", "payload", "message"), [
    (gr.Dropdown(choices=["full", "lora"], value="full"), "rm -rf", "method = 'rm -rf' is not allowed: one of full, lora."),
    (gr.Slider(1, 64, value=8, step=1), [3], "method = [3] is not allowed: a number from 1 to 64."),
])
def test_wrong_api_values_name_the_field(comp, payload, message):
    widget = app.named(comp, "method")
    with pytest.raises(gr.Error) as err:
        widget.preprocess(payload)
    assert err.value.message == message


def test_form_dropdowns_are_named():
    from engine.config import TrainConfig

    method = app.make_inputs(TrainConfig, only=["method"])["method"]
    with pytest.raises(gr.Error, match="Method \\(method\\) = 'evil' is not allowed: one of qlora, lora, full"):
        method.preprocess("evil")
    assert method.preprocess("lora") == "lora"
