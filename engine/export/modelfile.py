"""The Ollama `Modelfile` written beside an exported GGUF: FROM, TEMPLATE, stop tokens and decoding PARAMETERs.

Ollama does not run Jinja: its TEMPLATE is a Go template over `.Messages` (each with `.Role` and `.Content`). A
wrong template is the usual cause of "gibberish in Ollama", so the Go template is *derived from the model's own
Jinja chat template* and checked against it: the Jinja template is rendered for one message of each role (with
marker contents) to find the text before and after each role's content and the generation prompt, then several
whole conversations are rendered both ways and must agree character for character. Chat formats that add text
the split cannot see (a default system prompt, as Qwen2.5's and Llama 3.1's add) are tried with the ChatML and Llama 3
layouts as well. When
nothing agrees, the Modelfile has no TEMPLATE and says why (Ollama then falls back to its own guess from the
template stored in the GGUF).

PARAMETERs come from a decoding preset (presets/generation.yaml) turned into Ollama's names; greedy decoding is
temperature 0. `no_repeat_ngram_size` has no Ollama counterpart and is left out.
"""

from __future__ import annotations

from typing import Any

from ..errors import EngineError

_MARK = {"system": "\x01SYSTEM\x01", "user": "\x01USER\x01", "assistant": "\x01ASSISTANT\x01"}
_ROLES = ("system", "user", "assistant")
# Conversations both renderings must agree on (the Go template is only written when every one matches).
_CHECKS = (("user",), ("user", "assistant", "user"), ("system", "user", "assistant", "user"))
_CHATML = {"prefix": {r: f"<|im_start|>{r}\n" for r in _ROLES}, "suffix": dict.fromkeys(_ROLES, "<|im_end|>\n"),
           "generation": "<|im_start|>assistant\n"}
_LLAMA3 = {"prefix": {r: f"<|start_header_id|>{r}<|end_header_id|>\n\n" for r in _ROLES}, "suffix": dict.fromkeys(_ROLES, "<|eot_id|>"),
           "generation": "<|start_header_id|>assistant<|end_header_id|>\n\n"}


def _render(tokenizer: Any, roles: tuple[str, ...], generation: bool) -> str | None:
    messages = [{"role": r, "content": _MARK[r]} for r in roles]
    try:
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation))
    except Exception:  # noqa: BLE001 - a template may raise on any layout it does not accept (e.g. no system role)
        return None


def _derived_layout(tokenizer: Any, head: str) -> dict[str, Any] | None:
    """Per-role prefix/suffix and the generation prompt read off single-message renderings, given the text the
    template writes before any message (`head`, e.g. a bos token)."""
    layout: dict[str, Any] = {"head": head, "implicit": "", "prefix": {}, "suffix": {}}
    for role in _ROLES:
        text = _render(tokenizer, (role,), False)
        if text is None or not text.startswith(head) or text.count(_MARK[role]) != 1:
            if role == "system":
                continue  # a template without a system role: conversations with one are not checked
            return None
        before, after = text[len(head):].split(_MARK[role])
        layout["prefix"][role], layout["suffix"][role] = before, after
    plain, gen = _render(tokenizer, ("user",), False), _render(tokenizer, ("user",), True)
    if plain is None or gen is None or not gen.startswith(plain):
        return None
    layout["generation"] = gen[len(plain):]
    return layout


def _head_candidates(tokenizer: Any) -> list[str]:
    """What a template may write before the first message: its rendering of no messages (when it accepts none),
    nothing, or the text a user turn and an assistant turn start with alike (a bos token); the check decides."""
    import os

    singles = [t for t in (_render(tokenizer, ("user",), False), _render(tokenizer, ("assistant",), False)) if t is not None]
    heads = [_render(tokenizer, (), False), "", os.path.commonprefix(singles) if len(singles) == 2 else None]
    return list(dict.fromkeys(h for h in heads if h is not None))


def _known_layouts(tokenizer: Any, known: dict[str, Any]) -> list[dict[str, Any]]:
    """A fixed user/assistant layout (ChatML, Llama 3) with what the template adds before a conversation (a bos token,
    a default system turn: Qwen2.5's prompt, Llama 3.1's knowledge-date preamble) and the system prefix read off a
    rendering with a system message; one candidate per possible head (the bos token or nothing)."""
    prefix, suffix = known["prefix"], known["suffix"]
    without = _render(tokenizer, ("user",), False)
    user_block = prefix["user"] + _MARK["user"] + suffix["user"]
    if without is None or not without.endswith(user_block):
        return []
    before_user = without[: -len(user_block)]  # head + the implicit text
    with_system = _render(tokenizer, ("system",), False)
    out = []
    for head in dict.fromkeys([getattr(tokenizer, "bos_token", None) or "", ""]):
        if not before_user.startswith(head):
            continue
        layout = {"head": head, "implicit": before_user[len(head):], "prefix": {r: prefix[r] for r in ("user", "assistant")},
                  "suffix": dict(suffix), "generation": known["generation"]}
        if with_system is not None and with_system.startswith(head) and with_system.count(_MARK["system"]) == 1:
            before, after = with_system[len(head):].split(_MARK["system"])
            if after == suffix["system"]:
                layout["prefix"]["system"] = before
        out.append(layout)
    return out


