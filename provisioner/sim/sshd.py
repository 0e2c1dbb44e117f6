"""How the controller reaches a virtual board over ssh, and the per-board sshd it reaches.

Separate from the namespace's mounts (:mod:`provisioner.sim.namespace`) and from starting and
stopping a board (:mod:`provisioner.sim.host`) because this part is what the outside sees: the sim
controller key, the ``known_hosts`` file listing every board's host key, the ``ssh`` argv and the
Ansible host variables a fleet run uses, and on the board's side the ``sshd -i`` config, the
socket listener binary and the host key generated at first boot.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from provisioner.contracts import board as on_board
from provisioner.errors import SimError
from provisioner.sim import cstandins, runtime
from provisioner.sim.board import VirtualBoard, list_boards, sim_root, ufs_serial
from provisioner.sim.filelock import locked
from provisioner.sim.namespace import run as _run

SSH_HOST = "127.0.0.1"
SIM_DIR = runtime.SIM_DIR
LISTENER = "sshd-socket"        # the board's socket unit (clib/sshd_socket.c), copied into its host dir


# --------------------------------------------------------------------------- controller key
def ssh_dir(root: str | os.PathLike[str] | None) -> Path:
    return sim_root(root) / "ssh"


def controller_key(root: str | os.PathLike[str] | None) -> Path:
    """The sim controller's private key ``<root>/ssh/id_ed25519`` (generated once, no passphrase)."""
    d = ssh_dir(root)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    key = d / "id_ed25519"
    with locked(d / ".lock"):
        if not key.is_file() or not key.with_suffix(".pub").is_file():
            for p in (key, key.with_suffix(".pub")):
                p.unlink(missing_ok=True)
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "edge-llm-sim-controller", "-f", str(key)])
    return key


def ssh_paths(root: str | os.PathLike[str] | None) -> dict[str, Path]:
    """{"key": controller private key, "known_hosts": file listing every board's host key}."""
    return {"key": controller_key(root), "known_hosts": known_hosts(root)}


def known_hosts(root: str | os.PathLike[str] | None) -> Path:
    return ssh_dir(root) / "known_hosts"


def ssh_argv(board: VirtualBoard, *command: str) -> list[str]:
    """argv that runs ``command`` on ``board`` over real ssh (as the fleet would)."""
    board.reload()
    if not board.ssh:
        raise SimError(f"board {board.serial} has no ssh address (not booted?)", "boot it with `provisioner sim`")
    return ["ssh", "-i", str(controller_key(board.root)), "-p", str(board.ssh["port"]),
            "-o", f"UserKnownHostsFile={known_hosts(board.root)}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR",
            f"root@{board.ssh['host']}", *command]


def inventory_hosts(root: str | os.PathLike[str] | None) -> dict[str, dict[str, Any]]:
    """Ansible host vars for every board with an ssh address, keyed by hostname."""
    out: dict[str, dict[str, Any]] = {}
    key = controller_key(root)
    for b in list_boards(root):
        if not b.ssh:
            continue
        out[b.data.get("hostname") or b.serial.lower()] = {
            "ansible_host": b.ssh["host"], "ansible_port": int(b.ssh["port"]), "ansible_user": "root",
            "ansible_ssh_private_key_file": str(key),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts(root)} -o StrictHostKeyChecking=yes",
            "ansible_python_interpreter": f"{SIM_DIR}/{runtime.PYTHON_LINK}",
            "ansible_pipelining": True,
            "board_serial": b.serial, "board_type": b.board_id,
        }
    return out


def write_inventory(root: str | os.PathLike[str] | None, path: str | os.PathLike[str] | None = None,
                    group: str = "boards") -> Path:
    """Write an Ansible YAML inventory of the booted boards (default ``<root>/ssh/inventory.yml``)."""
    import yaml
    target = Path(path) if path else ssh_dir(root) / "inventory.yml"
    data = {"all": {"children": {group: {"hosts": inventory_hosts(root)}}}}
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=True), encoding="utf-8")
    os.replace(tmp, target)
    return target



#: the host key type a QLI image's sshd gets: oe-core 06dd66e6 openssh_10.3p1.bb sets
#: PACKAGECONFIG ??= "systemd-sshd-socket-mode hostkey-ecdsa", so sshd_config names only the ECDSA key
SIM_HOST_KEY = "etc/ssh/ssh_host_ecdsa_key"


def first_boot_identity(board: VirtualBoard) -> Path:
    """What a real board does at every boot, simulated: sshd_check_keys generates a host key that
    does not exist yet (so the first boot after a flash makes a new one; the image ships none), and
    an image with the edge-llm-identity service gets its console identity lines in /run.
    Returns the host key's path."""
    rootfs = board.rootfs_dir
    key = rootfs / SIM_HOST_KEY
    if not key.is_file():
        key.parent.mkdir(parents=True, exist_ok=True)
        for p in (key, key.with_suffix(".pub")):
            p.unlink(missing_ok=True)
        _run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-C", f"root@{board.serial.lower()}", "-f", str(key)])
    if (rootfs / on_board.IDENTITY_SCRIPT.lstrip("/")).is_file():
        run_file = rootfs / on_board.IDENTITY_RUN_FILE.lstrip("/")
        run_file.parent.mkdir(parents=True, exist_ok=True)
        pub = key.with_suffix(".pub").read_text().split()
        run_file.write_text(f"edge-llm id serial {int(board.serial, 16)}\n"
                            f"edge-llm id ufs-serial {ufs_serial(board)}\n"
                            f"edge-llm id hostkey {pub[0]} {pub[1]}\n\n", encoding="utf-8")
    return key


def install_listener(hd: Path) -> None:
    """Put the compiled socket listener in the board's host dir (visible inside its namespace,
    unlike the build cache under the host's /root); replaced only when the build changed."""
    built = cstandins.program(LISTENER)
    dest = hd / LISTENER
    with contextlib.suppress(OSError):
        if dest.read_bytes() == built.read_bytes():
            return
    tmp = hd / f".{LISTENER}.tmp"
    shutil.copyfile(built, tmp)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dest)


def write_sshd_config(hd: Path, key: Path, rootfs: Path, host_key: Path) -> None:
    """The config each per-connection ``sshd -i`` reads (no Port/ListenAddress: the socket listens)."""
    shutil.copyfile(key.with_suffix(".pub"), hd / "authorized_keys")
    image_keys = rootfs / "root/.ssh/authorized_keys"     # keys baked into the image work too, as on hardware
    os.chmod(hd / "authorized_keys", 0o600)
    (hd / "sshd_config").write_text("\n".join([
        "# sshd -i of one edge-llm virtual board, started per connection by its sshd-socket (provisioner.sim.sshd)",
        f"HostKey {host_key}",
        f"AuthorizedKeysFile {hd / 'authorized_keys'} {image_keys}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "PrintMotd no",
        "PrintLastLog no",
        "PidFile none",
        "MaxSessions 100",
        "AcceptEnv LANG LC_*",
        "Subsystem sftp internal-sftp",
        "LogLevel ERROR",
        "",
    ]), encoding="utf-8")


def add_known_host(root: Path, port: int, key: list[str]) -> None:
    kh = known_hosts(root)
    with locked(ssh_dir(root) / ".lock"):
        lines = []
        with contextlib.suppress(OSError):
            lines = [ln for ln in kh.read_text().splitlines() if not ln.startswith(f"[{SSH_HOST}]:{port} ")]
        lines.append(f"[{SSH_HOST}]:{port} {key[0]} {key[1]}")
        tmp = kh.with_name(".known_hosts.tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, kh)
