"""The production login rule, read from a finished rootfs: can root still log in with a password?

Why a rootfs check and not only variables: QLI's ``qcom-minimal-image.bb`` (meta-qcom-distro
775dc8c7, recipes-products/images/qcom-minimal-image.bb) puts ``allow-root-login`` straight into
``IMAGE_FEATURES`` and sets root's password to the well-known ``oelinux123`` hash through
``EXTRA_USERS_PARAMS``; oe-core's rootfs-postcommands.bbclass (06dd66e6) then rewrites
``PermitRootLogin yes`` into sshd_config (``ssh_allow_root_login``), drops dropbear's ``-w``, and
with ``allow-empty-password`` adds ``PermitEmptyPasswords yes`` / dropbear ``-B``. Any fragment
or image that brings one of these back is caught here, on the files the board will boot with.

Standard library only: bitbake imports this module through ``addpylib`` (conf/layer.conf) and
``edge-llm-image`` calls :func:`problems` as an IMAGE_PREPROCESS_COMMAND.
"""

from __future__ import annotations

import glob
import os
import shlex

# PermitRootLogin values each production policy accepts (sshd_config(5): yes, prohibit-password,
# its old alias without-password, forced-commands-only, no).
ALLOWED_ROOT_LOGIN = {
    "disabled": ("no",),
    "keys-only": ("no", "prohibit-password", "without-password", "forced-commands-only"),
}
# OpenSSH's compiled-in default since 7.0 when no file sets PermitRootLogin.
SSHD_DEFAULT_ROOT_LOGIN = "prohibit-password"
# oe-core's ssh_allow_* edit both (the second one exists on read-only-rootfs images).
SSHD_CONFIGS = ("sshd_config", "sshd_config_readonly")


def password_field_can_log_in(field: str) -> bool:
    """True unless the passwd/shadow password field is locked.

    shadow(5): a field starting with ``!`` is locked, and a value that is not a valid crypt hash
    (``*``) matches no password; crypt(3) and OpenSSH treat both as "no password login".
    An empty field logs in with no password; any hash logs in with its password.
    """
    return not field.startswith(("!", "*"))


