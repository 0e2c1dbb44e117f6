"""The simulated firmware of a virtual sota board (provisioner.sim.sota_boot) against the rules it follows:
systemd's "Automatic Boot Assessment" (tries in the entry file name, one per boot, bad entries last, blessed
at boot-complete) and ostree v2026.1's entry names (ostree-sysroot-deploy.c:1795-1829)."""

from __future__ import annotations

from pathlib import Path

from provisioner.sim import sota_boot


def _esp(tmp_path: Path, entries: dict[str, int]) -> Path:
    esp = tmp_path / "esp"
    d = esp / "loader.1" / "entries"
    d.mkdir(parents=True)
    (esp / "loader").symlink_to("loader.1")
    for name, version in entries.items():
        (d / name).write_text(f"title t\nversion {version}\noptions ostree=/ostree/boot.1/x/{version}\n")
    return esp


def _names(esp: Path) -> list[str]:
    return sorted(p.name for p in (esp / "loader/entries").glob("*.conf"))


def test_a_new_entry_that_never_comes_up_uses_its_tries_then_the_previous_boots(tmp_path):
    esp = _esp(tmp_path, {"ostree-2+3.conf": 2, "ostree-1.conf": 1})
    log: list[dict] = []
    booted = sota_boot.boot(esp, lambda e: e.stem != "ostree-2", log)
    assert booted is not None and booted.path.name == "ostree-1.conf"
    assert [x["entry"] for x in log] == ["ostree-2+2-1.conf", "ostree-2+1-2.conf", "ostree-2+0-3.conf",
                                         "ostree-1.conf"]
    assert _names(esp) == ["ostree-1.conf", "ostree-2+0-3.conf"]
    # the next power-on: the bad entry is sorted after the good one and is not tried again
    log.clear()
    assert sota_boot.boot(esp, lambda e: e.stem != "ostree-2", log).path.name == "ostree-1.conf"
    assert [x["entry"] for x in log] == ["ostree-1.conf"]


def test_an_entry_that_comes_up_counts_one_try_and_bless_removes_the_counters(tmp_path):
    esp = _esp(tmp_path, {"ostree-2+3.conf": 2, "ostree-1.conf": 1})
    booted = sota_boot.boot(esp, lambda e: True, [])
    assert booted.path.name == "ostree-2+2-1.conf"
    assert sota_boot.bless(booted).path.name == "ostree-2.conf"
    assert _names(esp) == ["ostree-1.conf", "ostree-2.conf"]


def test_a_blessed_entry_that_stops_booting_is_not_tried_forever(tmp_path):
    esp = _esp(tmp_path, {"ostree-1.conf": 1})
    assert sota_boot.boot(esp, lambda e: False, []) is None


def test_set_default_renumbers_the_entries_keeping_their_counters(tmp_path):
    esp = _esp(tmp_path, {"ostree-2.conf": 2, "ostree-1+0-3.conf": 1})
    sota_boot.set_default(esp, 1)
    assert _names(esp) == ["ostree-1.conf", "ostree-2+0-3.conf"]
    text = (esp / "loader/entries/ostree-2+0-3.conf").read_text()
    assert "version 2" in text and "ostree=/ostree/boot.1/x/1" in text     # the old index 1, now the default


def test_ostree_2026_names_give_a_new_deployment_its_tries_and_keep_the_others(tmp_path):
    esp = _esp(tmp_path, {"ostree-2-nodistro.conf": 2, "ostree-1-nodistro.conf": 1})
    root = tmp_path / "root"
    old = {sota_boot.deployment_key(e, root): None for e in sota_boot.read_entries(esp) if e.version == 1}
    sota_boot.name_entries(esp, root, old, 3)
    assert _names(esp) == ["ostree-1.conf", "ostree-2+3.conf"]
