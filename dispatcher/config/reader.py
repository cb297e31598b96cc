"""Typed, validating access to one mapping of the config file.

A ``Reader`` remembers which keys were read: ``done()`` makes any other key an error that
names the file and the key, as every type or value error does (``ConfigError``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = ["ConfigError", "Reader", "config_path"]


class ConfigError(ValueError):
    """The configuration is invalid; the message names the file and the key."""


class Reader:
    """Typed access to one mapping, remembering which keys were read (the rest are errors)."""

    def __init__(self, data: Any, *, path: str, source: str) -> None:
        self.source = source
        self.path = path
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise self.error("", f"must be a mapping, got {type(data).__name__}")
        self.data = data
        self.used: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def error(self, name: str, problem: str) -> ConfigError:
        where = self.key(name) if name else (self.path or "(top level)")
        return ConfigError(f"{self.source}: {where}: {problem}")

    def get(self, name: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self.used.add(name)
        value = self.data.get(name, default)
        if value is None:
            return default
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in kinds:
            raise self.error(name, f"must be {_names(kinds)}, got a boolean")
        if not isinstance(value, kinds):
            raise self.error(name, f"must be {_names(kinds)}, got {type(value).__name__} "
                                   f"{value!r}")
        return value

    def number(self, name: str, default: float, *, minimum: float = 0.0,
               strict: bool = False) -> float:
        value = float(self.get(name, (int, float), default))
        if value < minimum or (strict and value == minimum):
            raise self.error(name, f"must be {'>' if strict else '>='} {minimum:g}, "
                                   f"got {value:g}")
        return value

    def integer(self, name: str, default: int, *, minimum: int = 0) -> int:
        value = int(self.get(name, int, default))
        if value < minimum:
            raise self.error(name, f"must be >= {minimum}, got {value}")
        return value

    def choice(self, name: str, default: str, choices: Sequence[str]) -> str:
        value = str(self.get(name, str, default))
        if value not in choices:
            raise self.error(name, f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        value = self.get(name, list, [])
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.error(f"{name}[{i}]", f"must be a string, got {item!r}")
        return tuple(value)

    def string_map(self, name: str) -> Mapping[str, str]:
        value = self.get(name, dict, {})
        out = {}
        for k, v in value.items():
            if not isinstance(v, (str, int, float, bool)) or isinstance(v, bool):
                raise self.error(f"{name}.{k}", f"must be a string, got {v!r}")
            out[str(k)] = str(v)
        return MappingProxyType(out)

    def section(self, name: str) -> Reader:
        self.used.add(name)
        return Reader(self.data.get(name), path=self.key(name), source=self.source)

    def done(self) -> None:
        unknown = sorted(str(k) for k in self.data if k not in self.used)
        if unknown:
            known = ", ".join(sorted(self.used))
            raise self.error(unknown[0], f"unknown key (known here: {known})")


def _names(kinds: tuple[type, ...]) -> str:
    names = {int: "a number", float: "a number", str: "a string", bool: "true or false",
             list: "a list", dict: "a mapping"}
    return " or ".join(sorted({names.get(k, k.__name__) for k in kinds}))


def config_path(value: str | None, base: Path) -> str | None:
    if not value:
        return None
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else (base / path))