def _root_field(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.rstrip("\n").split(":")
            if fields[0] == "root" and len(fields) > 1:
                return fields[1]
    return None


def root_password_problems(rootfs: str, sysconfdir: str = "/etc") -> list[str]:
    """Problems with root's password in /etc/shadow and /etc/passwd (empty list: locked)."""
    out = []
    shadow = _root_field(rootfs + sysconfdir + "/shadow")
    if shadow is not None and password_field_can_log_in(shadow):
        what = "an empty password" if shadow == "" else "a password hash that can log in (e.g. QLI's default)"
        out.append(f"{sysconfdir}/shadow: root has {what}")
    passwd = _root_field(rootfs + sysconfdir + "/passwd")
    # 'x' hands the check to /etc/shadow; anything else in passwd is the password itself.
    if passwd is not None and passwd != "x" and password_field_can_log_in(passwd):
        out.append(f"{sysconfdir}/passwd: root's password field is {passwd!r} (not 'x', not locked)")
    return out


def _sshd_lines(rootfs: str, path: str, conditional: bool, seen: set[str]):
    """(file, line number, keyword, value, inside a Match block) for sshd_config and its Includes.

    sshd_config(5): the first value obtained for a keyword wins, ``Include`` is expanded in
    place (globs sorted, relative paths under /etc/ssh), and lines after ``Match`` apply only to
    matching connections.
    """
    real = rootfs + path
    if real in seen or not os.path.isfile(real):
        return
    seen.add(real)
    with open(real, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    in_match = conditional
    for no, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        key, _, rest = text.replace("=", " ", 1).partition(" ")
        key, value = key.lower(), rest.strip()
        if key == "match":
            in_match = True
            continue
        if key == "include":
            for pattern in shlex.split(value):
                pattern = pattern if pattern.startswith("/") else "/etc/ssh/" + pattern
                for inc in sorted(glob.glob(rootfs + pattern)):
                    yield from _sshd_lines(rootfs, inc[len(rootfs):], in_match, seen)
            continue
        yield path, no, key, value, in_match


def sshd_problems(rootfs: str, policy: str, sysconfdir: str = "/etc") -> list[str]:
    """Problems with OpenSSH's configuration for ``policy`` (none if OpenSSH is not installed)."""
    out = []
    for name in SSHD_CONFIGS:
        main = f"{sysconfdir}/ssh/{name}"
        if not os.path.isfile(rootfs + main):
            continue
        effective = None
        for path, no, key, value, in_match in _sshd_lines(rootfs, main, False, set()):
            value = value.lower()
            if key == "permitrootlogin":
                if value == "yes":
                    out.append(f"{path}:{no}: PermitRootLogin yes")
                if effective is None and not in_match:
                    effective = (value, f"{path}:{no}")
            elif key == "permitemptypasswords" and value == "yes":
                out.append(f"{path}:{no}: PermitEmptyPasswords yes")
        value, where = effective or (SSHD_DEFAULT_ROOT_LOGIN, f"{main} (OpenSSH default)")
        if value not in ALLOWED_ROOT_LOGIN[policy] and value != "yes":
            out.append(f"{where}: PermitRootLogin {value} is in effect, policy {policy} needs "
                       + " or ".join(ALLOWED_ROOT_LOGIN[policy]))
    return out


def _dropbear_flags(rootfs: str, sysconfdir: str) -> set[str]:
    """Single-letter flags of the last DROPBEAR_EXTRA_ARGS= line of /etc/default/dropbear."""
    args = ""
    path = rootfs + sysconfdir + "/default/dropbear"
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.strip().startswith("DROPBEAR_EXTRA_ARGS="):
                    try:
                        args = " ".join(shlex.split(line.strip()[len("DROPBEAR_EXTRA_ARGS="):]))
                    except ValueError:
                        args = line.strip()[len("DROPBEAR_EXTRA_ARGS="):]
    flags = set()
    for tok in args.split():
        if tok.startswith("-") and not tok.startswith("--"):
            flags.update(tok[1:])
    return flags


def dropbear_problems(rootfs: str, policy: str, sysconfdir: str = "/etc", sbindir: str = "/usr/sbin") -> list[str]:
    """Problems with dropbear's arguments (dropbear(8): -w no root logins, -g no root password
    logins, -s no password logins, -B blank passwords allowed); none if dropbear is not installed."""
    if not os.path.exists(rootfs + sbindir + "/dropbear"):
        return []
    flags = _dropbear_flags(rootfs, sysconfdir)
    out = []
    where = f"{sysconfdir}/default/dropbear DROPBEAR_EXTRA_ARGS"
    if "B" in flags:
        out.append(f"{where} has -B (blank passwords allowed)")
    if policy == "disabled" and "w" not in flags:
        out.append(f"{where} lacks -w (root may log in)")
    if policy == "keys-only" and not flags & {"w", "g", "s"}:
        out.append(f"{where} lacks -g (root may log in with a password)")
    return out


# sshd_config(5) AuthorizedKeysFile: the default when no file sets it.
SSHD_DEFAULT_KEYS_FILES = ".ssh/authorized_keys .ssh/authorized_keys2"


def _expand_keys_file(token: str, user: str, home: str) -> str:
    """One AuthorizedKeysFile entry as sshd opens it: %% %u %h expanded (sshd_config(5) TOKENS), a
    relative path taken under the user's home."""
    out, i = [], 0
    while i < len(token):
        if token[i] == "%" and i + 1 < len(token):
            out.append({"%": "%", "u": user, "h": home}.get(token[i + 1], token[i:i + 2]))
            i += 2
        else:
            out.append(token[i])
            i += 1
    path = "".join(out)
    return path if path.startswith("/") else home.rstrip("/") + "/" + path


def _holds_a_key(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return any(line.strip() and not line.lstrip().startswith("#") for line in f)
    except OSError:
        return False


def in_ostree_commit(path: str, sysconfdir: str = "/etc") -> bool:
    """Whether an OSTree deployment still has ``path`` from the image (meta-updater f0e1ccaf
    image_types_ostree.bbclass): /usr is the commit (but /usr/local becomes a link into /var, line 126),
    and /etc is moved to /usr/etc (line 60) and merged into every deployment's /etc; everything else
    (/root, /home, /opt, /var...) is dropped or linked into /var."""
    return ((path.startswith("/usr/") and not path.startswith("/usr/local/"))
            or path.startswith(sysconfdir.rstrip("/") + "/"))


def ostree_root_key_problems(rootfs: str, sysconfdir: str = "/etc", sbindir: str = "/usr/sbin",
                             root_home: str = "/root") -> list[str]:
    """Why root could not log in with an SSH key on an OSTree (sota) board built from ``rootfs``.

    meta-updater (f0e1ccaf) image_types_ostree.bbclass lines 99-100 delete ``/root`` and link it to
    ``var/roothome``; image_types_ota.bbclass lines 72-81 copy only var/sota, var/local and home into the
    deployment's /var. So root's keys count only where sshd reads them from the commit itself.
    """
    main = f"{sysconfdir}/ssh/sshd_config"
    if not os.path.isfile(rootfs + main):
        if os.path.exists(rootfs + sbindir + "/dropbear"):
            return [f"dropbear reads root's keys only from {root_home}/.ssh/authorized_keys, which an OSTree "
                    "commit drops -> use OpenSSH (IMAGE_FEATURES ssh-server-openssh)"]
        return [f"{main} is missing: no SSH server in the image reads root's keys"]
    value = next((v for _p, _n, key, v, in_match in _sshd_lines(rootfs, main, False, set())
                  if key == "authorizedkeysfile" and not in_match), SSHD_DEFAULT_KEYS_FILES)
    files = [_expand_keys_file(t, "root", root_home) for t in value.split() if t.lower() != "none"]
    kept = [f for f in files if in_ostree_commit(f, sysconfdir) and _holds_a_key(rootfs + f)]
    if kept:
        return []
    return [f"AuthorizedKeysFile gives root {' '.join(files) or 'none'}, and no key is in a file the OSTree "
            f"commit keeps ({root_home} becomes /var/roothome, empty on the board) -> install the keys under "
            "/usr and name them in AuthorizedKeysFile (edge-llm-login does with sota in DISTRO_FEATURES)"]


def problems(rootfs: str, policy: str, sysconfdir: str = "/etc", sbindir: str = "/usr/sbin") -> list[str]:
    """Every way root can still log in with a password on this rootfs under a production policy."""
    if policy not in ALLOWED_ROOT_LOGIN:
        raise ValueError(f"not a production login policy: {policy!r}")
    return (root_password_problems(rootfs, sysconfdir) + sshd_problems(rootfs, policy, sysconfdir)
            + dropbear_problems(rootfs, policy, sysconfdir, sbindir))
