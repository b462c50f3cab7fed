"""The run's Trainer mixins (engine/training/trainer.py): the FLOP tally's parameters counted once with the library's
result (`CountedParameters`), and the start-up objects frozen out of the garbage collector only while training
(`FrozenStartupObjects`)."""

from __future__ import annotations

import gc

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from engine.training.trainer import trainer_class


def _model() -> LlamaForCausalLM:
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2))


def test_the_flop_tally_counts_parameters_once_with_the_librarys_result(tmp_path):
    model = _model()
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    ours = trainer_class("lora")(model=model, args=args)
    library = Trainer(model=model, args=args)
    inputs = {"input_ids": torch.zeros(3, 7, dtype=torch.long)}
    calls = []
    count = model.num_parameters
    model.num_parameters = lambda **kw: calls.append(kw) or count(**kw)  # type: ignore[method-assign]
    assert ours.floating_point_ops(inputs) == ours.floating_point_ops(inputs) == library.floating_point_ops(inputs) > 0
    assert len(calls) == 2  # ours once, the library's once per call
    assert ours.floating_point_ops({"labels": torch.zeros(3, 7)}) == 0  # no main input: the library's answer


def _train_seeing_freeze_count(tmp_path, frozen_before: bool) -> tuple[int, int]:
    """(objects frozen while `train()` ran, frozen after it) for the run's Trainer class."""
    seen = []

    class Probe(trainer_class("lora")):
        def _inner_training_loop(self, *args, **kwargs):
            seen.append(gc.get_freeze_count())
            return None

    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, max_steps=1)
    trainer = Probe(model=_model(), args=args, train_dataset=[{"input_ids": torch.zeros(4, dtype=torch.long)}])
    if frozen_before:
        gc.freeze()
    try:
        trainer.train()
        return seen[0], gc.get_freeze_count()
    finally:
        gc.unfreeze()


def test_start_up_objects_are_frozen_only_while_training(tmp_path):
    during, after = _train_seeing_freeze_count(tmp_path, frozen_before=False)
    assert during > 1000 and after == 0


def test_a_process_that_froze_objects_itself_keeps_them_frozen(tmp_path):
    gc.freeze()
    before = gc.get_freeze_count()
    gc.unfreeze()
    during, after = _train_seeing_freeze_count(tmp_path, frozen_before=True)
    assert during >= before and after >= before > 0