def _python_render(layout: dict[str, Any], roles: tuple[str, ...]) -> str:
    """What the Go template below produces for these roles (the same layout, written out in Python)."""
    text = layout["head"] + (layout["implicit"] if roles and roles[0] != "system" else "")
    text += "".join(layout["prefix"][r] + _MARK[r] + layout["suffix"][r] for r in roles)
    return text + layout["generation"]


def _agrees(tokenizer: Any, layout: dict[str, Any]) -> bool:
    checked = 0
    for roles in _CHECKS:
        if any(r not in layout["prefix"] for r in roles):
            continue
        expected = _render(tokenizer, roles, True)
        if expected is None:
            continue
        if expected != _python_render(layout, roles):
            return False
        checked += 1
    return checked >= 2


def chat_layout(tokenizer: Any) -> dict[str, Any] | None:
    """The template's layout (head, implicit system text, per-role prefix/suffix, generation prompt) when it could be
    derived and checked against the Jinja template on whole conversations; None otherwise."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    candidates = [_derived_layout(tokenizer, head) for head in _head_candidates(tokenizer)]
    candidates += _known_layouts(tokenizer, _CHATML) + _known_layouts(tokenizer, _LLAMA3)
    for candidate in candidates:
        if candidate is not None and _agrees(tokenizer, candidate):
            return candidate
    return None


def _go_literal(text: str) -> str:
    # "{{" would open an action inside literal text; print it from a string constant instead
    return text.replace("{{", '{{ "{{" }}')


def go_template(layout: dict[str, Any]) -> str:
    """Ollama's TEMPLATE for a layout: a range over .Messages, on one line of actions so that no whitespace is trimmed
    from the literal text (a trailing newline of a turn is part of the format)."""
    lit = _go_literal
    out = lit(layout["head"])
    if layout["implicit"]:
        out += '{{ if or (not .Messages) (ne (index .Messages 0).Role "system") }}' + lit(layout["implicit"]) + "{{ end }}"
    branches = [f'{"if" if i == 0 else "else if"} eq .Role "{role}" }}}}{lit(layout["prefix"][role])}{{{{ .Content }}}}{lit(layout["suffix"][role])}'
                for i, role in enumerate(r for r in _ROLES if r in layout["prefix"])]
    out += "{{ range .Messages }}" + "".join("{{ " + b for b in branches) + "{{ end }}{{ end }}"
    return out + lit(layout["generation"])


def ollama_parameters(preset: str) -> list[tuple[str, Any]]:
    """(name, value) PARAMETER lines for a decoding preset of presets/generation.yaml, in Ollama's names."""
    from ..inference.presets import apply_preset

    s = apply_preset(preset)
    params: list[tuple[str, Any]] = [("temperature", 0 if not s.do_sample else s.temperature)]
    if s.do_sample:
        params += [("top_k", s.top_k), ("top_p", s.top_p), ("min_p", s.min_p)]
    params += [("repeat_penalty", s.repetition_penalty), ("num_predict", s.max_new_tokens)]
    return params


def modelfile_text(gguf_name: str, tokenizer: Any, stops: list[str], preset: str, context_length: int, *, adds_bos: bool = False) -> tuple[str, bool]:
    """(the Modelfile, whether it has a checked TEMPLATE). gguf_name: the file beside it; stops: end tokens; adds_bos: the
    GGUF says to add the bos token to every prompt (llama.cpp then adds it, so the template must not write it too)."""
    if '"' in "".join(stops):
        raise EngineError(key="visitor_error.modelfile_quote")
    lines = ["# Ollama Modelfile written by Compact LLM Lab. Use it with:", "#   ollama create my-model -f Modelfile && ollama run my-model",
             "", f"FROM ./{gguf_name}", ""]
    layout = chat_layout(tokenizer)
    bos = getattr(tokenizer, "bos_token", None)
    if layout and adds_bos and bos and layout["head"].startswith(bos):
        layout["head"] = layout["head"][len(bos):]  # a second bos would change what the model sees
    template = go_template(layout) if layout else None
    if template and '"""' not in template:
        lines += ["# The chat template, translated from the model's Jinja template and checked against it.", f'TEMPLATE """{template}"""', ""]
    else:
        template = None
        lines += ["# No TEMPLATE: the model's chat template could not be translated to Ollama's Go template exactly, so Ollama",
                  "# uses its own guess from the template stored in the GGUF file. Check the first answers.", ""]
    lines += [f'PARAMETER stop "{s}"' for s in stops]
    lines += [f"PARAMETER {k} {v}" for k, v in ollama_parameters(preset)]
    lines.append(f"PARAMETER num_ctx {int(context_length)}")
    return "\n".join(lines) + "\n", template is not None
