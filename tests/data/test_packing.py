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
from engine.data.packing import PackingCollator, first_fit_decreasing, next_fit, pack_examples, pack_for_steps, supports_packing
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


def test_next_fit_keeps_order():
    bins = next_fit([3, 3, 3, 5, 5, 9], 10)
    assert bins == [[0, 1, 2], [3, 4], [5]]
    assert [i for b in bins for i in b] == list(range(6))


def test_pack_examples_rows_positions_and_labels():
    examples = _examples([10, 30, 7, 50, 22, 64, 5, 40])
    rows, rep = pack_examples(examples, 64)
    assert rep.samples == 8 and rep.rows == len(rows) and rep.tokens == sum(len(e["input_ids"]) for e in examples)
    assert 0 < rep.fill <= 1
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
    rows, _ = pack_examples(_examples([5, 9, 20]), 32)
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
    rows, _ = pack_examples(examples, 40)
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
    # packed with a curriculum: rows keep the order (next fit), so row lengths of samples still rise
    _, rows, info = _arranged(cfg, tokenizer, pack=True)
    assert info["packed_samples"] == len(tok.examples) and info["packed_rows"] == len(rows) < len(tok.examples)
    firsts = [r["input_ids"][: r["position_ids"].index(0, 1)] if 0 in r["position_ids"][1:] else r["input_ids"] for r in rows]
    assert [len(f) for f in firsts] == sorted(len(f) for f in firsts)


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
# Packing changes speed, not learning: as many micro-batches (and samples per step) as unpacked
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lengths", "batch", "max_len"), [
    ([random.Random(s).randrange(8, 90) for s in range(400)], 8, 256),   # short instruction rows
    ([random.Random(s).randrange(20, 40) for s in range(100)], 16, 64),  # the date task's shape
    ([5] * 37, 4, 128),                                                  # uneven last micro-batch
    ([120, 120, 3, 3, 3, 3], 2, 128),                                    # long rows force a full capacity
])
@pytest.mark.parametrize("keep_order", [False, True])
def test_pack_for_steps_keeps_the_micro_batches_of_an_unpacked_epoch(lengths, batch, max_len, keep_order):
    import math

    examples = _examples(lengths)
    rows, rep = pack_for_steps(examples, max_len, batch, keep_order=keep_order)
    unpacked = math.ceil(len(lengths) / batch)
    assert rep.micro_batches == unpacked  # same optimizer steps per epoch: same schedule, same samples per step
    assert rep.rows == len(rows) and rep.samples == len(lengths) and sum(len(r["input_ids"]) for r in rows) == sum(lengths)
    assert all(len(r["input_ids"]) <= rep.max_len <= max_len for r in rows)
    # balanced rows: a micro-batch holds about the tokens of an unpacked one, never more than padding would take
    assert rep.rows_per_batch * rep.max_len <= batch * max(lengths)
    per_batch = sum(lengths) / unpacked
    assert rep.rows_per_batch * rep.max_len <= max(2 * per_batch, max(lengths) * rep.rows_per_batch)
    if keep_order:  # a curriculum's order survives
        order_seen = [p for r in rows for p in r["input_ids"]]
        assert order_seen == [t for e in examples for t in e["input_ids"]]


def test_pack_for_steps_summary_and_event_say_samples_and_tokens_per_micro_batch():
    _, rep = pack_for_steps(_examples([10] * 64), 256, 8)
    event = rep.as_event()
    assert event["packed_rows_per_batch"] == 1 and event["samples_per_micro_batch"] == 8.0 and event["tokens_per_micro_batch"] == 80.0
    assert "1 row(s) per micro-batch, about 8.0 samples and 80 tokens each" in rep.summary()


def test_arrange_train_packs_to_the_micro_batch_and_the_trainer_uses_its_rows(tmp_path, tokenizer):
    import math

    from engine.data.build import TrainData
    from engine.hardware.device import detect_device
    from engine.training.trainer import training_args

    cfg = TrainConfig(dataset="builtin:instructions", micro_batch_size=8, packing=True)
    tok, rows, info = _arranged(cfg, tokenizer, pack=True, max_len=256)
    assert math.ceil(info["packed_rows"] / info["packed_rows_per_batch"]) == math.ceil(len(tok.examples) / 8)
    assert 6 <= info["samples_per_micro_batch"] <= 8
    data = TrainData(rows, [], info)
    args = training_args(cfg, tmp_path, detect_device(), torch.float32, has_eval=False, train_batch_size=data.train_batch_size)
    assert args.per_device_train_batch_size == info["packed_rows_per_batch"] <= 8
    assert TrainData([], [], {}).train_batch_size is None


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
    assert data["packed_samples"] == data["train_examples"] > data["packed_rows"] > 0 and data["curriculum"] == "short-to-long"
    assert not any("packing turned off" in str(e.get("phase", "")) for e in events)
