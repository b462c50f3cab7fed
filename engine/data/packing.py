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

Packing changes speed, not learning: it happens inside each micro-batch, when the collator builds it
(`PackingCollator`, `pack_micro_batch`). The sampler draws the same samples in the same order as without packing
(the same seed gives the same micro-batches), so an epoch has the same optimizer steps, the learning-rate schedule is
the same and every step sees exactly the samples it would see unpacked; only the padding they would carry is no
longer computed. An earlier version packed the whole dataset into rows before the sampler shuffled them: first
`micro_batch_size` full rows per step (an epoch of 4-6x fewer, larger steps: eval loss 6.29 instead of 5.65 on the
built-in data), then rows holding about `micro_batch_size` samples, whose steps still saw other groups of samples
than the unpacked run (eval loss up to 2% apart after one epoch). A micro-batch's rows are chosen to need the
fewest padded tokens (`pack_micro_batch`), never more than padding the samples would.

Eval sets are never packed: the eval loss is then computed exactly as without packing, so runs with and
without packing can be compared. `PackingCollator` handles both kinds of rows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .tokenize import IGNORE_INDEX

log = logging.getLogger("engine.data.packing")


@dataclass
class PackReport:
    """What packing does to an epoch's micro-batches (`plan_packing`): rows instead of samples, and the tokens
    computed with packing (`packed_tokens`: rows x their padded width) and without it (`padded_tokens`: samples x
    the micro-batch's longest one, as the padding collator pads)."""

    samples: int  # samples in the micro-batches looked at
    micro_batches: int
    rows: int
    tokens: int  # real tokens
    packed_tokens: int
    padded_tokens: int
    max_len: int  # the longest a row may be

    def as_event(self) -> dict[str, Any]:
        per = max(1, self.micro_batches)
        return {"samples_per_micro_batch": round(self.samples / per, 2), "packed_rows_per_micro_batch": round(self.rows / per, 2),
                "tokens_per_micro_batch": round(self.tokens / per, 1), "packed_share_of_padded": round(self.share, 3)}

    @property
    def share(self) -> float:
        """Tokens computed with packing, as a fraction of those computed with padding."""
        return self.packed_tokens / self.padded_tokens if self.padded_tokens else 1.0


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


def pack_row(examples: Sequence[dict[str, list[int]]], group: Sequence[int]) -> dict[str, list[int]]:
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


