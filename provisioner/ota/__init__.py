"""Whole-image OTA with QLI's own OSTree flavour: the release contract and where publish puts things.

This docstring IS the contract between the image stage (``build`` collects the commit), ``provisioner
ota publish`` (puts it in a static repository) and ``provisioner fleet update-os`` (boards pull it).

Where the commit comes from (public sources, read at the pinned commits):

- meta-qcom ``ci/qcom-distro-sota.yml`` @ ef0004df includes ``ci/qcom-distro.yml`` and sets
  ``distro: qcom-distro-sota``;
- meta-qcom-distro ``conf/distro/include/qcom-distro-sota.inc`` @ 775dc8c7 requires meta-updater's
  ``conf/distro/sota.conf.inc`` and sets ``BUILD_OSTREE_REPO_TARBALL = "1"``;
- meta-updater (github.com/uptane/meta-updater, pinned by meta-qcom ``ci/base.lock.yml`` to f0e1ccaf)
  ``classes/sota.bbclass``: ``IMAGE_FSTYPES += ostreecommit.tar.xz``, ``OSTREE_REPO ?=
  ${DEPLOY_DIR_IMAGE}/ostree_repo``, ``OSTREE_BRANCHNAME ?= ${SOTA_HARDWARE_ID}``, ``SOTA_HARDWARE_ID ??=
  ${MACHINE}``, ``OSTREE_OSNAME ?= "nodistro"`` (qcom-distro sets none of them);
  ``classes/image_types_ostree.bbclass``: ``IMAGE_CMD:ostreecommit`` inits ``OSTREE_REPO`` with
  ``--mode=archive-z2`` and commits ``--branch=${OSTREE_BRANCHNAME} --subject="Commit-id: ${IMAGE_NAME}"
  --add-metadata-string=version=${DISTRO_VERSION}``; the ``tar`` conversion archives the whole repo
  directory (``-C ${OSTREE_REPO} .``), then oe-core's ``xz`` conversion, so the deploy dir holds
  ``<image>-<machine>.rootfs.ostreecommit.tar.xz`` (oe-core image-artifact-names.bbclass @ 06dd66e6).
  The repo persists across builds, so the tarball may hold older commits too: the release's commit is
  the one ``refs/heads/<branch>`` names.

release.json (written by ``build``; the simulator writes the same)::

    "ota": {
      "kind": "ostree",
      "tarball": "ostree/ostreecommit.tar.xz",   # relative to the release folder
      "sha256": "<hex of the tarball>", "size": <bytes of the tarball>,
      "branch": "iq-8275-evk",                   # OSTREE_BRANCHNAME (= MACHINE by default)
      "commit": "<64 hex>",                      # what refs/heads/<branch> names in the tarball
      "version": "<commit metadata 'version'>", "subject": "Commit-id: <IMAGE_NAME>",
      "content_size": <bytes of the commit's regular files, uncompressed>
    }

plus ``kargs``, the kernel arguments an update carries. Absent when the manifest has no ``image.ota``.
Its type and checks are :class:`provisioner.contracts.release_document.OtaEntry` (read it only as
``ReleaseDocument.ota``).

The published repository (``provisioner ota publish RELEASE --repo DIR``): DIR is an OSTree
``archive`` repository made of static files; serve DIR itself at any URL (``ostree remote add NAME
URL`` on the board). In it:

- ``refs/heads/<branch>``: the newest published commit for that board type (what boards pull);
- ``refs/heads/edge-llm/releases/<release-id>``: every published release, by id;
- static deltas from each ``--from`` commit (default: the commit ``<branch>`` named before this
  publish, i.e. what the fleet was last given) to the new commit, listed in the signed-or-not summary;
- ``edge-llm-ota.json``: ``{"format": 1, "releases": {<id>: {"commit", "branch", "deltas_from": [...],
  "signed": null | "gpg"}}}`` for tools (and ``fleet update-os``) that want to know without parsing
  the summary.
"""

from __future__ import annotations

from provisioner.contracts.release import OTA_KINDS

__all__ = ["OTA_KINDS"]
TARBALL_PATH = "ostree/ostreecommit.tar.xz"
INDEX_FILE = "edge-llm-ota.json"
RELEASE_REF_PREFIX = "edge-llm/releases/"
