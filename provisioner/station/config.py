"""Station configuration (``station.yaml``): where things are on this particular station.

Everything the station code touches outside itself is configured here, never guessed: the
sysfs root, the qdl executable, slot names, serial consoles, the records database and where
the console password comes from (an environment variable name or a file - the password
itself never appears in the config, a log or a record).

Example ``station.yaml`` (relative paths are relative to the file)::

    sysfs_root: /sys
    qdl: /opt/qdl-2.5/bin/qdl          # or a name on PATH; >= 2.1 for --serial
    database: /var/lib/edge-llm/station.db
    log_dir: /var/log/edge-llm-station
    slots:                             # USB port path -> slot name (or {name, board, console})
      "1-4.1": slot 1
      "1-4.2": {name: slot 2, board: iq-9075-evk, console: /dev/ttyUSB1}
    consoles:                          # slot name, port path or board serial -> tty
      slot 1: /dev/ttyUSB0
    credential: {env: PROVISIONER_CONSOLE_PASSWORD}   # or {file: /etc/edge-llm/console.pw}
    addresses:                         # board serial -> host[:port] for the exported inventory
      0AA94EFD: 10.20.0.11:22
    records: postgresql://station@db.line1:5432/records   # optional central history (provisioner.station.central)
    records_password_file: /etc/edge-llm/records.pw          # or records_password_env: VAR (default PGPASSWORD)
    station: line1-bench-a                                   # this station's name there (default: host name)
    baseline: true                     # after --boot-check, one smoke inference per board (its factory baseline);
                                       # or a mapping of ansible_* settings for reaching boards over SSH, e.g.
                                       # {ansible_ssh_private_key_file: /etc/edge-llm/station_key}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provisioner.errors import StationError
from provisioner.station.central import KEYS as CENTRAL_KEYS
from provisioner.station.central import CentralSettings, parse_settings
from provisioner.station.secret_file import read_secret_file

DEFAULT_CONFIG = Path("station.yaml")
DEFAULT_PASSWORD_ENV = "PROVISIONER_CONSOLE_PASSWORD"
_KEYS = {"sysfs_root", "qdl", "slots", "consoles", "database", "credential", "log_dir", "boards", "baudrate",
         "addresses", "baseline", *CENTRAL_KEYS}


@dataclass
class Credential:
    """Where the console root password comes from. ``secret()`` reads it only when needed."""

    env: str | None = DEFAULT_PASSWORD_ENV
    file: Path | None = None
    user: str = "root"

    def secret(self, env: Mapping[str, str]) -> str | None:
        """The password, or None if no source holds one. Never logged by callers.

        ``env`` is the run's environment (:mod:`provisioner.context`); the variable is read when
        the console needs it, so the secret is never copied into settings or a child's environment.
        """
        if self.file is not None:
            return read_secret_file(self.file, "console password file", "fix credential.file in station.yaml")
        if self.env:
            return env.get(self.env)
        return None

    def describe(self) -> str:
        """Where the secret comes from, for messages (never the secret itself)."""
        if self.file is not None:
            return f"file {self.file}"
        return f"environment variable {self.env}"


@dataclass
class StationConfig:
    """Resolved station settings (paths absolute relative to the config file)."""

    sysfs_root: Path = Path("/sys")
    qdl: str = "qdl"
    slots: dict[str, str] = field(default_factory=dict)      # USB port path -> slot name
    boards: dict[str, str] = field(default_factory=dict)     # USB port path -> board id wired there
    consoles: dict[str, str] = field(default_factory=dict)   # slot (name or port path) or serial -> tty
    database: Path = Path("station.db")
    log_dir: Path = Path("station-logs")
    credential: Credential = field(default_factory=Credential)
    baudrate: int = 115200
    addresses: dict[str, str] = field(default_factory=dict)  # board serial -> host:port
    central: CentralSettings | None = None           # the PostgreSQL history, when configured
    baseline: bool = False                           # measure each board's factory baseline after the boot check
    baseline_connection: dict[str, Any] = field(default_factory=dict)   # ansible_* settings to reach boards
    source: Path | None = None

    def slot_name(self, port: str) -> str:
        return self.slots.get(port, port)

    def console_for(self, serial: str | None, port: str | None) -> str | None:
        """The console tty of a board, looked up by serial, port path or slot name."""
        for key in (serial, port, self.slots.get(port or "")):
            if key and key in self.consoles:
                return self.consoles[key]
        return None


def _path(base: Path, value: Any) -> Path:
    p = Path(str(value)).expanduser()
    return p if p.is_absolute() else (base / p)


def load_config(path: Path | str | None = None) -> StationConfig:
    """Read ``path`` (or ``./station.yaml`` if present; defaults otherwise)."""
    if path is None:
        if not DEFAULT_CONFIG.is_file():
            return StationConfig()
        path = DEFAULT_CONFIG
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise StationError(f"station config {path} not found", "create it or drop --config") from None
    except (OSError, yaml.YAMLError) as exc:
        raise StationError(f"station config {path} is not valid YAML ({exc})".replace("\n", " "),
                           "fix the file") from None
    if not isinstance(data, dict):
        raise StationError(f"station config {path} must be a mapping", "see `provisioner station --help`")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise StationError(f"station config {path}: unknown key(s) {', '.join(unknown)}",
                           f"allowed: {', '.join(sorted(_KEYS))}")
    base = path.resolve().parent
    cfg = StationConfig(source=path)
    if "sysfs_root" in data:
        cfg.sysfs_root = _path(base, data["sysfs_root"])
    if "qdl" in data:
        q = str(data["qdl"])
        cfg.qdl = str(_path(base, q)) if "/" in q else q
    for key, value in (data.get("slots") or {}).items():
        if isinstance(value, dict):
            cfg.slots[str(key)] = str(value.get("name", key))
            if value.get("board"):
                cfg.boards[str(key)] = str(value["board"])
            if value.get("console"):
                cfg.consoles[str(key)] = str(value["console"])
        else:
            cfg.slots[str(key)] = str(value)
    cfg.consoles.update({str(k): str(v) for k, v in (data.get("consoles") or {}).items()})
    cfg.addresses.update({str(k).upper(): str(v) for k, v in (data.get("addresses") or {}).items()})
    if "database" in data:
        cfg.database = _path(base, data["database"])
    else:
        cfg.database = base / "station.db"
    cfg.log_dir = _path(base, data.get("log_dir", "station-logs"))
    cred = data.get("credential")
    if cred is not None:
        if not isinstance(cred, dict) or not ({"env", "file"} & set(cred)):
            raise StationError(f"station config {path}: credential must be {{env: VAR}} or {{file: PATH}}",
                               "never put the password itself in station.yaml")
        if "password" in cred:
            raise StationError(f"station config {path}: credential.password is not allowed",
                               "put the password in an environment variable or a file")
        cfg.credential = Credential(env=cred.get("env"), file=_path(base, cred["file"]) if cred.get("file") else None,
                                    user=str(cred.get("user", "root")))
    if "baudrate" in data:
        cfg.baudrate = int(data["baudrate"])
    cfg.central = parse_settings(data, base, path)
    _baseline(cfg, data.get("baseline"), path)
    return cfg


def _baseline(cfg: StationConfig, value: Any, path: Path) -> None:  # noqa: ANN401 - a YAML value
    """``baseline: true|false`` or a mapping of ``ansible_*`` connection settings (which turns it on)."""
    if value is None or isinstance(value, bool):
        cfg.baseline = bool(value)
        return
    if not isinstance(value, dict) or not all(str(k).startswith("ansible_") for k in value):
        raise StationError(f"station config {path}: baseline must be true, false or a mapping of ansible_* "
                           "settings", "e.g. baseline: {ansible_ssh_private_key_file: /etc/edge-llm/station_key}")
    if any("pass" in str(k) for k in value):
        raise StationError(f"station config {path}: baseline must not hold a password",
                           "use an SSH key (ansible_ssh_private_key_file)")
    cfg.baseline = True
    cfg.baseline_connection = {str(k): v for k, v in value.items()}


def load_slots(path: Path | str) -> dict[str, str]:
    """A slots YAML file: ``{port path: slot name}`` (or ``{slots: {...}}``)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise StationError(f"slots file {path} is unreadable ({exc})".replace("\n", " "), "fix the file") from None
    if isinstance(data, dict) and isinstance(data.get("slots"), dict):
        data = data["slots"]
    if not isinstance(data, dict):
        raise StationError(f"slots file {path} must map USB port paths to slot names", 'e.g. "1-4.2": "slot 3"')
    return {str(k): str(v["name"] if isinstance(v, dict) else v) for k, v in data.items()}