def padded_width(tokens: int, multiple: int) -> int:
    """`tokens` rounded up to a multiple of `multiple`: the width the collator pads a row of that length to."""
    return -(-tokens // multiple) * multiple


def pack_micro_batch(lengths: Sequence[int], max_len: int, multiple: int = 8) -> list[list[int]]:
    """The samples of one micro-batch (their token counts) grouped into rows, the grouping that computes the
    fewest tokens: rows x the longest row, rounded up to `multiple` as the collator pads.

    Tries first-fit decreasing at row capacities from the longest sample up to `max_len` (at most 24 of them,
    spread evenly) and keeps the cheapest; ties go to the shorter rows (less attention per row). The first
    capacity, the longest sample, never needs more rows than samples, so a packed micro-batch is never larger
    than the padded one. Deterministic: a resumed run rebuilds the same rows.
    """
    if not lengths:
        return []
    longest, top = max(lengths), max(max_len, max(lengths))
    capacities = sorted({longest, top, *(longest + (top - longest) * k // 23 for k in range(1, 23))})
    best: tuple[int, list[list[int]]] | None = None
    for capacity in capacities:
        groups = first_fit_decreasing(lengths, capacity)
        cost = len(groups) * padded_width(max(sum(lengths[i] for i in g) for g in groups), multiple)
        if best is None or cost < best[0]:
            best = (cost, groups)
    return best[1]


def plan_packing(lengths: Sequence[int], max_len: int, micro_batch_size: int, *, seed: int = 0, shuffle: bool = True,
                 multiple: int = 8, max_batches: int = 200) -> PackReport:
    """What packing will do to an epoch (the data check's numbers), from the samples' token counts: micro-batches
    drawn as the sampler draws them (a seeded shuffle, or in order for a curriculum), the first `max_batches` of
    them looked at (an estimate for a large dataset)."""
    import random

    order = list(range(len(lengths)))
    if shuffle:
        random.Random(seed).shuffle(order)
    batch = max(1, int(micro_batch_size))
    samples = rows = tokens = packed = padded = micro_batches = 0
    for start in range(0, min(len(order), batch * max_batches), batch):
        sizes = [lengths[i] for i in order[start:start + batch]]
        groups = pack_micro_batch(sizes, max_len, multiple)
        micro_batches += 1
        samples += len(sizes)
        rows += len(groups)
        tokens += sum(sizes)
        packed += len(groups) * padded_width(max(sum(sizes[i] for i in g) for g in groups), multiple)
        padded += len(sizes) * padded_width(max(sizes), multiple)
    return PackReport(samples=samples, micro_batches=micro_batches, rows=rows, tokens=tokens, packed_tokens=packed,
                      padded_tokens=padded, max_len=max_len)


# --------------------------------------------------------------------------------------------------
# Collation
# --------------------------------------------------------------------------------------------------


def packed_row_multiple(max_len: int, device_kind: str) -> int:
    """The multiple packed rows are padded to: 8 on a GPU; on a CPU a quarter of `max_len`, between 8 and 64.

    On a CPU, oneDNN's bf16 matmul kernels are built and cached per shape, each with its own copy of the weights
    reordered for it: a run whose micro-batches come in many widths keeps dozens of them. Coarser widths mean
    few shapes: on a tiny Llama at 256 tokens, widths in steps of 64 instead of 8 took the training's peak from
    235 to 121 MiB at the same speed (the kernels are reused instead of rebuilt: bench/train_throughput.py)."""
    if device_kind != "cpu":
        return 8
    return max(8, min(64, max_len // 4 // 8 * 8))


PACK_KEY = "pack_to"  # a training example that carries it is packed by the collator into rows of at most that many tokens


def mark_for_packing(examples: Sequence[dict[str, Any]], max_len: int) -> list[dict[str, Any]]:
    """Copies of the training `examples` that `PackingCollator` packs (rows of at most `max_len` tokens) when it
    builds their micro-batch; eval examples stay unmarked and are padded, so their loss is computed as always."""
    return [{**ex, PACK_KEY: max_len} for ex in examples]


class PackingCollator:
    """Batches examples marked for packing (`mark_for_packing`: packed here, per micro-batch), packed rows (with
    `position_ids`) or plain examples, as a Trainer `data_collator`.

    Packed rows are right-padded to the batch's longest row (a multiple of `pad_to_multiple_of`); the padding
    is its own "sample" (positions from 0, labels -100) so no real token attends to it, and no
    `attention_mask` is returned (its absence is what makes transformers read the packing from
    `position_ids`). Plain examples (the eval set, or packing turned off) go through
    `DataCollatorForSeq2Seq(padding=True, label_pad_token_id=-100)` exactly as before.
    """

    def __init__(self, tokenizer: Any, pad_to_multiple_of: int | None = 8, packed_multiple: int | None = None) -> None:
        from transformers import DataCollatorForSeq2Seq

        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = int(pad) if pad is not None else 0
        self.multiple = pad_to_multiple_of or 1
        self.packed_multiple = packed_multiple or self.multiple  # the row widths of packed micro-batches (`packed_row_multiple`)
        self.padded = DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=IGNORE_INDEX, pad_to_multiple_of=pad_to_multiple_of)

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        marked = [PACK_KEY in f for f in features]
        if any(marked):
            if not all(marked):
                raise ValueError("a batch mixes examples marked for packing and plain ones")
            groups = pack_micro_batch([len(f["input_ids"]) for f in features], int(features[0][PACK_KEY]), self.packed_multiple)
            return self._rows([pack_row(features, group) for group in groups], self.packed_multiple)
        packed = ["position_ids" in f for f in features]
        if not any(packed):
            return self.padded(features)
        if not all(packed):
            raise ValueError("a batch mixes packed rows and plain examples")
        return self._rows(features, self.multiple)

    def _rows(self, features: list[dict[str, Any]], multiple: int) -> dict[str, torch.Tensor]:
        longest = max(len(f["input_ids"]) for f in features)
        width = padded_width(longest, multiple)
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
