"""Field machinery for the config dataclasses: metadata, introspection, coercion and validation.

Every job dataclass in engine/config.py declares its fields with `opt` (help text, bounds, label in the
field's `metadata`, once; `Literal` annotations give the allowed choices). This module reads them back:
`field_specs` describes the fields to the UI form (ui/) and the CLI flags (engine/cli.py), `from_dict` /
`from_flat` / `to_dict` build and dump configs (the saved run `config.yaml`, form values, CLI flags), and
`validate` checks ranges and choices for every `__post_init__`. Errors are `ConfigError`s naming the field,
the value and what is allowed by language-file keys (`message.allowed.*`), so the UI shows them in the visitor's
language. `settings_markdown` writes docs/settings.md from the same metadata: the plain help with the expert detail.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args, get_origin

from .errors import ConfigError, for_people

T = TypeVar("T")


def opt(
    default: Any,
    help: str,
    *,
    min: float | None = None,
    max: float | None = None,
    step: float | None = None,
    label: str | None = None,
    details: str | None = None,
    choices_help: dict[str, str] | None = None,
) -> Any:
    """A dataclass field with its help text and bounds in metadata (read by the UI and the CLI).

    `help`: one short sentence in plain words (what it does, when to change it), shown under the field in the form and
    translated in presets/lang/pt-BR.yaml. `details` and `choices_help` (one line per choice): the expert detail, written
    to docs/settings.md (`settings_markdown`)."""
    meta: dict[str, Any] = {"help": help}
    if details is not None:
        meta["details"] = details
    if min is not None:
        meta["min"] = min
    if max is not None:
        meta["max"] = max
    if step is not None:
        meta["step"] = step
    if label is not None:
        meta["label"] = label
    if choices_help:
        meta["choices_help"] = choices_help
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    if dataclasses.is_dataclass(default):
        return field(default_factory=lambda: dataclasses.replace(default), metadata=meta)
    return field(default=default, metadata=meta)


# --------------------------------------------------------------------------------------------------
# Introspection shared by the UI, the CLI and the YAML round trip
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldSpec:
    """What a form or a CLI needs to know about one (possibly nested) config field."""

    name: str  # dotted path for nested dataclasses, e.g. "lora.r"
    type: type  # bool, int, float, str
    default: Any
    help: str
    label: str
    choices: tuple[str, ...] | None = None
    min: float | None = None
    max: float | None = None
    step: float | None = None
    optional: bool = False  # None allowed
    details: str = ""  # the expert detail (docs/settings.md)
    choices_help: tuple[tuple[str, str], ...] = ()  # (choice, what it does), in docs/settings.md


@functools.cache
def _resolve_hints(cls: type) -> dict[str, Any]:
    # cached: a dataclass's annotations never change, and resolving them (typing.get_type_hints) took 2 ms per
    # MemoryQuery built, most of the estimator's capacity searches (make_it_fit builds hundreds)
    return typing.get_type_hints(cls)


def _base_type(tp: Any) -> tuple[type, tuple[str, ...] | None, bool]:
    """(python type, Literal choices or None, optional?) of an annotation."""
    optional = False
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        optional = len(args) != len(get_args(tp))
        tp = args[0] if len(args) == 1 else str
        origin = get_origin(tp)
    if origin is Literal:
        choices = tuple(str(a) for a in get_args(tp))
        return type(get_args(tp)[0]), choices, optional
    if isinstance(tp, type):
        return tp, None, optional
    return str, None, optional


def field_specs(cls: type, prefix: str = "") -> list[FieldSpec]:
    """Flattened field descriptions of a config dataclass (nested dataclasses get dotted names)."""
    hints = _resolve_hints(cls)
    specs: list[FieldSpec] = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            specs.extend(field_specs(tp, prefix=f"{prefix}{f.name}."))
            continue
        py, choices, optional = _base_type(tp)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        name = f"{prefix}{f.name}"
        specs.append(
            FieldSpec(
                name=name,
                type=py,
                default=default,
                help=f.metadata.get("help", ""),
                label=f.metadata.get("label", f.name.replace("_", " ").capitalize()),
                choices=choices,
                min=f.metadata.get("min"),
                max=f.metadata.get("max"),
                step=f.metadata.get("step"),
                optional=optional,
                details=f.metadata.get("details", ""),
                choices_help=tuple(f.metadata.get("choices_help", {}).items()),
            )
        )
    return specs


def to_dict(obj: Any) -> dict[str, Any]:
    """Plain nested dict of a config dataclass (for YAML/JSON)."""
    return dataclasses.asdict(obj)


def parse_decimal(text: str) -> float:
    """A decimal number as people type it, in either notation: 0.0005, 0,0005 (a decimal comma, as the Portuguese page
    prints it), 5e-4, 1.000,5 or 1,000.5 (the later separator is the decimal one). ValueError for anything else."""
    s = text.strip().replace(" ", "").replace("\u00a0", "").replace("\u2212", "-")
    if "," in s and "." in s:
        s = s.replace(".", "").replace(",", ".") if s.rfind(",") > s.rfind(".") else s.replace(",", "")
    elif s.count(",") == 1:
        s = s.replace(",", ".")
    return float(s)


def decimal_text(value: float, lang: str = "en") -> str:
    """A float field's value as a person reads and types it back (parse_decimal): plain decimals, never scientific
    notation or thousands separators (2e-05 -> 0.00002), a decimal comma in Portuguese (0,00002)."""
    x = float(value)
    if not math.isfinite(x):
        return str(x)
    text = f"{x:.12f}".rstrip("0").rstrip(".") if x != int(x) or abs(x) >= 1e15 else str(int(x))
    return text.replace(".", ",") if lang.lower().startswith("pt") else text


def _coerce(name: str, value: Any, tp: Any, owner: str | None = None) -> Any:
    py, choices, optional = _base_type(tp)

    def refuse(allowed: str, **params: Any) -> ConfigError:
        return ConfigError.of(name, value, allowed, owner, **params)

    if py is float and isinstance(value, str) and not value.strip():
        value = None  # an emptied decimal field (text on the page): as gradio hands over an unreadable number
    if value is None:
        if optional:
            return None
        # gradio hands a number field it cannot read ("abc") over as None: say what the field needs, not "None"
        raise refuse({int: "whole_number", float: "number", bool: "bool"}.get(py, "required"))
    if py is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on", "false", "no", "0", "off"):
            return value.lower() in ("true", "yes", "1", "on")
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        raise refuse("bool")
    if py is int:
        if isinstance(value, bool):
            raise refuse("whole_number")
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise refuse("whole_number")
    if py is float:
        if isinstance(value, bool):
            raise refuse("number")
        try:
            out = parse_decimal(value) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            raise refuse("number") from None
        if math.isnan(out) or math.isinf(out):
            raise refuse("finite")
        return out
    if py is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise refuse("text")
        value = str(value)
        if choices and value not in choices:
            raise refuse("choices", choices=list(choices))
        return value
    return value


def from_dict(cls: type[T], data: dict[str, Any] | None, *, where: str = "", owner: str | None = None) -> T:
    """Build and validate a config dataclass from a plain dict; unknown keys are an error.

    `where` / `owner`: for a nested dataclass, its dotted prefix ("lora.") and the enclosing form's class name, so that
    an error names the field as the form knows it (`lora.r`, labelled in the visitor's language)."""
    data = dict(data or {})
    if not isinstance(data, dict):
        raise ConfigError(where or cls.__name__, data, allowed_key="message.allowed.mapping")
    owner = owner or cls.__name__
    hints = _resolve_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}{unknown[0]}", data[unknown[0]], allowed_key="message.allowed.known_field", form=cls.__name__,
                          names=sorted(names))
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        tp = hints[f.name]
        value = data[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            if isinstance(value, tp):
                kwargs[f.name] = value
            else:
                if not isinstance(value, dict):
                    raise ConfigError(f"{where}{f.name}", value, allowed_key="message.allowed.mapping")
                kwargs[f.name] = from_dict(tp, value, where=f"{where}{f.name}.", owner=owner)
        else:
            kwargs[f.name] = _coerce(f"{where}{f.name}", value, tp, owner)
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        # A nested class checks its fields by their own names (`r` of LoraSettings), and helpers (engine/refs.py) know no
        # form: name the field as the enclosing form does (`lora.r` of TrainConfig), so that the UI shows its label.
        local = exc.field in names
        name = where + exc.field if local else exc.field
        if type(exc) is not ConfigError or not (local or name.startswith(where)) or (name, owner) == (exc.field, exc.owner):
            raise
        raise exc.renamed(name, owner) from None


def from_flat(cls: type[T], flat: dict[str, Any]) -> T:
    """Build a config from dotted names (as produced by `field_specs`), e.g. from a UI form or CLI."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        cur = nested
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = value
    return from_dict(cls, nested)


def _check_range(obj: Any) -> None:
    """Validate the min/max metadata of every scalar field of a dataclass instance."""
    owner, hints = type(obj).__name__, _resolve_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            raise ConfigError(f.name, value, allowed_key="message.allowed.finite", owner=owner)
        lo, hi = f.metadata.get("min"), f.metadata.get("max")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ConfigError(f.name, value, owner=owner, **allowed_range(lo, hi, whole=_base_type(hints[f.name])[0] is int))


def allowed_range(lo: float | None, hi: float | None, *, whole: bool = False) -> dict[str, Any]:
    """The `allowed_key` and parameters of a ConfigError for a number outside [lo, hi] (either bound may be None)."""
    kind = "whole_" if whole else ""
    if lo is not None and hi is not None:
        return {"allowed_key": f"message.allowed.{kind}range", "min": lo, "max": hi}
    if lo is not None:
        return {"allowed_key": f"message.allowed.{kind}at_least", "min": lo}
    if hi is not None:
        return {"allowed_key": f"message.allowed.{kind}at_most", "max": hi}
    return {"allowed_key": f"message.allowed.{'whole_number' if whole else 'number'}"}


def _check_choices(obj: Any) -> None:
    hints = _resolve_hints(type(obj))
    for f in dataclasses.fields(obj):
        _, choices, optional = _base_type(hints[f.name])
        value = getattr(obj, f.name)
        if choices and not (value is None and optional) and str(value) not in choices:
            raise ConfigError(f.name, value, allowed_key="message.allowed.choices", owner=type(obj).__name__, choices=list(choices))


def validate(obj: Any) -> None:
    """Range + choice validation shared by every config's __post_init__."""
    _check_choices(obj)
    _check_range(obj)


def field_texts(classes: list[type]) -> dict[str, str]:
    """The English label and help of every field of these dataclasses as language-file keys
    (`field.<Class>.<dotted name>.label|help`, engine/i18n.py): the metadata is their single English source."""
    out: dict[str, str] = {}
    for cls in classes:
        for spec in field_specs(cls):
            out[f"field.{cls.__name__}.{spec.name}.label"] = spec.label
            out[f"field.{cls.__name__}.{spec.name}.help"] = spec.help
    return out


# --------------------------------------------------------------------------------------------------
# docs/settings.md: the plain help of every field, with the expert detail behind it
# --------------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _shown(value: Any) -> str:
    """A default as the docs show it: `on`/`off`, `(empty)`, 0.0002 rather than 2e-04."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value in ("", None):
        return "(empty)"
    return "`" + (for_people(value, "en") if isinstance(value, (int, float)) else str(value)).replace("\n", "\\n") + "`"


def _allowed(spec: FieldSpec) -> str:
    """What a field accepts, in words: its choices, its range, or its kind."""
    if spec.choices:
        return ", ".join(f"`{c}`" for c in spec.choices)
    if spec.type is bool:
        return "on / off"
    if spec.type in (int, float):
        kind = "whole number" if spec.type is int else "number"
        if spec.min is not None and spec.max is not None:
            return f"{kind} from {for_people(spec.min, 'en')} to {for_people(spec.max, 'en')}"
        return kind
    return "text"


def settings_markdown(classes: list[type]) -> str:
    """docs/settings.md, generated from the fields' metadata so that it never drifts: per form (a dataclass, introduced by
    its docstring), a table of every field's label, plain help, default and allowed values, then the expert detail."""
    out = [
        "# Settings: every field, in plain words and in detail",
        "",
        "Generated from the fields' metadata in `engine/config.py` by `python -m engine.config > docs/settings.md`",
        "(`tests/test_field_help.py` fails when this file is out of date). The app shows each field's label and its",
        "one-line help (in English or Portuguese, `presets/lang/`); this page adds what each choice does exactly. On the",
        "command line every field is a flag: `max_steps` is `--max-steps`, `lora.r` is `--lora-r`.",
        "",
    ]
    for cls in classes:
        specs = field_specs(cls)
        doc = " ".join((cls.__doc__ or "").split())
        out += [f"## {cls.__name__}", "", doc, "",
                "| Field | Label | What it does | Default | Allowed |", "|---|---|---|---|---|"]
        out += [f"| `{s.name}` | {_cell(s.label)} | {_cell(s.help)} | {_cell(_shown(s.default))} | {_cell(_allowed(s))} |" for s in specs]
        detailed = [s for s in specs if s.details or s.choices_help]
        if detailed:
            out += ["", "In detail:", ""]
        for s in detailed:
            out.append(f"- **`{s.name}`**" + (f": {s.details}" if s.details else ""))
            out += [f"  - `{choice}`: {text}" for choice, text in s.choices_help]
        out.append("")
    return "\n".join(out)
