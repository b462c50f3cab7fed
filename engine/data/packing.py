"""Packing: several short tokenized samples in one row, without cross-contamination.

Padding every sample of an instruction dataset to the batch's longest one wastes most of the compute on
pad tokens (the built-in instructions average 51 tokens). Packing fills rows of up to `max_len` tokens
with whole samples instead (first-fit decreasing bin packing), and keeps the samples independent:

- **attention**: each packed row carries `position_ids` that restart at 0 for every sample and no
  `attention_mask`. transformers 5 turns exactly that into a block-diagonal causal mask:
  `masking_utils._preprocess_mask_arguments` calls `find_packed_sequence_indices(position_ids)` (a new
  sample starts wherever the position does not go up by 1) when `attention_mask is None` and there is no
  cache, and `create_causal_mask` then ANDs the causal mask with "same sample" (`packed_sequence_mask_function`)
  for sdpa, eager and flex attention alike. CompactLLM (engine/models/compact.py) and the Llama/Qwen/Mistral-style
  models pass `position_ids` to `create_causal_mask`, so no model code is needed. This is the mechanism of
  transformers' `DataCollatorWithFlattening`; we keep rows of `max_len` instead of flattening the whole
  micro-batch into one row, because SDPA without flash-attention varlen kernels computes attention over the
  whole row: (8 x 256)^2 for a flattened batch instead of 8 x 256^2.
- **positions** restart per sample (learned absolute positions and RoPE both read `position_ids`).
- **loss**: the first label of every packed sample is -100, so the last token of sample A never predicts the
  first token of sample B (the model shifts labels by one). The first token of a sample is never a target
  anyway (engine/data/tokenize.py), so no training signal is lost.

Models that ignore packed `position_ids` (remote code, flash-attention-2 with more than one row per batch)
would silently attend across samples; `supports_packing` checks the loaded model once on a tiny batch and
the run falls back to padding when it fails.

Packing changes speed, not learning (`pack_for_steps`): a packed micro-batch holds about `micro_batch_size`
samples, like an unpacked one, so an epoch has the same number of optimizer steps, the learning-rate schedule is
the same and each step averages over as many samples. Filling `micro_batch_size` rows of `max_len` tokens instead
(what this module did first) made an epoch 4-6x fewer, larger steps: on the built-in data the epoch ended at eval
loss 6.29 instead of 5.65. So the rows get a token budget: `micro_batch_size` x the data's mean length per
micro-batch, split into as few rows of at most `max_len` as hold it, with exactly as many micro-batches as the
unpacked epoch and the tokens shared evenly between the rows. A micro-batch then carries its samples' real
tokens (plus a little row-end padding) instead of `micro_batch_size` x the batch's longest sample, so it is
faster and no larger in memory.

Eval sets are never packed: the eval loss is then computed exactly as without packing, so runs with and
without packing can be compared. `PackingCollator` handles both kinds of rows.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .tokenize import IGNORE_INDEX

log = logging.getLogger("engine.data.packing")


@dataclass
class PackReport:
    """What packing did: how many samples went into how many rows, and how full the rows are."""

    samples: int
    rows: int
    tokens: int
    max_len: int  # the row capacity in tokens
    rows_per_batch: int = 0  # rows per micro-batch (`pack_for_steps`); 0 = micro_batch_size rows (plain `pack_examples`)

    @property
    def fill(self) -> float:
        """Fraction of the row capacity (rows x max_len) holding real tokens."""
        return self.tokens / (self.rows * self.max_len) if self.rows else 0.0

    @property
    def micro_batches(self) -> int:
        """Micro-batches per epoch (on one device) when `rows_per_batch` is set."""
        return math.ceil(self.rows / self.rows_per_batch) if self.rows_per_batch else 0

    def as_event(self) -> dict[str, Any]:
        event = {"packed_rows": self.rows, "packed_samples": self.samples, "packing_fill": round(self.fill, 3)}
        if self.rows_per_batch:
            event.update(packed_rows_per_batch=self.rows_per_batch, packed_row_tokens=self.max_len,
                         samples_per_micro_batch=round(self.samples / max(1, self.micro_batches), 2),
                         tokens_per_micro_batch=round(self.tokens / max(1, self.micro_batches), 1))
        return event

    def summary(self) -> str:
        text = f"{self.samples} samples packed into {self.rows} rows of up to {self.max_len} tokens ({self.fill:.0%} full)"
        if self.rows_per_batch:
            per = max(1, self.micro_batches)
            text += (f"; {self.rows_per_batch} row(s) per micro-batch, about {self.samples / per:.1f} samples and "
                     f"{self.tokens / per:,.0f} tokens each")
        return text


# --------------------------------------------------------------------------------------------------
# Bin packing
# --------------------------------------------------------------------------------------------------


def first_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Indices of `lengths` grouped into bins of at most `capacity`, first-fit decreasing.

    O(n log n): a max-tree over the bins' free space finds the leftmost bin an item fits into (every one of
    the n possible bins starts empty, so the leftmost fit is exactly first fit). Ties keep input order, so
    the result is deterministic (resume sees the same rows).
    """
    n = len(lengths)
    if any(length > capacity for length in lengths):
        raise ValueError(f"a sample is longer than the row capacity {capacity}")
    size = 1
    while size < max(n, 1):
        size *= 2
    free = [0] * (2 * size)  # free[node] = largest free space of any bin below node
    for leaf in range(n):
        free[size + leaf] = capacity
    for node in range(size - 1, 0, -1):
        free[node] = max(free[2 * node], free[2 * node + 1])
    bins: list[list[int]] = []
    for i in sorted(range(n), key=lambda i: (-lengths[i], i)):
        need = lengths[i]
        node = 1
        while node < size:  # descend to the leftmost leaf with enough room
            node = 2 * node if free[2 * node] >= need else 2 * node + 1
        b = node - size
        if b == len(bins):
            bins.append([])
        bins[b].append(i)
        free[node] -= need
        node //= 2
        while node:
            free[node] = max(free[2 * node], free[2 * node + 1])
            node //= 2
    return bins


