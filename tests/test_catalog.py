"""The board catalog is the single source of truth for board facts."""

import pytest

from provisioner import catalog
from provisioner.cli import main
from provisioner.errors import UserError


def test_boards_have_facts_from_the_notes():
    b8 = catalog.board("iq-8275-evk")
    assert (b8.soc0_machine, b8.soc_id, b8.hexagon_arch, b8.qnn_soc_model) == ("QCS8275", 675, "v75", 82)
    assert b8.qairt_skel_dir == "lib/hexagon-v75/unsigned"
    assert b8.skel_lib == "libQnnHtpV75Skel.so"
    b9 = catalog.board("iq-9075-evk")
    assert (b9.soc_id, b9.hexagon_arch, b9.qnn_soc_model) == (676, "v73", 77)


@pytest.mark.parametrize("alias", ["IQ-8275", "iq8275", "QCS8275", "IQ-8275 EVK"])
def test_board_aliases(alias):
    assert catalog.board(alias).id == "iq-8275-evk"


def test_unknown_board_names_the_known_ones():
    with pytest.raises(UserError) as exc:
        catalog.board("rb3-gen2")
    assert "iq-8275-evk" in str(exc.value)


def test_expected_speed_prefers_os():
    b8 = catalog.board("iq-8275-evk")
    assert b8.expected("gemma-4-e2b", "qli").decode_tok_s == 32.0
    assert b8.expected("gemma-4-e2b", "ubuntu").decode_tok_s == 28.0
    assert b8.expected("nemotron-nano-8b") is None


def test_qairt_normalisation():
    assert catalog.normalize_qairt("2.45.0.260326154327") == "2.45.0.260326"
    assert catalog.normalize_qairt("v2.44.0.260225") == "2.44.0.260225"
    assert catalog.is_qairt_build("2.44.0.260225")
    assert not catalog.is_qairt_build("2.44")


def test_boards_cli_json(capsys):
    import json

    assert main(["boards", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {b["id"] for b in data} == {"iq-8275-evk", "iq-9075-evk"}
