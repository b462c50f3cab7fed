"""Measure a loaded model: perplexity on texts or a dataset, accuracy on the built-in date task.

Perplexity uses the standard sliding-window method (Hugging Face's guide "Perplexity of fixed-length
models"): each text is tokenized on its own and read in windows of `window` tokens that start every
`stride` tokens; a window scores only the tokens that the previous window did not, so with stride < window
every token after the first of a text is scored exactly once, with at least `window - stride` tokens of
context. The result is exp(mean negative log-likelihood over all scored tokens of all texts). A smaller
stride gives each token more context (a lower, fairer perplexity) at the cost of more forward passes;
stride == window gives non-overlapping chunks (fastest, highest; the first token of each chunk has no
context and is not scored, as in the HF guide).

The loss is computed here from the logits (summed cross-entropy in fp32 over the scored positions) rather
than from the model's `labels=` loss, so the result does not depend on how a model averages its loss, and
each window keeps only the logits it scores.

4-bit models: a forward pass in eval mode without gradients makes bitsandbytes repack 4-bit weights on
AVX512-BF16 CPUs, after which training them is silently wrong (engine/models/bnb_safety.py). Unless the model was
loaded as inference-only (`LoadedModel.cpu_repack_allowed`), repacking is switched off before measuring.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from .. import i18n
from ..errors import EngineError
from ..models.loading import LoadedModel
from .notes import Note
from .tasks import TaskScore, date_items, evaluate_task

T = TypeVar("T")
MAX_DATASET_ROWS = 100_000  # a bound on max_rows, so a typo cannot start an hours-long measurement


@dataclass
class PerplexityResult:
    """Perplexity of a model on some texts, and what was measured to get it."""

    ppl: float  # exp(nll)
    nll: float  # mean negative log-likelihood per scored token (nats)
    tokens: int  # tokens scored (stride < window: every token of every text except its first)
    windows: int  # forward passes
    texts: int  # texts that were scored (texts of fewer than 2 tokens are skipped)
    window: int
    stride: int
    seconds: float
    skipped: int = 0  # texts with fewer than 2 tokens: nothing to predict
    notes: list[str] = field(default_factory=list)

    def summary(self, lang: str = "en") -> str:
        """One line for logs and the UI, in `lang`."""
        return i18n.t("playground.eval.ppl_summary", lang, ppl=i18n.fmt_number(self.ppl, lang, 3), nll=i18n.fmt_number(self.nll, lang, 4),
                      tokens=i18n.fmt_number(self.tokens, lang), texts=i18n.fmt_number(self.texts, lang), windows=i18n.fmt_number(self.windows, lang),
                      window=i18n.fmt_number(self.window, lang), stride=i18n.fmt_number(self.stride, lang),
                      seconds=i18n.fmt_number(self.seconds, lang, 1))


def _protect_4bit(loaded: LoadedModel) -> int:
    """Forbid bitsandbytes' CPU repacking unless the model is inference-only; returns the layers guarded.

    Cheap and idempotent (one attribute per 4-bit layer); a model without 4-bit layers is untouched.
    """
    if loaded.cpu_repack_allowed:
        return 0  # inference-only by the caller's choice: keep the faster packed CPU kernels
    from ..models.bnb_safety import disable_cpu_repack

    return disable_cpu_repack(loaded.model)


def _whole(value: Any) -> Any:
    """64.0 -> 64 (a UI number field may deliver floats); anything else unchanged, for the checks to report."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _resolve_window(loaded: LoadedModel, window: int | None, stride: int | None) -> tuple[int, int, list[str]]:
    window, stride = _whole(window), _whole(stride)
    notes: list[str] = []
    ctx = loaded.context_length
    if window is None:
        if ctx is None:
            window = 1024
            notes.append(Note("playground.note.no_context_length"))
        else:
            window = ctx
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise EngineError(key="playground.error.window_small", window=repr(window))
    if ctx is not None and window > ctx:
        raise EngineError(key="playground.error.window_big", window=window, ctx=ctx)
    if stride is None:
        stride = max(1, window // 2)
    if isinstance(stride, bool) or not isinstance(stride, int) or not 1 <= stride <= window:
        raise EngineError(key="playground.error.stride", stride=repr(stride), window=window)
    return window, stride, notes


def _accepts_logits_to_keep(model: Any) -> bool:
    """Whether the model's forward takes `logits_to_keep` (transformers models do; old remote code may not)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft forwards **kwargs
    try:
        return "logits_to_keep" in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return False


def _score_text(model: Any, ids: torch.Tensor, window: int, stride: int, device: torch.device, keep: bool) -> tuple[float, int, int]:
    """(summed nll, tokens scored, windows) of one text's token ids (1-D) with the sliding window.

    keep: ask the model for the scored rows' logits only (`logits_to_keep`): with stride = window / 2 that
    halves the largest tensor of the pass (positions x vocabulary, often upcast to fp32).
    """
    n = int(ids.numel())
    nll_sum, scored, windows, prev_end = 0.0, 0, 0, 0
    for begin in range(0, n, stride):
        end = min(begin + window, n)
        # Targets are positions [first, end): the ones the previous window did not score. Position 0 of a
        # window has no context inside it, so it is never a target.
        first = max(prev_end, begin + 1)
        if first < end:
            chunk = ids[begin:end].unsqueeze(0).to(device)  # (1, L)
            extra = {"logits_to_keep": end - first + 1} if keep else {}
            logits = model(input_ids=chunk, attention_mask=torch.ones_like(chunk), use_cache=False, **extra).logits  # (1, K, V)
            # The logits at position j predict token j + 1: the rows for positions first-1 .. end-2 (the last K-1
            # of the K kept, or of the whole window).
            pred = logits[0, -(end - first + 1) : -1].float()  # (targets, V)
            target = chunk[0, first - begin : end - begin]  # (targets,)
            nll_sum += float(torch.nn.functional.cross_entropy(pred, target, reduction="sum"))
            scored += end - first
            windows += 1
        prev_end = end
        if end == n:
            break
    return nll_sum, scored, windows


def perplexity(loaded: LoadedModel, texts: Sequence[str], *, window: int | None = None, stride: int | None = None) -> PerplexityResult:
    """Sliding-window perplexity of the model on `texts` (see the module docstring).

    window: tokens per forward pass (default and maximum: the model's context). stride: how far each window
    moves (default window // 2; 1..window). Each text is tokenized as the tokenizer does by default (special
    tokens it adds included) and measured on its own: windows never cross texts.
    Raises EngineError for no text, a window < 2 or above the context, or a stride outside 1..window.
    """
    t0 = time.perf_counter()
    if isinstance(texts, str):
        texts = [texts]  # one text given as a string: not a list of its characters
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    if not texts:
        raise EngineError(key="playground.error.ppl_no_text")
    window, stride, notes = _resolve_window(loaded, window, stride)
    model, tokenizer = loaded.model, loaded.tokenizer
    _protect_4bit(loaded)
    device = next(model.parameters()).device
    keep = _accepts_logits_to_keep(model)
    nll_sum, tokens, windows, used, skipped = 0.0, 0, 0, 0, 0
    was_training = model.training
    model.eval()  # no dropout: perplexity is a property of the weights, not of a random mask
    try:
        with torch.no_grad():
            for text in texts:
                # verbose=False: a text longer than the context is expected here (that is what windows are for)
                ids = torch.tensor(tokenizer(text, verbose=False)["input_ids"], dtype=torch.long)
                if ids.numel() < 2:
                    skipped += 1
                    continue
                s, k, w = _score_text(model, ids, window, stride, device, keep)
                nll_sum, tokens, windows, used = nll_sum + s, tokens + k, windows + w, used + 1
    finally:
        if was_training:
            model.train()
    if tokens == 0:
        raise EngineError(key="playground.error.ppl_short")
    if skipped:
        notes.append(Note("playground.note.ppl_skipped", n=skipped))
    nll = nll_sum / tokens
    return PerplexityResult(
        ppl=math.exp(nll) if nll < 700 else math.inf,  # exp overflows a float past ~709
        nll=nll,
        tokens=tokens,
        windows=windows,
        texts=used,
        window=window,
        stride=stride,
        seconds=time.perf_counter() - t0,
        skipped=skipped,
        notes=notes,
    )


def dataset_perplexity(loaded: LoadedModel, source: str, *, max_rows: int = 200, **kw: Any) -> PerplexityResult:
    """Perplexity on the first `max_rows` rows of a dataset (`engine.data.formats.load_records` source: builtin:NAME
    or an uploaded file). Chat-like rows are measured as their messages' contents joined by newlines
    (`record_texts`). `kw` goes to `perplexity` (window, stride)."""
    from ..data.formats import load_records, record_texts

    max_rows = _whole(max_rows)
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or not 1 <= max_rows <= MAX_DATASET_ROWS:
        raise EngineError(key="playground.error.max_rows", value=repr(max_rows), limit=MAX_DATASET_ROWS)
    records = load_records(source)
    texts = record_texts(records)
    result = perplexity(loaded, texts[:max_rows], **kw)
    result.notes.insert(0, Note("playground.note.ppl_rows", n=min(len(texts), max_rows), rows=records.summary()))
    return result


def task_accuracy(loaded: LoadedModel, *, n: int | None = None, max_new_tokens: int = 16, batch_size: int = 16) -> TaskScore:
    """Exact-match accuracy on the built-in date task's test split (`n` items, default all 100), greedy and
    batched (`engine.inference.tasks.evaluate_task`). max_new_tokens is lowered to what the model's context leaves
    after the longest prompt. 4-bit models are protected from CPU repacking first unless they were loaded
    inference-only. Raises EngineError when the prompts do not fit in the model's context at all."""
    from ..models.tokenizer import DEFAULT_CHAT_TEMPLATE
    from .tasks import left_padded_prompts

    try:
        items = date_items("test", n)
    except ValueError as exc:
        raise EngineError(key="error.inference.task_n", n=repr(n), max=len(date_items("test"))) from exc
    if not items:
        raise EngineError(key="error.inference.task_n_zero")
    ctx, tokenizer = loaded.context_length, loaded.tokenizer
    if ctx is not None:
        # The prompts exactly as evaluate_task renders them (same helper), to check they leave room to answer:
        # a model with learned positions cannot read past its context (it raises deep inside generate).
        template = None if getattr(tokenizer, "chat_template", None) else DEFAULT_CHAT_TEMPLATE
        longest = int(left_padded_prompts(tokenizer, items, template, tokenizer.pad_token_id)[0].shape[1])
        if longest >= ctx:
            raise EngineError(key="playground.error.task_context", longest=longest, ctx=ctx)
        max_new_tokens = min(max_new_tokens, ctx - longest)
    _protect_4bit(loaded)  # evaluate_task leaves this to its caller (see its docstring)
    return evaluate_task(loaded.model, tokenizer, items, max_new_tokens=max_new_tokens, batch_size=batch_size)


def compare_models(loaded_a: LoadedModel, loaded_b: LoadedModel, fn: Callable[[LoadedModel], T]) -> tuple[T, T]:
    """`(fn(loaded_a), fn(loaded_b))`, run one after the other (never both at once: they share the device),
    e.g. `compare_models(base, tuned, task_accuracy)`."""
    return fn(loaded_a), fn(loaded_b)
