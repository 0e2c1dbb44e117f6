"""The edge_llm.fleet collection builds with ansible-galaxy and runs from a clean controller."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

from provisioner import tools

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "playbooks/collections/ansible_collections/edge_llm/fleet"

PLAYBOOK = """---
- name: Use the installed edge_llm.fleet filters
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Show a model's on-board paths
      ansible.builtin.debug:
        msg: "{{ 'gemma-4-e2b' | edge_llm.fleet.model_paths | to_json }}"
"""


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_built_collection_runs_from_a_clean_controller(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "collections"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
           "ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    built = _run([tools.require("ansible-galaxy"), "collection", "build", str(COLLECTION), "--output-path",
                  str(tmp_path)], tmp_path, env)
    assert built.returncode == 0, built.stderr
    tarball = next(tmp_path.glob("edge_llm-fleet-*.tar.gz"))
    with tarfile.open(tarball) as tf:
        names = tf.getnames()
        plugins = {n: tf.extractfile(n).read().decode() for n in names
                   if n.startswith("plugins/") and n.endswith(".py")}
    assert "requirements.txt" in names   # the collection declares the Python package its plugins need
    assert not any("sys.path" in text for text in plugins.values()), "a plugin reaches outside the collection"
    installed = _run([tools.require("ansible-galaxy"), "collection", "install", str(tarball), "-p",
                      str(tmp_path / "collections")], tmp_path, env)
    assert installed.returncode == 0, installed.stderr
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    # cwd is tmp_path: no ansible.cfg, no playbooks/collections next to the play, the repo not on sys.path
    play = _run([tools.require("ansible-playbook"), "-i", "localhost,", "play.yml"], tmp_path, env)
    assert play.returncode == 0, play.stdout[-2000:] + play.stderr
    assert "edge-llm-serve@gemma-4-e2b.service" in play.stdout and "/gemma-4-e2b/current" in play.stdout
