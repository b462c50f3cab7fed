"""Packing without cross-contamination, curriculum ordering, and a real packed training run (CPU, tiny)."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch

from engine.config import TrainConfig
from engine.data.build import arrange_train
from engine.data.curriculum import curriculum_keys, order
from engine.data.formats import load_records
from engine.data.packing import (
    PACK_KEY,
    PackingCollator,
    first_fit_decreasing,
    mark_for_packing,
    pack_micro_batch,
    pack_row,
    padded_width,
    plan_packing,
    supports_packing,
)
from engine.data.tokenize import IGNORE_INDEX, tokenize_records
from engine.errors import ConfigError, DataError


def _examples(lengths: list[int], seed: int = 0, vocab: int = 120) -> list[dict[str, list[int]]]:
    rng = random.Random(seed)
    out = []
    for n in lengths:
        ids = [rng.randrange(4, vocab) for _ in range(n)]
        labels = [IGNORE_INDEX] * (n // 3) + ids[n // 3 :]  # a masked prompt, a trained answer
        out.append({"input_ids": ids, "labels": labels, "attention_mask": [1] * n})
    return out


class _Tok:  # what PackingCollator reads of a tokenizer for packed rows
    pad_token_id, eos_token_id = 1, 2


def _rows(examples: list[dict], max_len: int) -> list[dict[str, list[int]]]:
    """The packed rows the collator builds from one micro-batch of `examples`."""
    return [pack_row(examples, g) for g in pack_micro_batch([len(e["input_ids"]) for e in examples], max_len)]


@pytest.fixture(scope="module")
def tokenizer():
    from engine.models.tokenizer import train_tokenizer

    return train_tokenizer(["the quick brown fox jumps over the lazy dog " * 20, "um dois tres quatro cinco seis"], vocab_size=300)


# --------------------------------------------------------------------------------------------------
# Bin packing
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_fit_decreasing_respects_capacity_and_keeps_everything(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 100) for _ in range(500)]
    bins = first_fit_decreasing(lengths, 128)
    assert sorted(i for b in bins for i in b) == list(range(500))  # every sample exactly once
    assert all(sum(lengths[i] for i in b) <= 128 for b in bins)
    lower = -(-sum(lengths) // 128)
    assert len(bins) <= 11 * lower // 9 + 1  # FFD's worst-case bound (Dosa 2007)
    assert first_fit_decreasing(lengths, 128) == bins  # deterministic: a resumed run sees the same rows


def test_first_fit_is_first_fit():
    # decreasing: 6, 5, 4, 3, 2 into 10 -> [6, 4], [5, 3, 2]
    assert first_fit_decreasing([2, 6, 4, 5, 3], 10) == [[1, 2], [3, 4, 0]]
    with pytest.raises(ValueError):
        first_fit_decreasing([11], 10)


def test_packed_rows_positions_and_labels():
    examples = _examples([10, 30, 7, 50, 22, 64, 5, 40])
    rows = _rows(examples, 64)
    assert len(rows) < len(examples)
    seen = []
    for row in rows:
        assert len(row["input_ids"]) == len(row["labels"]) == len(row["position_ids"]) <= 64
        assert "attention_mask" not in row  # its absence is what makes transformers read the packing
        starts = [i for i, p in enumerate(row["position_ids"]) if p == 0]
        for k, s in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else len(row["input_ids"])
            assert row["position_ids"][s:end] == list(range(end - s))  # positions restart per sample
            assert row["labels"][s] == IGNORE_INDEX  # never predicted from the previous sample's last token
            seen.append((tuple(row["input_ids"][s:end]), tuple(row["labels"][s + 1 : end])))
    expected = sorted((tuple(e["input_ids"]), tuple(e["labels"][1:])) for e in examples)
    assert sorted(seen) == expected  # every token of every sample kept, labels unchanged after the first


def test_collator_pads_packed_rows_and_falls_back_for_plain_examples(tokenizer):
    collate = PackingCollator(tokenizer, pad_to_multiple_of=8)
    rows = _rows(_examples([5, 9, 20]), 32)
    batch = collate(rows)
    assert set(batch) == {"input_ids", "labels", "position_ids"}
    assert batch["input_ids"].shape[1] % 8 == 0
    for r, row in enumerate(rows):
        n = len(row["input_ids"])
        assert (batch["labels"][r, n:] == IGNORE_INDEX).all() and (batch["input_ids"][r, n:] == tokenizer.pad_token_id).all()
        if batch["input_ids"].shape[1] > n:
            assert batch["position_ids"][r, n] == 0  # the padding is its own segment
    plain = collate(_examples([5, 9]))
    assert "attention_mask" in plain and "position_ids" not in plain and plain["input_ids"].shape == (2, 16)


# --------------------------------------------------------------------------------------------------
# No cross-contamination: logits and loss of a sample inside a pack == the sample alone
# --------------------------------------------------------------------------------------------------


def _compact():
    from engine.models.compact import CompactConfig, CompactForCausalLM

    torch.manual_seed(0)
    cfg = CompactConfig(vocab_size=128, max_position_embeddings=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, dropout=0.0)
    return CompactForCausalLM(cfg)


def _llama(attn: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, attn_implementation=attn)
    return LlamaForCausalLM(cfg)


MODELS = {"compact": _compact, "llama-sdpa": lambda: _llama("sdpa"), "llama-eager": lambda: _llama("eager")}


@pytest.mark.parametrize("name", list(MODELS))
def test_packed_logits_and_loss_equal_each_sample_alone(name):
    model = MODELS[name]()
    model.train()  # the training path (dropout is 0): no cache, as under the Trainer
    examples = _examples([9, 14, 6, 20, 11, 17], seed=3)
    rows = _rows(examples, 40)
    assert any(sum(p == 0 for p in r["position_ids"]) > 1 for r in rows)  # something really is packed
    batch = PackingCollator(_Tok(), pad_to_multiple_of=8)(rows)
    with torch.no_grad():
        out = model(**batch, use_cache=False)
        for r, row in enumerate(rows):
            starts = [i for i, p in enumerate(row["position_ids"]) if p == 0] + [len(row["input_ids"])]
            for s, e in zip(starts, starts[1:], strict=False):
                alone = model(input_ids=torch.tensor([row["input_ids"][s:e]]), use_cache=False).logits[0]
                torch.testing.assert_close(out.logits[r, s:e], alone, atol=1e-5, rtol=1e-4)
        # the loss of the packed batch is the token-weighted loss of the samples run one by one
        total, count = 0.0, 0
        for ex in examples:
            n = sum(x != IGNORE_INDEX for x in ex["labels"][1:])
            total += model(input_ids=torch.tensor([ex["input_ids"]]), labels=torch.tensor([ex["labels"]]), use_cache=False).loss.item() * n
            count += n
    assert out.loss.item() == pytest.approx(total / count, rel=1e-5)


@pytest.mark.parametrize("name", list(MODELS))
def test_supports_packing_accepts_models_that_honour_position_ids(name):
    model = MODELS[name]()
    model.train()
    assert supports_packing(model)
    assert model.training  # the mode is restored


def test_supports_packing_rejects_a_model_that_ignores_position_ids():
    inner = _compact()

    class IgnoresPositions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner, self.config = inner, inner.config

        def forward(self, input_ids, position_ids=None, **kw):  # drops the packing information
            return self.inner(input_ids=input_ids, **kw)

    assert not supports_packing(IgnoresPositions())


# --------------------------------------------------------------------------------------------------
# Curriculum
# --------------------------------------------------------------------------------------------------


def _write_rows(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return str(path)


def _arranged(cfg, tokenizer, pack=False, max_len=512):
    records = load_records(cfg.dataset)
    tok = tokenize_records(records, tokenizer, max_len)
    train, info = arrange_train(cfg, list(tok.examples), examples=tok.examples, recordset=records, report=tok.report,
                                max_len=max_len, chunked=False, pack=pack)
    return tok, train, info


def test_short_to_long_orders_by_token_count(tokenizer):
    cfg = TrainConfig(dataset="builtin:instructions", curriculum="short-to-long")
    tok, train, info = _arranged(cfg, tokenizer)
    lengths = [len(e["input_ids"]) for e in train]
    assert lengths == sorted(lengths) and len(train) == len(tok.examples) and info["curriculum"] == "short-to-long"
    # packed with a curriculum: the samples keep their order (the collator packs each micro-batch)
    _, marked, info = _arranged(cfg, tokenizer, pack=True)
    assert [e["input_ids"] for e in marked] == [e["input_ids"] for e in train] and all(e[PACK_KEY] == 512 for e in marked)
    assert 1 <= info["packed_rows_per_micro_batch"] < info["samples_per_micro_batch"]


def test_column_curriculum_orders_by_the_column_and_keeps_the_eval_split(tmp_path, tokenizer):
    rows = [{"instruction": f"question {i}", "output": f"answer {i}", "difficulty": d} for i, d in enumerate([3, 1.5, "2", 0, 5])]
    rows.insert(2, {"instruction": "", "output": "no question", "difficulty": 9})  # dropped by normalization (row 3)
    cfg = TrainConfig(dataset=_write_rows(tmp_path / "d.jsonl", rows), curriculum="column", difficulty_column=" Difficulty ")
    assert cfg.difficulty_column == "difficulty"
    tok, train, _ = _arranged(cfg, tokenizer)
    assert [tokenizer.decode(e["input_ids"]).count(f"question {i}") for i, e in zip([3, 1, 2, 0, 4], train, strict=True)] == [1] * 5
    keys = curriculum_keys(cfg, tok.examples, load_records(cfg.dataset), tok.report)
    assert keys == [3.0, 1.5, 2.0, 0.0, 5.0]
    held = [tok.examples[1]]
    assert order([e for e in tok.examples if e is not held[0]], tok.examples, keys) == [tok.examples[i] for i in (3, 2, 0, 4)]


def test_column_curriculum_errors_name_the_column(tmp_path, tokenizer):
    with pytest.raises(ConfigError, match="difficulty_column"):
        TrainConfig(curriculum="column")
    rows = [{"instruction": "q", "output": "a", "level": 1}, {"instruction": "q2", "output": "a2", "level": "hard"}]
    cfg = TrainConfig(dataset=_write_rows(tmp_path / "d.jsonl", rows), curriculum="column", difficulty_column="difficulty")
    with pytest.raises(DataError, match="'difficulty'.*Columns found: .*'level'"):
        _arranged(cfg, tokenizer)
    cfg = dataclasses.replace(cfg, difficulty_column="level")
    with pytest.raises(DataError, match="'level' must hold numbers.*line 2.*'hard'"):
        _arranged(cfg, tokenizer)


def test_curriculum_is_refused_for_plain_text(tokenizer):
    cfg = TrainConfig(dataset="builtin:corpus", curriculum="short-to-long")
    with pytest.raises(ConfigError, match="curriculum"):
        arrange_train(cfg, [], examples=[], recordset=None, report=None, max_len=64, chunked=True, pack=True)


def test_curriculum_disables_shuffling(tmp_path, tokenizer):
    from transformers import Trainer

    from engine.hardware.device import detect_device
    from engine.training.trainer import training_args

    device = detect_device()
    for curriculum, sampler in (("none", torch.utils.data.RandomSampler), ("short-to-long", torch.utils.data.SequentialSampler)):
        cfg = TrainConfig(curriculum=curriculum)
        args = training_args(cfg, tmp_path, device, torch.float32, has_eval=False)
        trainer = Trainer(model=_compact(), args=args, train_dataset=_examples([5, 6, 7]), data_collator=PackingCollator(tokenizer))
        assert isinstance(trainer._get_train_sampler(), sampler)



# --------------------------------------------------------------------------------------------------
# Packing changes speed, not learning: the micro-batches of an unpacked epoch, packed when collated
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lengths", "max_len"), [
    ([random.Random(s).randrange(8, 90) for s in range(8)], 256),    # short instruction rows
    ([random.Random(s).randrange(20, 40) for s in range(16)], 64),   # the date task's shape
    ([100, 100, 100], 256),                                          # full rows would cost more than padding
    ([120, 120, 3, 3, 3, 3], 128),
    ([7], 64),
])
def test_pack_micro_batch_keeps_every_sample_and_never_computes_more_than_padding(lengths, max_len):
    groups = pack_micro_batch(lengths, max_len)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in g) <= max(max_len, max(lengths)) for g in groups)
    packed = len(groups) * padded_width(max(sum(lengths[i] for i in g) for g in groups), 8)
    assert packed <= len(lengths) * padded_width(max(lengths), 8)
    assert pack_micro_batch(lengths, max_len) == groups  # deterministic: a resumed run rebuilds the same rows


def test_pack_micro_batch_packs_short_samples_and_prefers_equal_rows():
    groups = pack_micro_batch([10] * 8, 256)  # 80 tokens: two rows of 40 cost what one of 80 does, with less attention
    assert len(groups) == 2 and all(len(g) == 4 for g in groups)
    # three samples of 100: two rows of 200 + 100 would compute 400 tokens, three rows of 104 compute 312
    assert len(pack_micro_batch([100, 100, 100], 256)) == 3


def test_collator_packs_a_marked_micro_batch_and_pads_the_eval_examples(tokenizer):
    collate = PackingCollator(tokenizer, pad_to_multiple_of=8)
    examples = _examples([10, 12, 9, 30, 11, 14, 8, 20], seed=5)
    batch = collate(mark_for_packing(examples, 128))
    assert set(batch) == {"input_ids", "labels", "position_ids"} and batch["input_ids"].shape[0] < len(examples)
    assert (batch["input_ids"] != tokenizer.pad_token_id).sum() == sum(len(e["input_ids"]) for e in examples)
    scored = sum(sum(x != IGNORE_INDEX for x in e["labels"][1:]) for e in examples)
    assert (batch["labels"] != IGNORE_INDEX).sum() == scored  # every target kept, none added at a sample's start
    plain = collate(examples[:2])
    assert "attention_mask" in plain and "position_ids" not in plain
    with pytest.raises(ValueError, match="mixes"):
        collate([*mark_for_packing(examples[:1], 128), examples[1]])


def test_plan_packing_reports_samples_rows_and_tokens_per_micro_batch():
    rep = plan_packing([10] * 64, 256, 8)
    event = rep.as_event()
    # 8 samples of 10 tokens: 2 rows of 40 (80 tokens computed) instead of 8 rows padded to 16 (128)
    assert event == {"samples_per_micro_batch": 8.0, "packed_rows_per_micro_batch": 2.0, "tokens_per_micro_batch": 80.0,
                     "packed_share_of_padded": 0.625}
    rep = plan_packing([random.Random(s).randrange(8, 200) for s in range(64)], 256, 8)
    assert rep.micro_batches == 8 and rep.samples == 64 and rep.share < 0.8


def test_packed_and_unpacked_runs_see_the_same_samples_in_each_step(tmp_path, tokenizer):
    """The Trainer draws the same micro-batches with packing on and off: packing happens inside each."""
    from transformers import Trainer

    from engine.hardware.device import detect_device
    from engine.training.trainer import training_args

    cfg = TrainConfig(dataset="builtin:instructions", micro_batch_size=8, packing=True)
    _, plain, _ = _arranged(cfg, tokenizer, pack=False, max_len=256)
    _, marked, info = _arranged(cfg, tokenizer, pack=True, max_len=256)
    args = training_args(cfg, tmp_path, detect_device(), torch.float32, has_eval=False)
    assert args.per_device_train_batch_size == 8 and 7 < info["samples_per_micro_batch"] <= 8  # the last one is short

    def batches(rows):
        trainer = Trainer(model=_compact(), args=args, train_dataset=rows, data_collator=PackingCollator(tokenizer))
        out = []
        for batch in trainer.get_train_dataloader():
            ids = batch["input_ids"].tolist()
            out.append(sorted(t for row in ids for t in row if t != tokenizer.pad_token_id))
        return out

    unpacked, packed = batches(plain), batches(marked)
    assert len(unpacked) == len(packed) == -(-len(plain) // 8)
    assert unpacked == packed  # the same tokens in every micro-batch


# --------------------------------------------------------------------------------------------------
# A real run
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["full", "qlora"])
def test_packed_training_run_finishes(method, runs_dir, tmp_path):
    from engine.runs import read_events
    from engine.training.run import run_training

    cfg = TrainConfig(method=method, dataset="builtin:instructions", max_steps=3, micro_batch_size=8, max_seq_len=128, logging_steps=1,
                      save_steps=100, eval_fraction=0.1, learning_rate=1e-3, packing=True, curriculum="short-to-long")
    done = run_training(cfg, tmp_path / "run", runs_dir=runs_dir)
    assert done["type"] == "done" and done["steps"] == 3 and done["eval_loss"] is not None
    events = read_events(tmp_path / "run")
    data = next(e for e in events if e["type"] == "data")
    assert 7 < data["samples_per_micro_batch"] <= 8 and 1 <= data["packed_rows_per_micro_batch"] < 8 and data["curriculum"] == "short-to-long"
    assert not any("packing turned off" in str(e.get("phase", "")) for e in events)


def test_packed_rows_come_in_a_few_widths_on_a_cpu(tokenizer):
    from engine.data.packing import packed_row_multiple

    assert [packed_row_multiple(n, "cpu") for n in (16, 64, 128, 256, 2048)] == [8, 16, 32, 64, 64]
    assert packed_row_multiple(256, "cuda") == 8
    collate = PackingCollator(tokenizer, pad_to_multiple_of=8, packed_multiple=64)
    batch = collate(mark_for_packing(_examples([10, 12, 9, 30, 11, 14, 8, 20], seed=5), 256))
    assert batch["input_ids"].shape[1] % 64 == 0
    assert collate(_examples([5, 9]))["input_ids"].shape == (2, 16)  # the eval set keeps steps of 8
