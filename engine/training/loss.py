"""The training loss computed only where a token is scored: the output head and the cross-entropy run on the
positions that have a label (the answer tokens), not on the prompt, the padding or a packed row's boundaries.

A causal LM's own loss projects every position onto the vocabulary (a `tokens x vocabulary` matrix, kept for the
backward pass), then throws away the prompt positions with `ignore_index`. On an instruction or date task most
positions are prompt (82% of the built-in date rows, 42% of the built-in instructions), so most of that work,
and of its memory, is for nothing. Selecting the scored positions' hidden states before the head gives the same
loss and the same gradients (the discarded positions contribute exactly zero to both) for a fraction of the cost;
transformers has no option for it (`logits_to_keep` keeps the same positions in every row).

Evaluation and anything that asks for the logits (`return_outputs=True`) keep the model's own path.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..data.tokenize import IGNORE_INDEX


def scored_positions(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions, targets) of a (B, T) label tensor: a (B, T) bool mask of the positions whose *next* token is
    scored (position t predicts token t + 1; the last position predicts nothing) and their target ids, in order."""
    targets = labels[:, 1:]
    keep = targets != IGNORE_INDEX
    return F.pad(keep, (0, 1), value=False), targets[keep]


class ScoredPositionsLoss:
    """Mixed into a run's `Trainer` (engine/training/trainer.py `trainer_class`): the training loss from the scored
    positions only, reduced exactly like transformers' `ForCausalLMLoss` (a sum over the tokens divided by the
    tokens of the whole accumulated batch when the Trainer counts them, a mean over this micro-batch otherwise)."""

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: torch.Tensor | int | None = None) -> Any:
        labels = inputs.get("labels")
        head = self.accelerator.unwrap_model(model).get_output_embeddings() if labels is not None else None
        custom = self.label_smoother is not None or self.compute_loss_func is not None
        if return_outputs or head is None or custom or labels.dim() != 2:
            return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        keep, targets = scored_positions(labels)
        if targets.numel() == 0:  # nothing scored: the model's own loss says what that means (NaN for a mean)
            return super().compute_loss(model, inputs, num_items_in_batch=num_items_in_batch)

        def select(_module: Any, args: tuple) -> tuple | None:
            hidden = args[0]
            return (hidden[keep], *args[1:]) if hidden.shape[:2] == keep.shape else None

        handle = head.register_forward_pre_hook(select)
        try:
            outputs = model(**{k: v for k, v in inputs.items() if k != "labels"})
        finally:
            handle.remove()
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        if logits.dim() == 3:  # a model whose head input is not (B, T, hidden): select after the head instead
            logits = logits[keep]
        loss = F.cross_entropy(logits.float(), targets, reduction="sum")
        if self.model_accepts_loss_kwargs and num_items_in_batch is not None:
            if torch.is_tensor(num_items_in_batch):
                num_items_in_batch = num_items_in_batch.to(loss.device)
            loss = loss / num_items_in_batch
            if self.args.average_tokens_across_devices:  # as Trainer.compute_loss: the count is global, so is the sum
                loss = loss * (self.accelerator.num_processes // self.get_tp_size() if self.args.n_gpu <= 1 else self.args.n_gpu)
        else:
            loss = loss / targets.numel()
        return loss
