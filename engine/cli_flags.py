"""Command-line flags generated from the config dataclasses (engine/config.py): one flag per field, its help the
field's help, its choices the field's Literal; values stay strings until the dataclass validates them, so a bad value
gets the same message, naming the field, as on the page. Shared by engine/cli.py and the export commands
(engine/export/cli.py)."""

from __future__ import annotations

import argparse
from typing import Any

from .fields import field_specs


def flag(name: str) -> str:
    """`learning_rate` -> `--learning-rate`; nested fields keep their prefix: `lora.r` -> `--lora-r`."""
    return "--" + name.replace(".", "-").replace("_", "-")


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type, *, prefix: str = "", skip: tuple[str, ...] = ()) -> None:
    """One flag per (nested) field; defaults are None so we can tell "given" from "not given"."""
    group = parser.add_argument_group(f"{cls.__name__} fields")
    for spec in field_specs(cls):
        if spec.name in skip:
            continue
        help_text = (spec.help + f" (default: {spec.default})").replace("%", "%%")  # argparse formats help with %
        kwargs: dict[str, Any] = {"dest": prefix + spec.name, "default": None, "help": help_text}
        if spec.type is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = str  # validated and converted by the dataclass, with a message naming the field
            kwargs["metavar"] = "{" + ",".join(spec.choices) + "}" if spec.choices else spec.type.__name__.upper()
        group.add_argument(flag(prefix + spec.name), **kwargs)


def given_fields(args: argparse.Namespace, cls: type, prefix: str = "") -> dict[str, Any]:
    """The fields of `cls` given on the command line (the flags default to None), by field name."""
    out = {}
    for spec in field_specs(cls):
        value = getattr(args, prefix + spec.name, None)
        if value is not None:
            out[spec.name] = value
    return out


def merge_flat(base: dict[str, Any], flat: dict[str, Any]) -> dict[str, Any]:
    """Dotted flat keys (`lora.r`) written into a nested dict, in place; returns it."""
    for key, value in flat.items():
        cur = base
        parts = key.split(".")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = value
    return base


__all__ = ["add_dataclass_args", "flag", "given_fields", "merge_flat"]
