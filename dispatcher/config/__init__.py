"""The controller's configuration file: one YAML file, validated, with flag overrides.

``load(path, overrides=...)`` reads the file, applies ``key.path=value`` overrides (from
command-line flags), validates every key and returns a ``Config``. Every key has a safe
default (an empty file is valid); unknown keys, wrong types and bad values are errors
that name the file and the key (``config/local.yaml: failover.policy: must be one of
never, if-not-started, always; got 'sometimes'``). Keys are camelCase; durations are
seconds. ``config/default.yaml`` lists every key with its default and what it does.
Relative kubeconfig paths are read relative to the config file; ``~`` is expanded.

Modules: ``reader`` (typed access to one mapping, ``ConfigError``), ``controlkeys`` (the
control loop's sections), ``fleetkeys`` (the ``fleet`` section).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dispatcher.config.controlkeys import control_settings
from dispatcher.config.fleetkeys import fleet_settings
from dispatcher.config.reader import ConfigError, Reader, config_path
from dispatcher.control.settings import HUB_MODES, ControlSettings
from dispatcher.fleet.settings import FleetSettings

__all__ = ["Config", "ConfigError", "load", "parse"]


@dataclass(frozen=True, kw_only=True)
class Config:
    """Everything ``dispatcher run`` needs, validated."""

    source: str
    """Where the configuration came from (file path, or ``<defaults>``)."""
    hub_kubeconfig: str | None = None
    """Kubeconfig of the hub (None: $KUBECONFIG or ~/.kube/config)."""
    hub_context: str | None = None
    """Context in the hub kubeconfig (None: its current-context)."""
    definitions: tuple[str, ...] = ()
    """Extra workload definition files or directories, merged over the built-in catalog."""
    control: ControlSettings = field(default_factory=ControlSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)


def parse(data: Any, *, source: str, base: Path) -> Config:
    """Validate a parsed config document (see the module docstring)."""
    r = Reader(data, path="", source=source)
    hub = r.section("hub")
    hub_kubeconfig = config_path(hub.get("kubeconfig", str, None), base)
    hub_context = hub.get("context", str, None)
    hub_mode = hub.choice("mode", "dedicated", HUB_MODES)
    hub.done()
    definitions = tuple(config_path(p, base) or p for p in r.strings("definitions"))
    control = control_settings(r, hub_mode=hub_mode, base=base)
    fleet = fleet_settings(r.section("fleet"), base)
    r.done()
    return Config(source=source, hub_kubeconfig=hub_kubeconfig, hub_context=hub_context,
                  definitions=definitions, control=control, fleet=fleet)


def apply_override(data: dict[str, Any], assignment: str, *, flag: str = "--set") -> None:
    """Apply ``key.path=value`` (value parsed as YAML) to a raw config document."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"{flag} {assignment!r}: expected KEY.PATH=VALUE")
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    node = data
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{flag} {assignment!r}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def load(path: str | Path | None, *, overrides: Sequence[str] = (),
         edit: Callable[[dict[str, Any]], None] | None = None) -> Config:
    """Read, override and validate; ConfigError names the file and the key."""
    if path is None:
        data: Any = {}
        source, base = "<defaults>", Path.cwd()
    else:
        file = Path(path)
        source, base = str(path), file.resolve().parent
        try:
            data = yaml.safe_load(file.read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{source}:{where}: not valid YAML: "
                              f"{getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: (top level): must be a mapping")
    for assignment in overrides:
        apply_override(data, assignment)
    if edit is not None:
        edit(data)
    return parse(data, source=source, base=base)
