"""The data check before a run ("Check the data" in the app): the preview and validation report of
engine/data/preview.py, with the tokenizer the run will use.

Loading that tokenizer is a training decision (a built-in model's own tokenizer once pretrained, otherwise one
trained the way the run will train it; a distilled built-in student gets the teacher's), so it lives here and the
data layer only receives the tokenizer. Its texts come in the visitor's language (`lang`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..data.build import eval_records, train_records
from ..data.formats import RecordSet, load_records, record_texts
from ..data.preview import DataInspection, inspect_records
from ..errors import DataError, ModelLoadError
from ..i18n import fmt_number, t
from ..objectives import MISTAKES_DATASET, OBJECTIVE_METHODS, PREFERENCE_METHODS

# The check tokenizes every row it looks at: beyond this many it checks the first ones and says so (a 200,000-row file
# cost about a minute of server CPU per click; the run itself still reads every row).
CHECK_ROWS = 20_000


def check_data(cfg: TrainConfig, *, hub: bool = True) -> None:
    """The data check's refusals that need no tokenizer, raised as the keyed `DataError` the run would end with: the
    training and eval rows read as the run reads them (an empty file, columns that match no format, a column mapping
    that names missing columns, no usable row) and the method against its data (DPO/ORPO without pairs, GRPO on plain
    text). hub=False: a hub:owner/name dataset is not read (Start does not download it; the run does, and meets the
    same refusals)."""
    from ..refs import is_hub_ref

    if hub or not is_hub_ref(cfg.dataset):
        _checked_records(cfg, evals=hub or not is_hub_ref(cfg.eval_dataset))


def _checked_records(cfg: TrainConfig, *, evals: bool = True) -> tuple[RecordSet, RecordSet | None]:
    """(train records, eval records or None) of `cfg`, with check_data's refusals. builtin:date-mistakes has no rows
    before the run (its pairs are made when it starts, engine/training/mistake_data.py): checked are its method and the
    date prompts the starting model will answer."""
    from ..data.pairs import check_method_data

    if cfg.dataset == MISTAKES_DATASET:
        if cfg.method not in PREFERENCE_METHODS:
            raise DataError(key="pref_run.mistakes_methods", dataset=MISTAKES_DATASET, method=cfg.method)
        records = train_records(dataclasses.replace(cfg, dataset="builtin:dates", columns=""))
        return records, eval_records(cfg) if evals else None
    records = train_records(cfg)  # the same rows the run will load (Hub source and column mapping included)
    other = eval_records(cfg) if evals else None
    if cfg.method in OBJECTIVE_METHODS:
        check_method_data(cfg.method, records)
    return records, other


def inspect_dataset(cfg: TrainConfig, runs_dir: Path, n_preview: int = 3, lang: str = "en") -> DataInspection:
    """Preview + validation report of `cfg.dataset` for `cfg`'s model, sequence length and masking (the first
    CHECK_ROWS rows of a larger dataset, with a note), in `lang`."""
    from ..models.tokenizer import ensure_chat_template

    if cfg.dataset == MISTAKES_DATASET:  # pairs made when the run starts: the prompts the base model will answer
        return _inspect_mistake_prompts(cfg, runs_dir, n_preview, lang)
    records, evals = _checked_records(cfg)  # the data check's refusals first (check_data: what Start checks too)
    if len(records) > CHECK_ROWS:
        total = len(records)
        records = dataclasses.replace(records, records=records.records[:CHECK_ROWS], rows=records.rows[:CHECK_ROWS],
                                      notes=[*records.notes, t("finetune.check.capped", lang, n=fmt_number(CHECK_ROWS, lang), total=fmt_number(total, lang))])
    tokenizer, which = _tokenizer_for(cfg, runs_dir, record_texts(records))
    ensure_chat_template(tokenizer)  # the data layer takes a tokenizer ready for chat, as the run's loaders give it
    which_text = t("finetune.check.which_trained", lang) if which is None else t("finetune.check.which_model", lang, model=which)
    if cfg.method in OBJECTIVE_METHODS:  # pairs or prompts, as engine/data/pairs.py hands them to trl
        from ..data.pairs import inspect_pairs

        return inspect_pairs(cfg, records, tokenizer, which_text, n_preview, lang)
    return inspect_records(cfg, records, evals, tokenizer, which_text, n_preview, lang)


def _inspect_mistake_prompts(cfg: TrainConfig, runs_dir: Path, n_preview: int, lang: str) -> DataInspection:
    """The check of builtin:date-mistakes (engine/training/mistake_data.py): its pairs do not exist before the run, so
    it shows the date prompts the base model will answer, each with the expected date (the chosen side of its pairs)."""
    from ..data.formats import RecordSet
    from ..data.pairs import inspect_pairs
    from ..inference.mistakes import N_PROMPTS, mistake_prompts
    from ..models.tokenizer import ensure_chat_template

    source, cfg = cfg.dataset, dataclasses.replace(cfg, dataset="builtin:dates")  # the prompts are the date task's
    records = RecordSet(records=mistake_prompts(), format="instruction", source=source,
                        notes=[t("pref_run.check.mistakes", lang, n=fmt_number(N_PROMPTS, lang), base=cfg.base_model)])
    tokenizer, which = _tokenizer_for(cfg, runs_dir, record_texts(records))
    ensure_chat_template(tokenizer)
    which_text = t("finetune.check.which_trained", lang) if which is None else t("finetune.check.which_model", lang, model=which)
    return inspect_pairs(dataclasses.replace(cfg, method="grpo"), records, tokenizer, which_text, n_preview, lang)


def _tokenizer_for(cfg: TrainConfig, runs_dir: Path, texts: list[str]) -> tuple[Any, str | None]:
    """The tokenizer the run will use, and the model it comes from (None: one trained the way the run will train it)."""
    from ..models.compact import load_compact_preset
    from ..models.loading import load_tokenizer
    from ..models.tokenizer import train_tokenizer

    if cfg.method == "distill" and cfg.base_model.startswith("builtin:"):  # a built-in student gets the teacher's tokenizer
        cfg = dataclasses.replace(cfg, method="full", base_model=cfg.teacher_model)
    if cfg.method == "scratch" or cfg.base_model.startswith("builtin:"):
        if cfg.method != "scratch":
            try:
                return load_tokenizer(cfg.base_model, runs_dir=runs_dir), cfg.base_model
            except ModelLoadError:
                pass  # not pretrained yet: the run will train its tokenizer on the built-in corpus first
        preset = load_compact_preset(cfg.base_model.split(":", 1)[1])
        if cfg.method != "scratch":
            texts = record_texts(load_records("builtin:corpus"))
        return train_tokenizer(texts, vocab_size=preset.vocab_size), None
    return load_tokenizer(cfg.base_model, runs_dir=runs_dir, trust_remote_code=cfg.trust_remote_code), cfg.base_model
