"""4-bit layers under CPU autocast (engine/training/autocast_4bit.py) return the autocast dtype with the values they
computed before; without autocast, or with another compute dtype, nothing changes."""

from __future__ import annotations

import pytest
import torch

bnb = pytest.importorskip("bitsandbytes")

from engine.training.autocast_4bit import autocast_4bit_outputs  # noqa: E402


def _layer(compute_dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    dense = torch.nn.Linear(64, 48, bias=False)
    layer = bnb.nn.Linear4bit(64, 48, bias=False, compute_dtype=compute_dtype, quant_type="nf4")
    layer.weight = bnb.nn.Params4bit(dense.weight.data.clone(), requires_grad=False, quant_type="nf4")
    layer.support_avx512bf16_for_cpu = False  # keep the training layout (engine/models/bnb_safety.py)
    return layer.to("cpu")  # quantizes


def _run(layer: torch.nn.Module, x: torch.Tensor, autocast: bool) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        return layer(x)


def test_under_autocast_the_output_is_bf16_with_the_same_values():
    x = torch.randn(5, 64)
    plain = _layer(torch.bfloat16)
    before = _run(plain, x, autocast=True)
    assert before.dtype == torch.float32  # bitsandbytes casts back to the input's dtype
    hooked = _layer(torch.bfloat16)
    assert autocast_4bit_outputs(torch.nn.Sequential(hooked)) == 1
    after = _run(hooked, x, autocast=True)
    assert after.dtype == torch.bfloat16
    torch.testing.assert_close(after.float(), before, rtol=0, atol=0)  # the fp32 output held bf16 values


def test_gradients_flow_to_the_input_through_the_cast():
    layer = _layer(torch.bfloat16)
    autocast_4bit_outputs(torch.nn.Sequential(layer))
    x = torch.randn(5, 64, requires_grad=True)
    _run(layer, x, autocast=True).float().sum().backward()
    assert x.grad is not None and x.grad.dtype == torch.float32 and torch.isfinite(x.grad).all()


@pytest.mark.parametrize(("compute_dtype", "autocast"), [(torch.bfloat16, False), (torch.float32, True)])
def test_nothing_changes_without_autocast_or_with_another_compute_dtype(compute_dtype, autocast):
    x = torch.randn(5, 64)
    before = _run(_layer(compute_dtype), x, autocast)
    hooked = _layer(compute_dtype)
    autocast_4bit_outputs(torch.nn.Sequential(hooked))
    after = _run(hooked, x, autocast)
    assert after.dtype == before.dtype == torch.float32
    torch.testing.assert_close(after, before, rtol=0, atol=0)


def test_a_model_without_4bit_layers_gets_no_hooks():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    assert autocast_4bit_outputs(model) == 0
    assert not model[0]._forward_pre_hooks
