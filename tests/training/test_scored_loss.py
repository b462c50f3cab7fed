"""The run's loss on the scored positions only (engine/training/loss.py) is the model's own loss, with the same
gradients, on the compact model, a Llama and a LoRA-wrapped model, with and without the Trainer's token count."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from engine.models.compact import CompactConfig, CompactForCausalLM
from engine.training.loss import scored_positions
from engine.training.trainer import trainer_class


def _model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    model = CompactForCausalLM(CompactConfig(vocab_size=97, max_position_embeddings=64, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=64, dropout=0.0))
    if kind == "compact+lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"))
        for name, p in model.named_parameters():  # a non-zero B, so the adapters' gradients are not all zero
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
    return model


def _batch() -> dict[str, torch.Tensor]:
    """Two right-padded rows whose first half is prompt (label -100), like the built-in instruction rows."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (2, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    labels = ids.clone()
    labels[:, :6] = -100
    labels[mask == 0] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _loss_and_grads(trainer_cls: type, model: torch.nn.Module, tmp_path, n_items) -> tuple[float, dict[str, torch.Tensor]]:
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", disable_tqdm=True)
    trainer = trainer_cls(model=model, args=args)
    model.zero_grad()
    loss = trainer.compute_loss(model, dict(_batch()), num_items_in_batch=n_items)
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kind", ["compact", "llama", "compact+lora"])
@pytest.mark.parametrize("n_items", [None, 11])
def test_same_loss_and_gradients_as_the_models_own_loss(kind, n_items, tmp_path):
    model = _model(kind)
    want, want_grads = _loss_and_grads(Trainer, model, tmp_path, n_items)
    rows = []
    model.get_output_embeddings().register_forward_hook(lambda _m, _a, out: rows.append(out.shape[0]))
    got, got_grads = _loss_and_grads(trainer_class("lora" if "lora" in kind else "full"), model, tmp_path, n_items)
    assert rows == [9]  # the head ran on the 9 scored positions, not on 2 x 12
    assert got == pytest.approx(want, rel=1e-5)
    assert got_grads.keys() == want_grads.keys() and got_grads
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_scored_positions_are_the_ones_whose_next_token_has_a_label():
    labels = torch.tensor([[-100, -100, 5, 6, -100], [-100, 7, -100, -100, -100]])
    keep, targets = scored_positions(labels)
    assert keep.tolist() == [[False, True, True, False, False], [True, False, False, False, False]]
    assert targets.tolist() == [5, 6, 7]


def test_distillation_keeps_every_positions_logits():
    from engine.training.loss import ScoredPositionsLoss

    assert not issubclass(trainer_class("distill"), ScoredPositionsLoss)
    assert issubclass(trainer_class("qlora"), ScoredPositionsLoss)
