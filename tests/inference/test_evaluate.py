"""Tests for engine/inference/evaluate.py: sliding-window perplexity, dataset perplexity, date-task accuracy (CPU, offline).

The reference for the sliding window is the loop of Hugging Face's guide "Perplexity of fixed-length models",
written here with the model's own `labels=` loss, an independent path from evaluate.py's cross-entropy on the
logits.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from conftest import CPU, EXCHANGES, tiny_model_dir

from engine.config import QuantSettings
from engine.errors import DataError, EngineError
from engine.inference.evaluate import PerplexityResult, compare_models, dataset_perplexity, perplexity, task_accuracy
from engine.inference.tasks import TaskScore
from engine.models.loading import LoadedModel, load_model

SHORT = "what color is the sky ? the sky is blue and the sun is bright ."
MEDIUM = " ".join(f"{q} ? {a} ." for q, a in EXCHANGES[:3])
LONG = " ".join(f"{q} ? {a} ." for q, a in EXCHANGES) * 2  # ~290 tokens: several 64-token windows


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    tiny = tiny_model_dir()
    return load_model(str(tiny), runs_dir=tiny.parent, device=CPU, allow_local_paths=True)


def ids_of(loaded, text: str) -> torch.Tensor:
    return torch.tensor([loaded.tokenizer(text)["input_ids"]])


def hf_guide_nll(loaded, text: str, window: int, stride: int) -> tuple[float, int]:
    """(mean nll, tokens scored) as the HF guide computes it, with the model's labels= loss."""
    ids = ids_of(loaded, text)
    n = ids.size(1)
    nll_sum, n_tokens, prev_end = 0.0, 0, 0
    with torch.no_grad():
        for begin in range(0, n, stride):
            end = min(begin + window, n)
            trg_len = end - prev_end
            input_ids = ids[:, begin:end]
            target_ids = input_ids.clone()
            target_ids[:, :-trg_len] = -100
            loss = loaded.model(input_ids, labels=target_ids).loss
            # The model shifts the labels inside: the loss averages over the valid labels after the first.
            # (The guide subtracts batch_size from all valid labels, which is one token short whenever the
            # window's first label is already -100, i.e. for every window after the first.)
            num_loss_tokens = int((target_ids[:, 1:] != -100).sum())
            if num_loss_tokens:  # a last window of one token predicts nothing (its loss is nan)
                nll_sum += float(loss) * num_loss_tokens
            n_tokens += num_loss_tokens
            prev_end = end
            if end == n:
                break
    return nll_sum / n_tokens, n_tokens


def test_one_window_equals_exp_of_the_model_loss(loaded):
    ids = ids_of(loaded, SHORT)
    assert ids.size(1) < 64
    with torch.no_grad():
        loss = float(loaded.model(ids, labels=ids).loss)
    result = perplexity(loaded, [SHORT])
    assert isinstance(result, PerplexityResult)
    assert result.window == 64 and result.stride == 32  # defaults: the model's context and half of it
    assert result.windows == 1 and result.texts == 1 and result.tokens == ids.size(1) - 1
    assert result.nll == pytest.approx(loss, rel=1e-5)
    assert result.ppl == pytest.approx(math.exp(loss), rel=1e-5)
    assert result.seconds > 0 and "perplexity" in result.summary()
    assert perplexity(loaded, SHORT).nll == pytest.approx(result.nll)  # a single string is one text


@pytest.mark.parametrize(
    "text,window,stride",
    [(LONG, 64, 32), (LONG, 64, 64), (MEDIUM, 16, 12), (MEDIUM, 16, 5), (SHORT, 3, 1), (SHORT, 2, 2)],
    ids=["long-64-32", "long-64-64", "medium-16-12", "medium-16-5", "short-3-1", "short-2-2"],
)
def test_sliding_window_equals_the_hf_guide(loaded, text, window, stride):
    n = ids_of(loaded, text).size(1)
    assert n > 2 * window
    expected_nll, expected_tokens = hf_guide_nll(loaded, text, window, stride)
    result = perplexity(loaded, [text], window=window, stride=stride)
    assert result.tokens == expected_tokens
    if stride < window:
        assert result.tokens == n - 1  # every token but the first, once
        assert result.windows == math.ceil((n - window) / stride) + 1
    assert result.nll == pytest.approx(expected_nll, rel=1e-4)


def test_models_without_logits_to_keep_give_the_same_result(loaded, monkeypatch):
    import engine.inference.evaluate as evaluate

    assert evaluate._accepts_logits_to_keep(loaded.model)
    kept = perplexity(loaded, [MEDIUM], window=16, stride=5)
    monkeypatch.setattr(evaluate, "_accepts_logits_to_keep", lambda model: False)
    full = perplexity(loaded, [MEDIUM], window=16.0, stride=5.0)  # whole floats, as a UI number field sends them
    assert (full.tokens, full.windows) == (kept.tokens, kept.windows)
    assert full.nll == pytest.approx(kept.nll, rel=1e-6)


def test_sliding_window_is_close_to_the_full_context_result(loaded):
    full = perplexity(loaded, [SHORT])
    windowed = perplexity(loaded, [SHORT], window=16, stride=8)
    assert windowed.windows > 1 and windowed.tokens == full.tokens
    assert windowed.ppl == pytest.approx(full.ppl, rel=0.5)  # less context, same tokens: same ballpark
    long = perplexity(loaded, [LONG])  # longer than the context: handled by windows, not an error
    assert long.windows > 1 and math.isfinite(long.ppl)


