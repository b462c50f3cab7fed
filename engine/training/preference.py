"""DPO, ORPO and KTO: learning from preferences with trl's trainers (methods "dpo", "orpo" and "kto").

The run's one training path (engine/training/run.py) loads the model, prepares its weights (LoRA, QLoRA or every
weight: engine/training/adapters.py), builds the pairs (engine/data/pairs.py) and asks engine/training/trainer.py for a
trainer; for these methods it is trl's, built here, with the run's own TrainingArguments, callbacks (events, STOP file,
TensorBoard) and atomic checkpoints mixed in, so stop, resume, zip, merge, GGUF export and push work as for SFT.

- DPO (`trl.DPOTrainer`): the reference is the starting model. With LoRA/QLoRA no second model is loaded: trl keeps a
  frozen copy of the adapter (named "ref": of a fresh adapter that is the base itself; of a continued run:NAME
  adapter, that run's model), a few MB. A full DPO run keeps a frozen copy of every weight (the memory estimate counts
  it: engine/estimator/memory.py).
- ORPO (`trl.experimental.orpo.ORPOTrainer`, where trl 1.16 keeps it): no reference model; the loss is the chosen
  answer's cross-entropy plus beta x the odds-ratio term.
- KTO (`trl.KTOTrainer`): one answer at a time, labelled good or bad; the reference as for DPO. Its loss compares each
  answer's implicit reward with a KL estimate taken from mismatched answers of the same micro batch (so at least two
  rows per micro batch, read in order: engine/data/pairs.py shuffles them once with the run's seed). Unequal numbers of
  good and bad answers get trl's recommended loss weights (`kto_weights`).

All get their rows already tokenized with the model's chat template (prompt_ids with chosen_ids/rejected_ids, or with
completion_ids and label: exactly what the data check shows), so trl's own text preparation is skipped.
"""

from __future__ import annotations

import copy
from typing import Any

from ..config import TrainConfig
from ..runs import EventLog

REF_ADAPTER = "ref"  # the frozen reference adapter trl's DPOTrainer adds to a PEFT model


def preference_trainer(cfg: TrainConfig, args: dict[str, Any], model: Any, tokenizer: Any, data: Any, callbacks: list, events: EventLog, *,
                       mixins: tuple[type, ...]) -> Any:
    """The trl trainer of a DPO, ORPO or KTO run over `data` (engine/data/pairs.py `build_pair_data`), with the run's
    TrainingArguments keywords `args`, its callbacks, and `mixins` (atomic checkpoints...) before trl's class."""
    from datasets import Dataset

    train = Dataset.from_list(data.train)
    evals = Dataset.from_list(data.evals) if data.evals else None
    if cfg.method == "dpo":
        return _dpo(cfg, args, model, tokenizer, train, evals, callbacks, events, mixins)
    if cfg.method == "kto":
        return _kto(cfg, args, model, tokenizer, train, evals, callbacks, events, mixins)
    return _orpo(cfg, args, model, tokenizer, train, evals, callbacks, mixins)


class PretokenizedPairs:
    """Mixed into trl's DPOTrainer: the pairs come tokenized by engine/data/pairs.py (the chat template as supervised
    training renders it), so trl's own preparation (prompt extraction, an extra end token, re-tokenizing text) must
    not run again over them."""

    def _prepare_dataset(self, dataset: Any, processing_class: Any, args: Any, dataset_name: str) -> Any:
        if "prompt_ids" in dataset.column_names:
            return dataset
        return super()._prepare_dataset(dataset, processing_class, args, dataset_name)


def _dpo(cfg: TrainConfig, args: dict[str, Any], model: Any, tokenizer: Any, train: Any, evals: Any, callbacks: list, events: EventLog,
         mixins: tuple[type, ...]) -> Any:
    from trl import DPOConfig, DPOTrainer

    from .adapters import is_peft

    ref_model = None
    if is_peft(model):
        events.write("phase", phase="DPO reference: the starting model through a frozen copy of the adapter (no second model in memory)")
    else:  # full DPO: a frozen copy of the starting weights (trl would reload it from the Hub id or folder otherwise)
        ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        events.write("phase", phase="DPO reference: a frozen copy of the starting model")
    config = DPOConfig(**args, beta=cfg.beta, max_length=cfg.max_seq_len, precompute_ref_log_probs=False, dataset_num_proc=None)
    cls = type("RunDPOTrainer", (*mixins, PretokenizedPairs, DPOTrainer), {})
    return cls(model=model, ref_model=ref_model, args=config, train_dataset=train, eval_dataset=evals, processing_class=tokenizer,
               callbacks=callbacks)


