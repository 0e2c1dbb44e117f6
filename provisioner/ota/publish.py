"""`provisioner ota publish RELEASE --repo DIR`: a release's OSTree commit into a static archive repository.

Static files only, so any HTTP server or CDN serves DIR, and anyone who reaches it can read every
object. So before DIR is touched the commit is read from the release's tarball and refused, one line
naming the file, when it holds a secret we know the shape of (:mod:`provisioner.ota.secrets`), and a
damaged ``edge-llm-ota.json`` is refused rather than replaced. Order matters for boards pulling while we
publish: objects first (``pull-local --untrusted``: every object's checksum verified), then the
signature and static deltas, and only then the refs and the summary that make the commit visible.

Deltas: from each ``--from`` REV (a commit id, a ref, or a published release id); without ``--from``,
from the commit the branch named before this publish (what the fleet was last given). A REV that is
not in DIR is refused: a delta needs both commits' objects.

Signing: a GPG secret key comes as a FILE, imported into a throw-away GnuPG home (0700, removed
afterwards); only the key's public fingerprint reaches ostree's argv. ostree 2022.7 (Debian 12) takes
ed25519 secret keys only as a command-line KEY-ID (``ostree sign COMMIT KEY-ID``), so an ed25519 key
file is used only by an ostree whose ``sign`` and ``summary`` list ``--keys-file``, and refused otherwise.

What a board checks: no signature. Its ostree is meta-oe's ``ostree_2026.1.bb`` (meta-openembedded @
9af4488d, the pin of meta-qcom's ``ci/base.lock.yml``): target ``PACKAGECONFIG`` lines 44-51 hold glib,
gpgme and curl (and systemd, libmount), never ``ed25519-libsodium``/``ed25519-openssl`` (lines 74-75), and
meta-updater's ``recipes-extended/ostree/ostree_2026.1.bbappend`` (f0e1ccaf) line 5 removes gpgme. ostree
v2026.1 ``configure.ac`` line 493 builds ed25519 only with openssl or libsodium (``glib`` is
``--with-crypto=glib``), so that ostree verifies neither GPG nor ed25519 signatures. A board checks that
every object it pulls hashes to the commit id ``fleet update-os`` names (ostree refuses a "Corrupted"
object, src/libostree/ostree-core.c line 1137), so integrity rests on release.json from the build host.
Publish says so in its output, signed or not (:data:`BOARD_SIGNATURE_NOTE`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.context import RunContext
from provisioner.contracts.release_document import OtaEntry, read_release_json
from provisioner.errors import ArtifactError, UserError
from provisioner.hashing import sha256_file
from provisioner.ota import INDEX_FILE, RELEASE_REF_PREFIX, ostree
from provisioner.ota.commit import extract_repo
from provisioner.ota.secrets import find_secrets

#: The signature types the board's ostree verifies, as QLI 2.0 builds it (module docstring): none.
BOARD_VERIFIES: tuple[str, ...] = ()
BOARD_SIGNATURE_NOTE = ("boards do not check signatures: QLI's ostree is built without gpgme (meta-updater's "
                        "ostree bbappend removes it) and without ed25519 (meta-oe's ostree recipe enables neither "
                        "libsodium nor openssl); a board checks only that what it pulls matches the commit id "
                        "fleet update-os gives it")


@dataclass
class PublishResult:
    """What publish did; ``deltas`` are the from-commits a static delta now exists for."""

    repo: Path
    release: str
    commit: str
    branch: str
    previous: str | None
    deltas: list[str] = field(default_factory=list)
    signed: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"repo": str(self.repo), "release": self.release, "commit": self.commit, "branch": self.branch,
                "previous": self.previous, "deltas_from": self.deltas, "signed": self.signed,
                "boards_verify": self.signed in BOARD_VERIFIES, "note": BOARD_SIGNATURE_NOTE}

    def lines(self) -> list[str]:
        out = [f"published {self.release}: {self.branch} -> {self.commit[:12]} in {self.repo}"]
        out += [f"  static delta {d[:12]} -> {self.commit[:12]}" for d in self.deltas]
        if not self.deltas:
            out.append("  no static delta (nothing published before on this branch and no --from)")
        out.append(f"  summary updated{', signed (' + self.signed + ')' if self.signed else ''}")
        if self.signed not in BOARD_VERIFIES:
            out.append(f"  {BOARD_SIGNATURE_NOTE}")
        return out


def _load(release_dir: Path) -> tuple[str, OtaEntry, Path]:
    doc = read_release_json(release_dir)
    ota = doc.ota_entry(release_dir)
    tarball = release_dir / ota.tarball
    if not tarball.is_file():
        raise ArtifactError(f"{tarball}: missing", "copy the whole release folder, ostree/ included")
    if sha256_file(tarball) != ota.sha256:
        raise ArtifactError(f"{tarball}: sha256 differs from release.json", "re-copy it from the build host")
    return str(doc.release or release_dir.name), ota, tarball


def init_repo(repo: Path, env: ostree.Env) -> None:
    """Create an archive repository at ``repo``, or check that the one there can be served statically."""
    mode = ostree.repo_mode(repo)
    if mode is None:
        if repo.exists() and any(repo.iterdir()):
            raise UserError(f"{repo}: not empty and not an OSTree repository", "give an empty or new folder")
        repo.mkdir(parents=True, exist_ok=True)
        ostree.run(repo, "init", "--mode=archive", what=f"init {repo}", env=env)
    elif mode not in ("archive", "archive-z2"):
        raise UserError(f"{repo}: an OSTree repository in mode {mode!r}; a web server can only serve 'archive'",
                        "publish into a new folder")


def _resolve_from(repo: Path, rev: str, env: ostree.Env) -> str:
    for candidate in (rev, f"{RELEASE_REF_PREFIX}{rev}"):
        found = ostree.has_commit(repo, candidate, env)
        if found:
            return found
    raise UserError(f"--from {rev}: not in {repo} (no commit, ref or published release of that name)",
                    "publish the release the boards run first; a delta needs both commits")


@contextlib.contextmanager
def gpg_home(key_file: Path, env: ostree.Env) -> Iterator[tuple[Path, str]]:
    """Import ``key_file`` into a private GnuPG home; yields (home, fingerprint) and removes it after."""
    gpg = shutil.which("gpg", path=ostree.child_env(env).get("PATH"))
    if not gpg:
        raise UserError("--gpg-key-file needs gpg", "apt-get install gnupg")
    if not key_file.is_file():
        raise UserError(f"--gpg-key-file {key_file}: no such file", "give the path of an exported secret key")
    home = Path(tempfile.mkdtemp(prefix="edge-llm-gnupg-"))
    home.chmod(0o700)
    genv = {**ostree.child_env(env), "GNUPGHOME": str(home)}
    try:
        imp = subprocess.run([gpg, "--batch", "--homedir", str(home), "--import", str(key_file)],
                             capture_output=True, text=True, env=genv, check=False)
        listing = subprocess.run([gpg, "--batch", "--homedir", str(home), "--list-secret-keys", "--with-colons"],
                                 capture_output=True, text=True, env=genv, check=False).stdout
        fprs = [line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:")]
        if imp.returncode != 0 or not fprs:
            raise UserError(f"--gpg-key-file {key_file}: holds no usable GPG secret key",
                            "export one with `gpg --export-secret-keys --armor KEYID > FILE` (no passphrase "
                            "for unattended publishing)")
        yield home, fprs[0]
    finally:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True, env=genv,
                       check=False) if shutil.which("gpgconf", path=genv.get("PATH")) else None
        shutil.rmtree(home, ignore_errors=True)


def ed25519_supported(env: ostree.Env) -> bool:
    """Whether this ostree can read an ed25519 secret key from a file for commits and the summary."""
    return (ostree.help_mentions(("sign",), "--keys-file", env)
            and ostree.help_mentions(("summary",), "--keys-file", env))


def read_index(repo: Path) -> dict[str, Any]:
    """The repository's ``edge-llm-ota.json`` (a new one when there is none), read before anything changes.

    A damaged or foreign index is refused rather than replaced: a new one would forget every release
    published before, and tools read it to know what the repository holds.
    """
    path = repo / INDEX_FILE
    if not path.exists():
        return {"format": 1, "releases": {}}
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{path}: damaged, not readable JSON ({getattr(exc, 'strerror', None) or exc})",
                        "restore it from a backup, or move it away: publish then starts a new index (the "
                        "published commits and refs stay)") from None
    if not isinstance(index, dict) or not isinstance(index.get("releases", {}), dict):
        raise UserError(f"{path}: not an edge-llm OTA index (want an object with 'releases')",
                        "move it away; publish writes a new one from the repository's releases")
    return index


def _write_index(repo: Path, index: dict[str, Any], release: str, entry: dict[str, Any]) -> None:
    path = repo / INDEX_FILE
    index.setdefault("releases", {})[release] = entry
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: {exc.strerror}", "free space on the repository's filesystem, then "
                        "publish again (the commit and deltas are already in; publishing is idempotent)") from None


def refuse_secrets(src: Path, commit: str, tarball: Path, env: ostree.Env) -> None:
    """One line naming the first file of ``commit`` that holds a secret (:mod:`provisioner.ota.secrets`)."""
    found = find_secrets(src, commit, env)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ArtifactError(f"{tarball}: commit {commit[:12]} holds {found[0].what}: {found[0].path}{more}; "
                            "a published repository is readable by anyone who reaches it",
                            "take it out of the image and build again (boards make their own host keys; "
                            "fleet launch writes each board's token)")


def publish(release_dir: Path, repo: Path, ctx: RunContext, *, from_revs: Sequence[str] = (),
            gpg_key_file: Path | None = None, ed25519_key_file: Path | None = None) -> PublishResult:
    """Import the release's commit into ``repo``, add deltas, move refs, update the summary.

    ``ctx``: the run (:class:`provisioner.context.RunContext`, from the CLI); ostree and gpg get only PATH,
    locale and HOME of its environment (:func:`provisioner.ota.ostree.child_env`).
    """
    env = ctx.env
    if gpg_key_file and ed25519_key_file:
        raise UserError("give one signing key, --gpg-key-file or --ed25519-key-file", "drop one of them")
    if ed25519_key_file and not ed25519_supported(env):
        raise UserError("this ostree cannot read an ed25519 key from a file (`ostree sign` has no --keys-file; "
                        "2022.7 takes the secret key only on its command line, where other users can read it)",
                        "use --gpg-key-file, or an ostree whose `sign --help` lists --keys-file")
    if ed25519_key_file and not ed25519_key_file.is_file():
        raise UserError(f"--ed25519-key-file {ed25519_key_file}: no such file", "give the key file's path")
    release, ota, tarball = _load(release_dir)
    commit, branch = ota.commit, ota.branch
    with tempfile.TemporaryDirectory(prefix="edge-llm-ota-import-") as tmp:
        # the commit is read before the repository is touched: once an object is in DIR, anyone can fetch it
        src = extract_repo(tarball, Path(tmp))
        refuse_secrets(src, commit, tarball, env)
        init_repo(repo, env)
        index = read_index(repo)
        previous = ostree.rev_parse(repo, branch, env)
        published = ostree.rev_parse(repo, f"{RELEASE_REF_PREFIX}{release}", env)
        if published and published != commit:
            raise UserError(f"release {release} is already published as {published[:12]}, this one is "
                            f"{commit[:12]}", "a release id names one commit; build a new release id")
        froms = [_resolve_from(repo, r, env) for r in from_revs] or ([previous] if previous else [])
        froms = sorted({f for f in froms if f != commit})
        ostree.run(repo, "pull-local", "--untrusted", str(src), commit, what=f"import {commit[:12]}", env=env)
    with contextlib.ExitStack() as stack:
        sign_args: list[str] = []
        signed = None
        if gpg_key_file:
            home, fpr = stack.enter_context(gpg_home(gpg_key_file, env))
            ostree.run(repo, "gpg-sign", f"--gpg-homedir={home}", commit, fpr, what="gpg-sign", env=env)
            sign_args = [f"--gpg-sign={fpr}", f"--gpg-homedir={home}"]
            signed = "gpg"
        elif ed25519_key_file:
            ostree.run(repo, "sign", "--sign-type=ed25519", f"--keys-file={ed25519_key_file}", commit,
                       what="sign", env=env)
            sign_args = ["--sign-type=ed25519", f"--keys-file={ed25519_key_file}"]
            signed = "ed25519"
        # --disable-bsdiff: with bsdiff parts, a bare-mode board running ostree 2022.7 applied the delta
        # and then fetched the changed objects again (about 2x the compressed change, bench/ota.py);
        # without, a delta carries each changed object once, compressed (about 1.0x).
        for f in froms:
            ostree.run(repo, "static-delta", "generate", "--if-not-exists", "--disable-bsdiff", f"--from={f}",
                       f"--to={commit}", what=f"static delta {f[:12]} -> {commit[:12]}", env=env)
        ostree.run(repo, "refs", "--force", f"--create={RELEASE_REF_PREFIX}{release}", commit, what="ref", env=env)
        ostree.run(repo, "refs", "--force", f"--create={branch}", commit, what=f"ref {branch}", env=env)
        ostree.run(repo, "summary", "--update", *sign_args, what="summary", env=env)
    _write_index(repo, index, release, {"commit": commit, "branch": branch, "deltas_from": froms, "signed": signed})
    return PublishResult(repo=repo, release=release, commit=commit, branch=branch, previous=previous,
                         deltas=froms, signed=signed)