def test_several_texts_average_over_tokens_not_texts(loaded):
    a = perplexity(loaded, [SHORT])
    b = perplexity(loaded, [LONG])
    both = perplexity(loaded, [SHORT, "", "   ", LONG])  # blank texts are ignored
    assert both.texts == 2 and both.tokens == a.tokens + b.tokens and both.windows == a.windows + b.windows
    assert both.nll == pytest.approx((a.nll * a.tokens + b.nll * b.tokens) / (a.tokens + b.tokens), rel=1e-6)


def test_texts_too_short_to_score_are_skipped(loaded):
    one_token = loaded.tokenizer.decode(ids_of(loaded, "sky")[0, :1])
    assert len(loaded.tokenizer(one_token)["input_ids"]) == 1
    result = perplexity(loaded, [one_token, SHORT])
    assert result.skipped == 1 and result.texts == 1 and any("skipped" in n for n in result.notes)
    with pytest.raises(EngineError, match="shorter than 2 tokens"):
        perplexity(loaded, [one_token])


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        ({"window": 1}, "at least 2 tokens"),
        ({"window": 0}, "at least 2 tokens"),
        ({"window": 65}, "larger than this model's context of 64"),
        ({"window": 16, "stride": 17}, "use 1 to 16"),
        ({"window": 16, "stride": 0}, "use 1 to 16"),
        ({"stride": 2.5}, "stride = 2.5"),
    ],
)
def test_bad_window_or_stride_is_a_clear_error(loaded, kwargs, fragment):
    with pytest.raises(EngineError, match=fragment):
        perplexity(loaded, [SHORT], **kwargs)


def test_no_text_is_a_clear_error(loaded):
    for texts in ([], [""], ["  \n"]):
        with pytest.raises(EngineError, match="no text"):
            perplexity(loaded, texts)


def test_training_mode_is_restored(loaded):
    loaded.model.train()
    try:
        perplexity(loaded, [SHORT])
        assert loaded.model.training
    finally:
        loaded.model.eval()


def test_dataset_perplexity(loaded, tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"instruction": q, "output": a} for q, a in EXCHANGES]
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    result = dataset_perplexity(loaded, str(path), max_rows=4, window=32)
    texts = [f"{q}\n{a}" for q, a in EXCHANGES[:4]]  # record_texts joins the messages' contents
    assert result.texts == 4 and result.nll == pytest.approx(perplexity(loaded, texts, window=32).nll)
    assert result.notes[0].startswith("4 of 6 instruction rows from d.jsonl")
    builtin = dataset_perplexity(loaded, "builtin:corpus", max_rows=2)
    assert builtin.texts == 2 and builtin.tokens > 64 and math.isfinite(builtin.nll)
    with pytest.raises(EngineError, match="max_rows = 0"):
        dataset_perplexity(loaded, str(path), max_rows=0)
    with pytest.raises(DataError):
        dataset_perplexity(loaded, str(tmp_path / "missing.jsonl"))


def test_task_accuracy_and_compare(loaded):
    # The tiny model's context (64) holds the first two test prompts (59 and 55 tokens with its tokenizer)
    # and leaves 5 tokens to answer; the third prompt (65 tokens) does not fit at all.
    score = task_accuracy(loaded, n=2)
    assert isinstance(score, TaskScore) and score.n == 2 and 0.0 <= score.accuracy <= 1.0
    assert len(score.examples) == 2
    with pytest.raises(EngineError, match="up to 65 tokens .* context holds only 64"):
        task_accuracy(loaded, n=3)
    with pytest.raises(EngineError, match="n = 0"):
        task_accuracy(loaded, n=0)
    with pytest.raises(EngineError, match="n = 5000"):
        task_accuracy(loaded, n=5000)
    a, b = compare_models(loaded, loaded, lambda m: perplexity(m, [SHORT]).nll)
    assert a == pytest.approx(b)


def test_4bit_models_are_protected_from_cpu_repacking_unless_inference_only():
    from bitsandbytes.nn import Linear4bit

    from engine.models.bnb_safety import count_repacked

    tiny = tiny_model_dir()
    q = load_model(str(tiny), QuantSettings(mode="4bit"), runs_dir=tiny.parent, device=CPU, allow_local_paths=True)
    layers = [m for m in q.model.modules() if isinstance(m, Linear4bit)]
    assert layers
    for layer in layers:  # as a 4-bit model from elsewhere would come: repacking allowed
        layer.support_avx512bf16_for_cpu = True
    task_accuracy(q, n=2, max_new_tokens=3)
    perplexity(q, [SHORT])
    assert not any(layer.support_avx512bf16_for_cpu for layer in layers)
    assert count_repacked(q.model) == 0  # the model can still be trained correctly

    inference_only = dataclasses.replace(q, cpu_repack_allowed=True)
    for layer in layers:
        layer.support_avx512bf16_for_cpu = True
    perplexity(inference_only, [SHORT])
    assert all(layer.support_avx512bf16_for_cpu for layer in layers)  # left as the caller chose