class PretokenizedCompletions:
    """Mixed into trl's KTOTrainer: the labelled answers come tokenized by engine/data/pairs.py, so of trl's preparation
    only what KTO itself needs runs: each row's KL answer, the next-older answer of its micro batch (trl's rotation in
    `KTOTrainer._prepare_dataset`, repeated here because that method would re-tokenize the text first)."""

    def _prepare_dataset(self, dataset: Any, processing_class: Any, args: Any, dataset_name: str) -> Any:
        if "prompt_ids" not in dataset.column_names:
            return super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        if not self.calculate_KL:
            return dataset

        def add_kl(batch: dict[str, list]) -> dict[str, list]:
            batch["KL_completion_ids"] = [batch["completion_ids"][-1]] + batch["completion_ids"][:-1]
            return batch

        return dataset.map(add_kl, batched=True, batch_size=args.per_device_train_batch_size)


def kto_weights(good: int, bad: int) -> tuple[float, float]:
    """(desirable_weight, undesirable_weight) that put good x weight / (bad x weight) in [1, 4/3], the range of the
    KTO paper's Eq. (8) that trl recommends: (1, 1) when the counts are near equal; otherwise the rarer side weighs more."""
    good, bad = max(good, 1), max(bad, 1)
    if good < bad:  # fewer good answers: weigh them up to balance
        return round(bad / good, 3), 1.0
    if good > bad * 4 / 3:  # many more good answers: weigh the bad ones up
        return 1.0, round(good / bad * 3 / 4, 3)
    return 1.0, 1.0


def _kto(cfg: TrainConfig, args: dict[str, Any], model: Any, tokenizer: Any, train: Any, evals: Any, callbacks: list, events: EventLog,
         mixins: tuple[type, ...]) -> Any:
    from trl import KTOConfig, KTOTrainer

    from .adapters import is_peft

    ref_model = None
    if is_peft(model):
        events.write("phase", phase="KTO reference: the starting model through a frozen copy of the adapter (no second model in memory)")
    else:
        ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        events.write("phase", phase="KTO reference: a frozen copy of the starting model")
    good = sum(1 for label in train["label"] if label)
    good_weight, bad_weight = kto_weights(good, len(train) - good)
    # in English like every phase; engine/views/run_log.py PHASES shows it in the page's language
    events.write("phase", phase=f"KTO: {good} good and {len(train) - good} bad answers; loss weights {good_weight:g} and {bad_weight:g}")
    # the rows are read in their (seeded, shuffled) order: each one's KL answer is its neighbour's in the micro batch
    config = KTOConfig(**{**args, "train_sampling_strategy": "sequential"}, beta=cfg.beta, max_length=cfg.max_seq_len,
                       precompute_ref_log_probs=False, dataset_num_proc=None, desirable_weight=good_weight, undesirable_weight=bad_weight)
    cls = type("RunKTOTrainer", (*mixins, PretokenizedCompletions, KTOTrainer), {})
    return cls(model=model, ref_model=ref_model, args=config, train_dataset=train, eval_dataset=evals, processing_class=tokenizer,
               callbacks=callbacks)


class CountedPairTokens:
    """Mixed into trl's ORPOTrainer: its batches hold chosen_input_ids and rejected_input_ids (prompt included) but no
    input_ids, which the Trainer's token count looks for, so the run's log had no tokens/s. Counts the tokens of both
    answers' rows (their attention masks) as the Trainer counts SFT's."""

    def training_step(self, model: Any, inputs: dict[str, Any], *args: Any, **kw: Any) -> Any:
        masks = [inputs[k] for k in ("chosen_attention_mask", "rejected_attention_mask") if k in inputs]
        if masks and "input_ids" not in inputs:
            self.state.num_input_tokens_seen += int(sum(int(m.sum()) for m in masks))
        return super().training_step(model, inputs, *args, **kw)