def next_fit(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Indices grouped into bins in their given order (a new bin when the next item does not fit).

    Used with a curriculum: the rows keep the samples' order, which first-fit decreasing would destroy.
    Sorted input packs well this way (neighbours have similar lengths).
    """
    bins: list[list[int]] = []
    used = capacity + 1
    for i, length in enumerate(lengths):
        if length > capacity:
            raise ValueError(f"a sample is longer than the row capacity {capacity}")
        if used + length > capacity:
            bins.append([])
            used = 0
        bins[-1].append(i)
        used += length
    return bins


def pack_examples(
    examples: Sequence[dict[str, list[int]]], max_len: int, *, keep_order: bool = False
) -> tuple[list[dict[str, list[int]]], PackReport]:
    """Rows of whole examples, each at most `max_len` tokens, with `input_ids`, `labels`, `position_ids`.

    keep_order: pack consecutive examples (next fit) so that a curriculum order survives; otherwise first-fit
    decreasing (fewest rows). Every token of every example is kept; an example longer than `max_len` is an
    error (tokenization already truncated or dropped those).
    """
    lengths = [len(e["input_ids"]) for e in examples]
    groups = next_fit(lengths, max_len) if keep_order else first_fit_decreasing(lengths, max_len)
    rows = [_pack_group(examples, group) for group in groups]
    return rows, PackReport(samples=len(examples), rows=len(rows), tokens=sum(lengths), max_len=max_len)


def _pack_group(examples: Sequence[dict[str, list[int]]], group: Sequence[int]) -> dict[str, list[int]]:
    """One packed row of the examples at `group`: their tokens, labels (first label of each -100) and positions."""
    ids: list[int] = []
    labels: list[int] = []
    positions: list[int] = []
    for i in group:
        ex = examples[i]
        ids.extend(ex["input_ids"])
        # the first label of a sample is never a target: the previous sample's last token must not predict it
        labels.extend([IGNORE_INDEX, *ex["labels"][1:]])
        positions.extend(range(len(ex["input_ids"])))
    return {"input_ids": ids, "labels": labels, "position_ids": positions}


def balanced_bins(lengths: Sequence[int], n_bins: int, capacity: int) -> list[list[int]] | None:
    """Indices of `lengths` in exactly `n_bins` bins of about equal total length (longest processing time first:
    each item, longest first, goes to the emptiest bin), or None when some bin would exceed `capacity`.

    Balanced rather than full bins: a micro-batch is padded to its longest row, so equal rows waste least.
    Ties keep input order, so the result is deterministic (resume sees the same rows).
    """
    import heapq

    if not 0 < n_bins <= len(lengths):
        return None
    heap = [(0, b) for b in range(n_bins)]  # (tokens so far, bin index): the emptiest bin on top
    bins: list[list[int]] = [[] for _ in range(n_bins)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        used, b = heapq.heappop(heap)
        if used + lengths[i] > capacity:
            return None
        bins[b].append(i)
        heapq.heappush(heap, (used + lengths[i], b))
    return bins


def balanced_runs(lengths: Sequence[int], n_bins: int, capacity: int) -> list[list[int]] | None:
    """Indices of `lengths` cut, in their order, into exactly `n_bins` consecutive runs of about equal total length,
    or None when a run would exceed `capacity` (a curriculum keeps its order; see `next_fit`)."""
    n = len(lengths)
    if not 0 < n_bins <= n:
        return None
    total = sum(lengths)
    bins: list[list[int]] = []
    current: list[int] = []
    used = done = 0
    for i, length in enumerate(lengths):
        left_items, left_bins = n - i, n_bins - len(bins)
        # close the current run when it reached its share of the tokens, when the item does not fit, or when
        # every remaining item must start a run of its own to make n_bins runs
        full = used + length > capacity
        if current and len(bins) < n_bins - 1 and (done + used >= total * (len(bins) + 1) / n_bins or full or left_items < left_bins):
            bins.append(current)
            done += used
            current, used = [], 0
        if used + length > capacity:
            return None
        current.append(i)
        used += length
    bins.append(current)
    return bins if len(bins) == n_bins else None


def pack_for_steps(
    examples: Sequence[dict[str, list[int]]], max_len: int, micro_batch_size: int, *, keep_order: bool = False
) -> tuple[list[dict[str, list[int]]], PackReport]:
    """Packed rows whose micro-batches hold about `micro_batch_size` samples each (see the module docstring).

    Returns the rows and a report whose `rows_per_batch` is the per-device train batch size to use: an epoch of
    those rows has exactly `ceil(len(examples) / micro_batch_size)` micro-batches, like the unpacked epoch. The
    rows of a micro-batch share its samples' tokens evenly (`balanced_bins`, or `balanced_runs` to keep a
    curriculum's order); a micro-batch gets more rows when the samples do not fit fewer rows of `max_len`.
    """
    if not examples:
        return [], PackReport(samples=0, rows=0, tokens=0, max_len=max_len, rows_per_batch=1)
    lengths = [len(e["input_ids"]) for e in examples]
    if max(lengths) > max_len:
        raise ValueError(f"a sample is longer than the row capacity {max_len}")
    batch = max(1, int(micro_batch_size))
    micro_batches = math.ceil(len(lengths) / batch)
    budget = batch * sum(lengths) / len(lengths)  # tokens of an average unpacked micro-batch, without padding
    split = balanced_runs if keep_order else balanced_bins
    groups = None
    for rows_per_batch in range(max(1, math.ceil(budget / max_len)), batch + 1):
        groups = split(lengths, min(len(lengths), rows_per_batch * micro_batches), max_len)
        if groups is not None:
            break
    if groups is None:  # every sample needs a row of its own: packing cannot help, but the rows stay valid
        rows_per_batch, groups = batch, [[i] for i in range(len(lengths))]
    rows = [_pack_group(examples, group) for group in groups]
    capacity = max(len(r["input_ids"]) for r in rows)
    return rows, PackReport(samples=len(examples), rows=len(rows), tokens=sum(lengths), max_len=capacity, rows_per_batch=rows_per_batch)


# --------------------------------------------------------------------------------------------------
# Collation
# --------------------------------------------------------------------------------------------------


class PackingCollator:
    """Batches packed rows (with `position_ids`) or plain examples, as a Trainer `data_collator`.

    Packed rows are right-padded to the batch's longest row (a multiple of `pad_to_multiple_of`); the padding
    is its own "sample" (positions from 0, labels -100) so no real token attends to it, and no
    `attention_mask` is returned (its absence is what makes transformers read the packing from
    `position_ids`). Plain examples (the eval set, or packing turned off) go through
    `DataCollatorForSeq2Seq(padding=True, label_pad_token_id=-100)` exactly as before.
    """

    def __init__(self, tokenizer: Any, pad_to_multiple_of: int | None = 8) -> None:
        from transformers import DataCollatorForSeq2Seq

        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = int(pad) if pad is not None else 0
        self.multiple = pad_to_multiple_of or 1
        self.padded = DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=IGNORE_INDEX, pad_to_multiple_of=pad_to_multiple_of)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        packed = ["position_ids" in f for f in features]
        if not any(packed):
            return self.padded(features)
        if not all(packed):
            raise ValueError("a batch mixes packed rows and plain examples")
        longest = max(len(f["input_ids"]) for f in features)
        width = -(-longest // self.multiple) * self.multiple
        ids, labels, positions = [], [], []
        for f in features:
            pad = width - len(f["input_ids"])
            ids.append(list(f["input_ids"]) + [self.pad_id] * pad)
            labels.append(list(f["labels"]) + [IGNORE_INDEX] * pad)
            positions.append(list(f["position_ids"]) + list(range(pad)))
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "labels": torch.tensor(labels, dtype=torch.long),
            "position_ids": torch.tensor(positions, dtype=torch.long),
        }


# --------------------------------------------------------------------------------------------------
# Does this model honour packed position_ids?
# --------------------------------------------------------------------------------------------------


@torch.no_grad()
def supports_packing(model: Any, *, seed: int = 0) -> bool:
    """True when `model` keeps packed samples apart: the logits of a sample inside a packed batch of two rows
    equal its logits alone (relative to how much a real preceding context changes them).

    A few dozen tokens in eval mode, without a cache; the training mode is restored. Two rows, because
    flash-attention-2 reads packing from `position_ids` only when the batch has a single row.
    """
    was_training = model.training
    model.eval()
    try:
        device = getattr(model, "device", None) or next(model.parameters()).device
        vocab = int(getattr(model.config, "vocab_size", 0) or 0) or 256
        gen = torch.Generator().manual_seed(seed)
        a = torch.randint(min(4, vocab - 1), vocab, (2, 6), generator=gen)
        b = torch.randint(min(4, vocab - 1), vocab, (2, 7), generator=gen)
        packed_ids = torch.cat([a, b], dim=1).to(device)
        positions = torch.cat([torch.arange(6), torch.arange(7)]).expand(2, -1).to(device)

        def logits(**kw: Any) -> torch.Tensor:
            return model(use_cache=False, **kw).logits.float()

        packed = logits(input_ids=packed_ids, position_ids=positions)[:, 6:]
        alone = logits(input_ids=b.to(device))
        joined = logits(input_ids=packed_ids)[:, 6:]  # b after a as one text: what contamination looks like
        err = (packed - alone).abs().max().item()
        influence = (joined - alone).abs().max().item()
        ok = err <= 0.05 * influence + 1e-3 * (1.0 + alone.abs().max().item())
        if not ok:
            log.warning("packing check failed: packed vs alone %.3g, context influence %.3g", err, influence)
        return ok
    finally:
        model.train(was_training)
