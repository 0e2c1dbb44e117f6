"""The serve config's token rules and where the controller finds a board's token after launch."""

from __future__ import annotations

import pytest

from provisioner import catalog
from provisioner.contracts.board import TOKEN_FILE
from provisioner.contracts.inventory import ModelVars
from provisioner.fleet.shared.serve_config import controller_token, serve_config


def _model() -> ModelVars:
    return ModelVars.from_vars({"name": "gemma-4-e2b", "kind": "litertlm", "runtime": "litert_lm",
                                "qairt": "2.44.0.260225",
                                "file": "gemma.litertlm", "min_decode_tok_s": 20})


def test_config_names_the_token_file_and_connection_limits():
    cfg = serve_config(catalog.board("iq-8275-evk"), _model())
    assert cfg["token_file"] == TOKEN_FILE and cfg["bind"] == "127.0.0.1"
    assert cfg["max_connections"] > 0 and cfg["idle_timeout_s"] > 0 and cfg["read_timeout_s"] > 0


def test_a_litert_config_carries_the_models_context():
    """The runtime gets the model's context (4096 for Gemma-4 E2B, the catalog's), not its own default."""
    assert serve_config(catalog.board("iq-8275-evk"), _model())["max_num_tokens"] == 4096
    other = ModelVars.from_vars({"name": "my-own", "kind": "litertlm", "qairt": "2.44.0.260225"})
    assert "max_num_tokens" not in serve_config(catalog.board("iq-8275-evk"), other)


def test_a_lan_bind_without_a_token_is_refused():
    with pytest.raises(ValueError, match="LAN bind needs a bearer token"):
        serve_config(catalog.board("iq-8275-evk"), _model(), bind="0.0.0.0", token_file=None)
    assert serve_config(catalog.board("iq-8275-evk"), _model(), bind="0.0.0.0")["token_file"] == TOKEN_FILE


def test_controller_token_is_read_beside_the_inventory(tmp_path):
    inv = tmp_path / "inventory.yml"
    assert controller_token(inv, "board-1") is None
    (tmp_path / ".edge-llm-tokens").mkdir()
    (tmp_path / ".edge-llm-tokens" / "board-1").write_text("A" * 43 + "\n")
    assert controller_token(inv, "board-1") == "A" * 43


def test_an_unreadable_token_is_one_fleet_error(tmp_path):
    """A token path that is a folder (or unreadable) says which file and what it must be, not a traceback."""
    from provisioner.errors import FleetError
    from provisioner.fleet.shared.serve_config import TOKEN_DIR_NAME, controller_token

    inv = tmp_path / "inventory.yml"
    (tmp_path / TOKEN_DIR_NAME / "board-1").mkdir(parents=True)
    with pytest.raises(FleetError, match=r"cannot read board-1's API token .*board-1"):
        controller_token(inv, "board-1")
    assert controller_token(inv, "board-2") is None
