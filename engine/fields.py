"""Field machinery for the config dataclasses: metadata, introspection, coercion and validation.

Every job dataclass in engine/config.py declares its fields with `opt` (help text, bounds, label in the
field's `metadata`, once; `Literal` annotations give the allowed choices). This module reads them back:
`field_specs` describes the fields to the UI form (app.py) and the CLI flags (engine/cli.py), `from_dict` /
`from_flat` / `to_dict` build and dump configs (the saved run `config.yaml`, form values, CLI flags), and
`validate` checks ranges and choices for every `__post_init__`. Errors are `ConfigError`s naming the field,
the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args, get_origin

from .errors import ConfigError

T = TypeVar("T")


def opt(
    default: Any,
    help: str,
    *,
    min: float | None = None,
    max: float | None = None,
    step: float | None = None,
    label: str | None = None,
    choices_help: dict[str, str] | None = None,
) -> Any:
    """A dataclass field with its help text and bounds in metadata (read by the UI and the CLI)."""
    meta: dict[str, Any] = {"help": help}
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


def _resolve_hints(cls: type) -> dict[str, Any]:
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
            )
        )
    return specs


def to_dict(obj: Any) -> dict[str, Any]:
    """Plain nested dict of a config dataclass (for YAML/JSON)."""
    return dataclasses.asdict(obj)


def _coerce(name: str, value: Any, tp: Any) -> Any:
    py, choices, optional = _base_type(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(name, value, "a value is required")
    if py is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on", "false", "no", "0", "off"):
            return value.lower() in ("true", "yes", "1", "on")
        if isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        raise ConfigError(name, value, "true or false")
    if py is int:
        if isinstance(value, bool):
            raise ConfigError(name, value, "a whole number")
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ConfigError(name, value, "a whole number")
    if py is float:
        if isinstance(value, bool):
            raise ConfigError(name, value, "a number")
        try:
            out = float(value)
        except (TypeError, ValueError):
            raise ConfigError(name, value, "a number") from None
        if math.isnan(out) or math.isinf(out):
            raise ConfigError(name, value, "a finite number")
        return out
    if py is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(name, value, "text")
        value = str(value)
        if choices and value not in choices:
            raise ConfigError(name, value, "one of " + ", ".join(choices))
        return value
    return value


def from_dict(cls: type[T], data: dict[str, Any] | None, *, where: str = "") -> T:
    """Build and validate a config dataclass from a plain dict; unknown keys are an error."""
    data = dict(data or {})
    if not isinstance(data, dict):
        raise ConfigError(where or cls.__name__, data, "a mapping of field names to values")
    hints = _resolve_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}{unknown[0]}", data[unknown[0]], f"a known field of {cls.__name__}: " + ", ".join(sorted(names)))
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
                    raise ConfigError(f"{where}{f.name}", value, "a mapping of field names to values")
                kwargs[f.name] = from_dict(tp, value, where=f"{where}{f.name}.")
        else:
            kwargs[f.name] = _coerce(f"{where}{f.name}", value, tp)
    return cls(**kwargs)


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
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            raise ConfigError(f.name, value, "a finite number")
        lo, hi = f.metadata.get("min"), f.metadata.get("max")
        if lo is not None and value < lo:
            raise ConfigError(f.name, value, f"a value >= {lo}" + (f" and <= {hi}" if hi is not None else ""))
        if hi is not None and value > hi:
            raise ConfigError(f.name, value, f"a value <= {hi}" + (f" and >= {lo}" if lo is not None else ""))


def _check_choices(obj: Any) -> None:
    hints = _resolve_hints(type(obj))
    for f in dataclasses.fields(obj):
        _, choices, optional = _base_type(hints[f.name])
        value = getattr(obj, f.name)
        if choices and not (value is None and optional) and str(value) not in choices:
            raise ConfigError(f.name, value, "one of " + ", ".join(choices))


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
