"""What streamed and batch generation hand to `model.generate`, in one place so that both encode and stop alike.

- Prompts: `encode_prompt` puts a list of chat messages through the tokenizer's chat template with the generation
  prompt (gradio 6 delivers message content as a list of parts: `flatten_content` turns it into strings); a
  string is one user message (chat=True) or raw text to continue (chat=False).
- End of answer: `end_token_ids` are the model's and tokenizer's eos plus the single-token end-of-turn markers the
  tokenizer has (`<|end|>`, `<|im_end|>`, `<|eot_id|>`, ...), so chat models stop after their turn; stop strings
  (`merged_stop_strings`: the settings' plus the caller's) end it too.
- Stop: `StopOnEvent` is a StoppingCriteria that polls a `threading.Event` after every token.
- `generate_kwargs`: the decoding settings as `model.generate` kwargs.

Used by engine/inference/generate.py (`stream_generate`) and engine/inference/batch.py (`batch_generate`).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from ..config import GenerationSettings
from ..errors import GenerationError
from ..models.loading import LoadedModel

# Tokens that close a turn in common chat formats (ours is <|end|>); used as extra eos ids when present.
END_OF_TURN_TOKENS = ("<|end|>", "<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|eot|>", "<|end_of_turn|>")
_ROLES = ("system", "user", "assistant")


def flatten_content(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Chat messages with plain-string content: gradio 6's `[{"type": "text", "text": ...}]` parts are
    joined, non-text parts (files, images) are dropped, and only `role` and `content` are kept."""
    flat: list[dict[str, str]] = []
    for message in messages:
        if not isinstance(message, dict):
            raise GenerationError(key="playground.error.bad_message", kind=type(message).__name__)
        role = str(message.get("role", "user"))
        if role not in _ROLES:
            raise GenerationError(key="playground.error.bad_role", role=repr(role), roles=", ".join(_ROLES))
        flat.append({"role": role, "content": _text_of(message.get("content"))})
    return flat


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        if content.get("type", "text") == "text" and isinstance(content.get("text"), str):
            return content["text"]
        return ""  # a file/image/component part: nothing a text model can read
    if isinstance(content, (list, tuple)):
        return "".join(_text_of(part) for part in content)
    return str(content)


def encode_prompt(loaded: LoadedModel, prompt: str | list[dict[str, Any]], chat: bool) -> dict[str, torch.Tensor]:
    """`input_ids` and `attention_mask` (batch of one) of a prompt: chat messages (or a string as one user message)
    through the chat template with the generation prompt, or raw text to continue (chat=False)."""
    tokenizer = loaded.tokenizer
    if isinstance(prompt, str):
        if not prompt.strip():
            raise GenerationError(key="playground.error.empty_prompt")
        if not chat:
            enc = tokenizer(prompt, return_tensors="pt")
            return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        messages = [{"role": "user", "content": prompt}]
    else:
        messages = flatten_content(list(prompt))
        if not any(m["content"].strip() for m in messages):
            raise GenerationError(key="playground.error.empty_conversation")
        if not chat:
            raise GenerationError(key="error.inference.messages_need_chat")
    if not getattr(tokenizer, "chat_template", None):
        raise GenerationError(key="error.inference.no_chat_template")
    try:
        enc = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    except Exception as exc:  # jinja2 TemplateError and friends: the template rejected these messages
        raise GenerationError(key="playground.error.chat_template", details=str(exc)) from exc
    input_ids = enc["input_ids"]
    mask = enc.get("attention_mask")
    return {"input_ids": input_ids, "attention_mask": mask if mask is not None else torch.ones_like(input_ids)}


def end_token_ids(loaded: LoadedModel) -> list[int]:
    """The ids that end an answer: the tokenizer's and the model's eos, then the end-of-turn markers the vocabulary has."""
    tokenizer, model = loaded.tokenizer, loaded.model
    ids: list[int] = []

    def add(value: Any) -> None:
        if isinstance(value, int) and value >= 0 and value not in ids:
            ids.append(value)
        elif isinstance(value, (list, tuple)):
            for v in value:
                add(v)

    add(tokenizer.eos_token_id)
    add(getattr(getattr(model, "generation_config", None), "eos_token_id", None))
    vocab = tokenizer.get_vocab()
    for token in END_OF_TURN_TOKENS:
        if token in vocab:
            add(vocab[token])
    return ids


class StopOnEvent:
    """StoppingCriteria: stop every sequence as soon as the event is set (checked after each token)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


def merged_stop_strings(settings: GenerationSettings, extra: list[str] | None = None) -> list[str]:
    """The settings' stop strings (one per line) followed by the caller's, without empties or duplicates."""
    out: list[str] = []
    for stop in [*settings.stop_list(), *(extra or ())]:
        if stop and stop not in out:
            out.append(stop)
    return out


def generate_kwargs(
    settings: GenerationSettings, max_new: int, eos_ids: list[int], pad_id: int | None, *, tokenizer: Any = None, stop_strings: list[str] | None = None
) -> dict[str, Any]:
    """`model.generate` kwargs. Stop strings (the complete list, see
    `merged_stop_strings`) go with the tokenizer: HF matches them on the token level and needs it for that."""
    kwargs: dict[str, Any] = {"max_new_tokens": max_new, "do_sample": settings.do_sample}
    if settings.do_sample:
        # Only pass sampling knobs when sampling: transformers warns about them in greedy mode.
        kwargs.update(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p)
        if settings.min_p > 0:
            kwargs["min_p"] = settings.min_p
    if settings.repetition_penalty != 1.0:
        kwargs["repetition_penalty"] = settings.repetition_penalty
    if settings.no_repeat_ngram_size > 0:  # applies to greedy decoding too
        kwargs["no_repeat_ngram_size"] = settings.no_repeat_ngram_size
    if eos_ids:
        kwargs["eos_token_id"] = eos_ids
    if pad_id is not None:
        kwargs["pad_token_id"] = pad_id
    if stop_strings and tokenizer is not None:
        kwargs.update(stop_strings=list(stop_strings), tokenizer=tokenizer)
    return kwargs
