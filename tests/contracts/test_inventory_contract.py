"""The inventory contract: every writer uses one key per fact, and the fleet reads what they wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner.contracts import inventory
from provisioner.contracts.release import load_release
from provisioner.fleet.shared.inventory import inventory_from_records
from provisioner.image.release import write_release
from provisioner.station.inventory_export import build_inventory
from provisioner.station.records import PASSED, Records
from tests.image.test_release import make_bundle
from tests.image.test_release import manifest as manifest  # noqa: F401 (fixture)


def _only_host(inv: dict) -> dict:
    (group,) = inv["all"]["children"].values()
    (hv,) = group["hosts"].values()
    return hv


def test_station_export_and_fleet_records_give_verify_the_flashed_release(tmp_path):
    # Before: the station wrote edge_llm_release and only a Jinja default in the verify role made it the
    # expected BUILD_ID; the fleet's own model of the variables never saw it.
    with Records(tmp_path / "db") as rec:
        rec.board_seen("0AA94E00", slot="slot 0", board="iq-8275-evk")
        aid = rec.start_attempt("0AA94E00", slot="slot 0", board="iq-8275-evk", release_id="rel-7",
                                artifacts={}, qdl_version="qdl 2.8", log_path=None)
        rec.finish_attempt(aid, PASSED, identity={"hostname": "h0"})
        station = _only_host(build_inventory(rec, {"0AA94E00": "10.0.0.5:22"}))
    fleet = _only_host(inventory_from_records([{"serial": "0AA94E00", "board": "iq-8275-evk",
                                                "address": "10.0.0.5", "port": 22, "release": "rel-7"}]))
    for hv in (station, fleet):
        assert set(hv) <= set(inventory.VARIABLES) | {"ansible_host", "ansible_port", "ansible_user"}
        assert inventory.HostVars.from_vars(hv).build_id == "rel-7"
    assert {k: v for k, v in station.items() if k != "edge_llm_slot"} == fleet


ROLES = Path(__file__).resolve().parents[2] / "playbooks" / "roles"


@pytest.mark.parametrize("role", sorted(p.name for p in ROLES.iterdir() if (p / "defaults/main.yml").is_file()))
def test_no_role_has_a_second_spelling_of_the_release(role):
    # The health gate of update-os checks the BUILD_ID as verify does; neither may fall back to the old key.
    defaults = yaml.safe_load((ROLES / role / "defaults/main.yml").read_text(encoding="utf-8"))
    assert "edge_llm_release" not in str(defaults)


def test_writer_refuses_a_variable_no_reader_knows():
    with pytest.raises(ValueError, match="edge_llm_release is not an inventory variable"):
        inventory.host_vars(board="iq-8275-evk", release="r1")


def test_release_json_carries_the_verify_floors_the_manifest_set(tmp_path, manifest):  # noqa: F811
    # Before: the fleet rebuilt the floors from the Manifest; now the release carries them.
    out = write_release(manifest, make_bundle(tmp_path / "d"), tmp_path / "out", simulated=True)
    with load_release(out, hash_files=False) as release:
        (entry,) = inventory.models_from_release(release.models)
    m = manifest.models[0]
    assert (entry["min_decode_tok_s"], entry["max_ttft_s"]) == manifest.thresholds(m)
    assert entry["min_decode_tok_s"] is not None and entry["runtime"] == "litert_lm"
    assert inventory.ModelVars.from_vars(entry).file == m.filename


class _Recording(dict):
    """A host's variables that remember which ones were read."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)


def test_action_plugins_hand_over_every_variable_the_contract_reads():
    """The fleet actions pass HostVars.from_vars only HOST_VARS_READ out of a host's variables: a variable the
    contract reads that is missing from that tuple would silently fall back to its default on every board."""
    hv = _Recording(edge_llm_board="iq-8275-evk", edge_llm_models=[], edge_llm_download_mode=0)
    inventory.HostVars.from_vars(hv)
    assert hv.read <= set(inventory.HOST_VARS_READ), hv.read - set(inventory.HOST_VARS_READ)
    assert set(inventory.HOST_VARS_READ) <= set(inventory.VARIABLES)
