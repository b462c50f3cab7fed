"""Looking at a dataset before training: the first rows exactly as the model will see them (trained-on
tokens marked), and what tokenization keeps, truncates and drops (with row numbers and reasons).

Answers "what will my model actually be trained on?" before a run starts, with the same code the run uses
(engine/data/records.py) and the tokenizer the run will use.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..errors import ModelLoadError


@dataclass
class DataInspection:
    summary: str  # markdown
    preview: list[dict[str, Any]]  # row, text (trained spans in ⟦ ⟧), n_tokens, n_trainable
    histogram: list[dict[str, Any]]  # {"tokens": "17-32", "rows": n}
    dropped: list[list[Any]] = field(default_factory=list)  # [row, reason]


def _tokenizer_for(cfg: TrainConfig, runs_dir: Path, texts: list[str]) -> tuple[Any, str]:
    """The tokenizer the run will use, and a note saying which one it is."""
    from ..models.compact import load_compact_preset
    from ..models.loading import load_tokenizer
    from ..models.tokenizer import train_tokenizer

    if cfg.method == "distill" and cfg.base_model.startswith("builtin:"):  # a built-in student gets the teacher's tokenizer
        cfg = dataclasses.replace(cfg, method="full", base_model=cfg.teacher_model)
    if cfg.method == "scratch" or cfg.base_model.startswith("builtin:"):
        if cfg.method != "scratch":
            try:
                return load_tokenizer(cfg.base_model, runs_dir=runs_dir), f"the tokenizer of {cfg.base_model}"
            except ModelLoadError:
                pass  # not pretrained yet: the run will train its tokenizer on the built-in corpus first
        preset = load_compact_preset(cfg.base_model.split(":", 1)[1])
        if cfg.method != "scratch":
            from .records import load_records, record_texts

            texts = record_texts(load_records("builtin:corpus"))
        return train_tokenizer(texts, vocab_size=preset.vocab_size), "a tokenizer trained the way the run will train it"
    return load_tokenizer(cfg.base_model, runs_dir=runs_dir, trust_remote_code=cfg.trust_remote_code), f"the tokenizer of {cfg.base_model}"


def inspect_dataset(cfg: TrainConfig, runs_dir: Path, n_preview: int = 3) -> DataInspection:
    """Preview + validation report of `cfg.dataset` for `cfg`'s model, sequence length and masking."""
    from .records import preview, record_texts, tokenize_records
    from .sources import eval_records, train_records

    records = train_records(cfg)  # the same rows the run will load (Hub source and column mapping included)
    evals = eval_records(cfg)
    tokenizer, which = _tokenizer_for(cfg, runs_dir, record_texts(records))
    notes = "".join(f"\n\n⚠ {n}" for n in records.notes)
    eval_line = (f"\n\nEval: **{evals.summary()}** (instead of the eval fraction)." if evals is not None
                 else f"\n\nEval: {cfg.eval_fraction:.0%} of the rows held out." if cfg.eval_fraction > 0 else "")
    if records.format == "text" or cfg.method == "scratch":
        n_tok = sum(len(tokenizer(t)["input_ids"]) + 1 for t in record_texts(records))
        summary = (f"**{records.summary()}** · plain text, packed into blocks of {cfg.max_seq_len} tokens: "
                   f"{n_tok:,} tokens → about {max(1, n_tok // cfg.max_seq_len)} blocks. (Preview uses {which}.)")
        rows = [{"row": r, "text": t[:500], "n_tokens": len(tokenizer(t)["input_ids"]), "n_trainable": None}
                for r, t in list(zip(records.rows, record_texts(records), strict=True))[:n_preview]]
        return DataInspection(summary + eval_line + notes, rows, [], [[n, why] for n, why in records.dropped])
    tok = tokenize_records(records, tokenizer, cfg.max_seq_len, train_on_prompt=cfg.train_on_prompt, too_long=cfg.too_long)
    rep = tok.report
    summary = (f"**{records.format}** format from {records.summary().split(' from ', 1)[-1]} · {rep.summary()} · long rows: "
               f"{'truncated' if cfg.too_long == 'truncate' else 'dropped'} at {cfg.max_seq_len} tokens · loss on "
               f"{'prompt and response' if cfg.train_on_prompt else 'responses only'} · ⟦ ⟧ marks trained-on tokens (preview uses {which}).")
    if cfg.packing:  # what the run will train on: rows holding several samples (engine/data/packing.py)
        from .packing import pack_examples

        _, packed = pack_examples(tok.examples, cfg.max_seq_len, keep_order=cfg.curriculum != "none")
        summary += f" · packing: {packed.summary()}, before the eval split"
    hist = [{"tokens": k, "rows": v} for k, v in rep.length_histogram.items()]
    dropped = [[n, why] for n, why in list(records.dropped) + list(rep.dropped)]
    shown = preview(records, tokenizer, cfg.max_seq_len, n_preview, train_on_prompt=cfg.train_on_prompt, too_long=cfg.too_long)
    return DataInspection(summary + eval_line + notes, shown, hist, dropped)
