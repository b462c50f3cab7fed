"""Tokenizers for the compact models, and the chat template used when a tokenizer has none.

`train_tokenizer` builds a small byte-level BPE tokenizer with the `tokenizers` library (the same kind
GPT-2, Llama 3 and Qwen use), trained in seconds on the built-in corpus, so the whole app works offline.

Special tokens and the end-of-sequence design
---------------------------------------------
====================  ======  =================================================================
token                 id      role
====================  ======  =================================================================
``<|endoftext|>``     0       bos and unk (byte-level BPE never needs unk; nothing adds bos)
``<|pad|>``           1       padding only: never trained on (labels are -100 there)
``<|system|>``        2       opens a system turn
``<|user|>``          3       opens a user turn
``<|assistant|>``     4       opens an assistant turn
``<|end|>``           5       **eos**: closes every turn and every pretraining document
====================  ======  =================================================================

The chat template closes an assistant turn with ``{{ eos_token }}``. With our tokenizer that *is*
``<|end|>``, so the rendered text is the plain ``<|assistant|>\\n...<|end|>\\n`` format; with a foreign
tokenizer that lacks a template (GPT-2, Pythia, a base Llama) it is that tokenizer's own eos. Either way
the token that ends an assistant answer during training is `tokenizer.eos_token_id`, which is what
`generate` stops on, so a fine-tuned model stops by itself (no "model that never stops").
Pretraining text also ends each document with the same eos, so the base model already knows the token
before fine-tuning.

Numbers are split into single digits (``Digits(individual_digits=True)``) so that, e.g., the date task
(engine/inference/tasks.py) is a copy-and-reorder task for the model instead of a lookup over number merges.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ..errors import EngineError

BOS_TOKEN = "<|endoftext|>"
UNK_TOKEN = BOS_TOKEN
PAD_TOKEN = "<|pad|>"
SYSTEM_TOKEN = "<|system|>"
USER_TOKEN = "<|user|>"
ASSISTANT_TOKEN = "<|assistant|>"
END_TOKEN = "<|end|>"
EOS_TOKEN = END_TOKEN

# The order fixes the ids 0..5 (see the module docstring).
SPECIAL_TOKENS: tuple[str, ...] = (BOS_TOKEN, PAD_TOKEN, SYSTEM_TOKEN, USER_TOKEN, ASSISTANT_TOKEN, END_TOKEN)

# Non-assistant turns end with the literal <|end|>; assistant turns end with the tokenizer's eos so that
# the model learns to emit exactly the token generation stops on (for our tokenizer both are <|end|>).
# Whitespace control ({%- -%}) keeps the output free of template indentation.
DEFAULT_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] }}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ eos_token if eos_token is defined and eos_token else '<|end|>' }}"
    "{%- else -%}"
    "{{ '<|end|>' }}"
    "{%- endif -%}"
    "{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|assistant|>\\n' }}"
    "{%- endif -%}"
)

MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + 256  # the 256 byte symbols must all fit


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    *,
    model_max_length: int = 1024,
    min_frequency: int = 2,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on `texts` and wrap it for transformers.

    The result has the special tokens and chat template described in the module docstring, pads with
    ``<|pad|>``, adds no bos/eos by itself when encoding (the data pipeline appends eos explicitly), and
    round-trips through `save_pretrained` / `AutoTokenizer.from_pretrained`. `vocab_size` is an upper
    bound: a small corpus may yield fewer merges.
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise EngineError(
            f"vocab_size = {vocab_size} is too small: a byte-level tokenizer needs at least {MIN_VOCAB_SIZE} "
            f"entries (256 bytes + {len(SPECIAL_TOKENS)} special tokens)."
        )
    backend = Tokenizer(models.BPE())
    # Digits first: every digit becomes its own piece; ByteLevel then maps bytes to printable symbols and
    # splits words GPT-2 style (a leading space stays attached to the word that follows it).
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    # trim_offsets=False keeps character offsets exact (used for offset mapping); it adds no tokens.
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_non_empty(texts), trainer=trainer)
    return _wrap(backend, model_max_length)


def _non_empty(texts: Iterable[str]) -> Iterable[str]:
    for text in texts:
        if text and text.strip():
            yield text


def _wrap(backend: Tokenizer, model_max_length: int) -> PreTrainedTokenizerFast:
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        pad_token=PAD_TOKEN,
        extra_special_tokens=[SYSTEM_TOKEN, USER_TOKEN, ASSISTANT_TOKEN],
        model_max_length=model_max_length,
        # Byte-level BPE reproduces spaces exactly; the "clean up" pass would corrupt text like "a ." .
        clean_up_tokenization_spaces=False,
        padding_side="right",
    )
    tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE
    return tokenizer


def ensure_chat_template(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Give `tokenizer` the default chat template if it has none; make sure it has a pad token.

    Returns True when the chat template was changed. A missing pad token falls back to the eos token
    (padded positions are masked out of attention and loss, so sharing the id is harmless).
    """
    changed = False
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = DEFAULT_CHAT_TEMPLATE
        changed = True
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise EngineError(key="error.model.no_eos")
        tokenizer.pad_token = tokenizer.eos_token
    return changed
