"""Form widgets generated from the config dataclasses (engine/fields.py): typed, bounded, labelled from the language files,
and refusing a wrong API value with a message that names the field."""

from __future__ import annotations

from typing import Any

import gradio as gr

from engine import i18n
from engine.errors import ConfigError
from engine.fields import decimal_text, field_specs
from ui.language import T, error, lang_of


def named(comp: gr.components.Component, field: str, owner: str | None = None) -> gr.components.Component:
    """A gr.Number, gr.Slider, gr.Dropdown or gr.CheckboxGroup whose wrong API values (text for a number, a value outside the choices...)
    are refused with a message naming the field (by its label too when `owner`, the form's dataclass, has one) and what
    is allowed, in the visitor's language; gradio's own says only "input component at index N" or "Value: X is not in
    the list of choices". (The instance's preprocess is wrapped: a subclass of a gradio component would make gradio
    write a .pyi stub beside this file.)"""
    original = comp.preprocess
    if isinstance(comp, (gr.Dropdown, gr.CheckboxGroup)):
        allowed = {"allowed": "choices", "choices": [c[1] if isinstance(c, tuple) else c for c in (comp.choices or [])]}
    elif isinstance(comp, gr.Slider):
        allowed = {"allowed": "range", "min": comp.minimum, "max": comp.maximum}
    else:
        allowed = {"allowed": "whole_number" if getattr(comp, "precision", None) == 0 else "number"}

    def preprocess(payload: Any) -> Any:
        try:
            return original(payload)
        except (TypeError, ValueError, OverflowError, gr.Error):
            raise error(ConfigError.of(field, payload, owner=owner, **allowed).render(lang_of())) from None

    comp.preprocess = preprocess
    return comp


def decimal_box(comp: gr.Textbox) -> gr.Textbox:
    """A float field as text: a number set without the visitor's language is written as plain decimals (2e-05 ->
    0.00002); handlers write it in the visitor's notation with `form_update`. What a person types goes to the dataclass as
    typed (a decimal comma or point). (The instance's postprocess is wrapped, as `named` wraps preprocess.)"""
    original = comp.postprocess

    def postprocess(value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = decimal_text(value)
        return original(value)

    comp.postprocess = postprocess
    return comp


def form_update(comp: gr.components.Component, value: Any) -> Any:
    """gr.update(value=...) for a form widget, in the visitor's notation: a number for a decimal text field (decimal_box)
    is written as that visitor reads and types numbers (0,0002 on the Portuguese page). Call it inside a handler."""
    if isinstance(comp, gr.Textbox) and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = decimal_text(value, lang_of())
    return gr.update(value=value)


def choice_list(cls: type, name: str, values: tuple[str, ...] | list[str]) -> list[Any]:
    """A field's choices as the dropdown shows them: (name in the visitor's language, value) where the language files name
    a value (`text.choice.<Class>.<field>.<value>`: "full fine-tuning" for full), the value itself where it is a technical
    name read the same in every language (adamw-8bit, nf4, bf16)."""
    known = i18n.strings(i18n.DEFAULT)
    return [(T(key), v) if (key := f"text.choice.{cls.__name__}.{name}.{v}") in known else v for v in values]


def make_inputs(cls: type, *, only: list[str] | None = None, skip: tuple[str, ...] = (), values: dict[str, Any] | None = None,
                suggest: dict[str, list[str]] | None = None) -> dict[str, gr.components.Component]:
    """One typed, bounded widget per dataclass field (dotted names for nested fields). `suggest`: text fields shown as a
    dropdown of suggestions that still accepts any typed value (e.g. model references)."""
    values, suggest = values or {}, suggest or {}
    comps: dict[str, gr.components.Component] = {}
    specs = {s.name: s for s in field_specs(cls)}
    for name in only or list(specs):
        if name in skip:
            continue
        spec = specs[name]
        value = values.get(name, spec.default)
        key = f"field.{cls.__name__}.{name}"
        common = {"label": T(f"{key}.label"), "info": T(f"{key}.help"), "value": value, "elem_id": f"{cls.__name__}-{name}".replace(".", "-")}
        if name in suggest:
            comps[name] = gr.Dropdown(choices=suggest[name], allow_custom_value=True, **common)
        elif spec.type is bool:
            comps[name] = gr.Checkbox(**common)
        elif spec.choices:
            comps[name] = named(gr.Dropdown(choices=choice_list(cls, name, spec.choices), **common), name, cls.__name__)
        elif spec.type in (int, float) and spec.min is not None and spec.max is not None and spec.step and (spec.max - spec.min) / spec.step <= 5000:
            comps[name] = named(gr.Slider(minimum=spec.min, maximum=spec.max, step=spec.step, **common), name, cls.__name__)
        elif spec.type is float:
            # Text, not a browser number box (which read "0,0005" as 5): a decimal comma or point both parse (engine/fields.py
            # parse_decimal), and the value is written back in the visitor's notation; the dataclass validates, naming the field.
            comps[name] = decimal_box(gr.Textbox(**{**common, "value": decimal_text(value)}, max_lines=1))
        elif spec.type is int:
            # No gradio-side bounds: the dataclass validates, with a message that names the field.
            comps[name] = named(gr.Number(precision=0, **common), name, cls.__name__)
        else:
            comps[name] = gr.Textbox(**common)
    return comps