class PretokenizedORPOPairs:
    """Mixed into trl's ORPOTrainer: each pair keeps the ids engine/data/pairs.py made (the chat template as supervised
    training renders it, what the data check shows), and trl's own tokenization of the texts is skipped: it puts the
    tokenizer's BOS token before every prompt and a second end token after every answer, so ORPO trained on sequences
    that neither the data check nor generation ever shows (the built-in model's template starts with no BOS)."""

    def tokenize_row(self, feature: dict[str, Any], model: Any = None) -> dict[str, Any]:
        if "prompt_ids" not in feature:
            return super().tokenize_row(feature, model)
        prompt = list(feature["prompt_ids"])
        batch: dict[str, Any] = {"prompt_input_ids": prompt, "prompt_attention_mask": [1] * len(prompt)}
        for side in ("chosen", "rejected"):
            ids = prompt + list(feature[f"{side}_ids"])
            batch[f"{side}_input_ids"], batch[f"{side}_attention_mask"] = ids, [1] * len(ids)
            batch[f"{side}_labels"] = [-100] * len(prompt) + list(feature[f"{side}_ids"])
        return batch


class AnswerOnlyORPOLoss:
    """Mixed into trl's ORPOTrainer: its cross-entropy term on the chosen answer covers the answer only, as supervised
    training here does (prompt tokens masked). trl's ORPO computes it "over the full prompt and response": a model
    fine-tuned on answers alone predicts its prompts badly (7.4 nats a token for the date prompts of the SFT start),
    so that term was mostly about the prompts and overwrote the answers (23% -> 1% at lr 5e-5, 22% -> 0% at 2e-4 on
    the pairs of the model's own mistakes: docs/preference.md)."""

    def concatenated_forward(self, model: Any, batch: dict[str, Any]) -> Any:
        import torch.nn.functional as F

        out = super().concatenated_forward(model, batch)
        if self.is_encoder_decoder:
            return out
        chosen_logits = out[2]  # [pairs, length - 1, vocab]: the logits that predict tokens 1..length-1
        labels = batch["chosen_labels"].to(chosen_logits.device)  # the prompt's positions are -100
        width = chosen_logits.shape[1] + 1
        if labels.shape[1] < width:
            labels = F.pad(labels, (0, width - labels.shape[1]), value=-100)
        nll = F.cross_entropy(chosen_logits.reshape(-1, chosen_logits.shape[-1]).float(), labels[:, 1:width].reshape(-1), ignore_index=-100)
        return (*out[:4], nll, *out[5:])


def _orpo(cfg: TrainConfig, args: dict[str, Any], model: Any, tokenizer: Any, train: Any, evals: Any, callbacks: list,
          mixins: tuple[type, ...]) -> Any:
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    # trl's ORPO wants text columns (prompt, chosen, rejected): the template's text of each part, decoded from the same
    # ids the data check shows; the ids themselves are what it trains on (PretokenizedORPOPairs)
    def as_text(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    def texts(ds: Any) -> Any:  # the texts for trl's checks; PretokenizedORPOPairs trains on the ids beside them
        return ds.map(lambda e: {"prompt": as_text(e["prompt_ids"]), "chosen": as_text(e["chosen_ids"]), "rejected": as_text(e["rejected_ids"])})

    config = ORPOConfig(**args, beta=cfg.beta, max_length=cfg.max_seq_len, max_completion_length=cfg.max_seq_len)
    cls = type("RunORPOTrainer", (*mixins, CountedPairTokens, PretokenizedORPOPairs, AnswerOnlyORPOLoss, ORPOTrainer), {})
    return cls(model=model, args=config, train_dataset=texts(train), eval_dataset=texts(evals) if evals is not None else None,
               processing_class=tokenizer, callbacks=callbacks)


def drop_reference_adapter(model: Any) -> Any:
    """`model` without DPO's or KTO's frozen reference adapter (saved runs carry only the trained one)."""
    peft_config = getattr(model, "peft_config", None)
    if isinstance(peft_config, dict) and REF_ADAPTER in peft_config:
        model.delete_adapter(REF_ADAPTER)
    return model
