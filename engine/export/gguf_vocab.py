"""The tokenizer part of a GGUF file: vocabulary, token types, merges or scores, special ids and the chat template.

llama.cpp tokenizes by itself from what the file says, so this must describe the *same* tokenizer the model was
trained with. Two kinds are written, as llama.cpp's own converter (convert_hf_to_gguf.py) writes them:

- byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM and the built-in compact models): ``tokenizer.ggml.model = gpt2``,
  the tokens as the tokenizer spells them, the merges, and ``tokenizer.ggml.pre`` naming the pre-tokenizer split
  (read from the tokenizer's own pre-tokenizer, not guessed from the architecture: a fine-tune keeps its base's);
- SentencePiece-style BPE with byte fallback (Llama 2, Mistral, TinyLlama): ``tokenizer.ggml.model = llama``,
  scores (merge priority: earlier tokens merge first) and BYTE types for the ``<0xNN>`` tokens.

Special tokens (the tokenizer's added tokens marked special) are CONTROL, other added tokens USER_DEFINED, so
llama.cpp keeps ``<|end|>`` or ``<|im_end|>`` whole. A model whose embedding has more rows than the tokenizer has
tokens gets ``[PADn]`` UNUSED entries, as in the converter. The bos/eos/unk/pad ids, the add-bos/eos flags and the
chat template (Jinja, as in tokenizer_config.json) come from gguf's own `SpecialVocab` reading the saved tokenizer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..errors import EngineError

# The pre-tokenizer split regexes llama.cpp knows (llama-vocab.cpp), by the name the file gives them. Only the ones a
# tokenizer of our catalog or of this app uses; anything else is refused rather than written with a wrong split.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPLIT_NAMES = {_LLAMA3_SPLIT: "llama-bpe", _QWEN2_SPLIT: "qwen2"}


def _pre_tokenizer_name(tokenizer_json: dict[str, Any]) -> str:
    """The `tokenizer.ggml.pre` value for a byte-level BPE tokenizer, from its pre-tokenizer's structure."""
    pre = tokenizer_json.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [s.get("type") for s in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"  # the GPT-2 regex inside ByteLevel
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and steps[1].get("use_regex", True):
        # single digits, then the GPT-2 regex: llama.cpp's "smollm" split ("\p{N}" then the GPT-2 expression);
        # the built-in compact tokenizer (engine/models/tokenizer.py) is exactly this
        return "smollm"
    if kinds and kinds[0] == "Split" and kinds[-1] == "ByteLevel":
        regex = (steps[0].get("pattern") or {}).get("Regex", "")
        if regex in _SPLIT_NAMES:
            return _SPLIT_NAMES[regex]
    raise EngineError(key="error.gguf.pre_tokenizer", kinds=" + ".join(map(str, kinds)) or "none")


def tokenizer_kind(tokenizer_json: dict[str, Any]) -> str:
    """'gpt2' (byte-level BPE) or 'llama' (SentencePiece-style BPE with byte fallback); EngineError for anything else."""
    model = tokenizer_json.get("model") or {}
    decoder = (tokenizer_json.get("decoder") or {}).get("type")
    if model.get("type") == "BPE" and not model.get("byte_fallback") and decoder == "ByteLevel":
        return "gpt2"
    if model.get("type") == "BPE" and model.get("byte_fallback"):
        return "llama"
    raise EngineError(key="error.gguf.tokenizer_kind", type=str(model.get("type", "unknown")), decoder=str(decoder))


def vocab_metadata(tokenizer: Any, tokenizer_dir: Path, n_vocab: int) -> dict[str, Any]:
    """What `add_vocab` writes, as plain values (so that tests and the Modelfile can read it too).

    tokenizer: the loaded (fast) tokenizer; tokenizer_dir: where it is saved (tokenizer.json, tokenizer_config.json);
    n_vocab: rows of the model's embedding (>= the tokenizer's size; extra rows become [PADn]).
    """
    tok_file = Path(tokenizer_dir) / "tokenizer.json"
    if not tok_file.exists():
        raise EngineError(key="error.gguf.fast_tokenizer")
    tokenizer_json = json.loads(tok_file.read_text(encoding="utf-8"))
    kind = tokenizer_kind(tokenizer_json)
    vocab = tokenizer.get_vocab()
    if len(vocab) > n_vocab:
        raise EngineError(key="error.gguf.vocab_rows", n=len(vocab), rows=n_vocab)
    by_id = {i: t for t, i in vocab.items()}
    added = tokenizer.added_tokens_decoder  # id -> AddedToken (special or not)
    tokens: list[str] = []
    types: list[int] = []  # gguf.TokenType: 1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE
    scores: list[float] = []
    for i in range(n_vocab):
        token = by_id.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(5)
            scores.append(-1000.0)
            continue
        if i in added:
            token = added[i].content
            ttype = 3 if added[i].special else 4
        elif kind == "llama" and re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", token):
            ttype = 6
        elif token == tokenizer.unk_token and kind == "llama":
            ttype = 2
        else:
            ttype = 1
        tokens.append(token)
        types.append(ttype)
        # SentencePiece merges the pair whose result scores highest; a BPE vocabulary lists merged tokens in merge
        # order, so minus the id ranks them as the merges do. Byte-level BPE uses the merges list instead.
        scores.append(-float(i) if ttype == 1 else 0.0)
    meta: dict[str, Any] = {"model": kind, "tokens": tokens, "token_types": types}
    if kind == "gpt2":
        meta["pre"] = _pre_tokenizer_name(tokenizer_json)
    else:
        meta["pre"] = "default"
        meta["scores"] = scores
    from gguf import SpecialVocab

    special = SpecialVocab(Path(tokenizer_dir), load_merges=True, n_vocab=n_vocab)
    meta["merges"] = list(special.merges)
    meta["special_ids"] = dict(special.special_token_ids)
    meta["add_special"] = dict(special.add_special_token)
    # Whether llama.cpp adds bos/eos to every prompt is written explicitly, as the tokenizer itself behaves (its
    # default differs between vocabulary types and versions, and a missing or doubled bos changes the model's input).
    probe = tokenizer("a")["input_ids"]
    meta["add_special"]["bos"] = bool(tokenizer.bos_token_id is not None and probe[:1] == [tokenizer.bos_token_id])
    meta["add_special"]["eos"] = bool(tokenizer.eos_token_id is not None and len(probe) > 1 and probe[-1:] == [tokenizer.eos_token_id])
    template = getattr(tokenizer, "chat_template", None) or special.chat_template
    if isinstance(template, dict):  # several named templates: llama.cpp uses the default one
        template = template.get("default") or next(iter(template.values()))
    meta["chat_template"] = template if isinstance(template, str) else None
    if tokenizer.pad_token_id is not None and "pad" not in meta["special_ids"]:
        meta["special_ids"]["pad"] = int(tokenizer.pad_token_id)
    return meta


def add_vocab(writer: Any, meta: dict[str, Any]) -> None:
    """Write `vocab_metadata`'s values into a GGUFWriter (tokenizer.ggml.* and tokenizer.chat_template)."""
    writer.add_tokenizer_model(meta["model"])
    writer.add_tokenizer_pre(meta["pre"])
    writer.add_token_list(meta["tokens"])
    writer.add_token_types(meta["token_types"])
    if "scores" in meta:
        writer.add_token_scores(meta["scores"])
    if meta["merges"]:
        writer.add_token_merges(meta["merges"])
    for typ, tid in meta["special_ids"].items():
        handler = getattr(writer, f"add_{typ}_token_id", None)
        if handler is not None:
            handler(int(tid))
    for typ, value in meta["add_special"].items():
        handler = getattr(writer, f"add_add_{typ}_token", None)
        if handler is not None:
            handler(bool(value))
    if meta["chat_template"]:
        writer.add_chat_template(meta["chat_template"])


def end_tokens(meta: dict[str, Any]) -> list[str]:
    """The tokens that end an answer (eos and the end-of-turn markers this vocabulary has): the Modelfile's stops."""
    from ..inference.decoding import END_OF_TURN_TOKENS

    out: list[str] = []
    eos = meta["special_ids"].get("eos")
    if eos is not None and 0 <= eos < len(meta["tokens"]):
        out.append(meta["tokens"][eos])
    present = set(meta["tokens"])
    out += [t for t in END_OF_TURN_TOKENS if t in present]
    return list(dict.fromkeys(out))
