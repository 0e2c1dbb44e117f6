"""edge-llm-serve from the controller's side: the smoke run's argv, config errors, one source for layer and role.

The HTTP service itself (OpenAI API, auth, robustness) is tested in tests/serve/ on a stand-in C library.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from provisioner.contracts import board as on_board
from provisioner.fleet import launch
from provisioner.fleet.shared import onboard
from provisioner.fleet.shared.onboard import serve

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "layers" / "meta-edge-llm" / "recipes-ai" / "edge-llm-serve"


def test_genie_argv_uses_a_prompt_file_and_a_fresh_profile(tmp_path):
    cfg = {"runtime": "genie", "model_dir": "/opt/m", "executable": "/opt/q/genie-t2t-run"}
    text = serve.apply_chat_template("llama3", "Explain gravity.", "detailed thinking off")
    assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\ndetailed thinking off")
    argv, files = serve.build_argv(cfg, text, str(tmp_path))
    assert argv[:3] == ["/opt/q/genie-t2t-run", "-c", "/opt/m/genie_config.json"]
    assert files[argv[argv.index("--prompt_file") + 1]] == text
    assert not Path(argv[argv.index("--profile") + 1]).exists()


def test_bad_config_is_one_line_exit_2(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"model": "m", "runtime": "tflite", "model_dir": "/x", "executable": "/y"}))
    proc = subprocess.run([sys.executable, str(RECIPE / "files" / "edge-llm-serve"), "serve", "--config",
                           str(p)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "runtime must be" in proc.stderr and "Traceback" not in proc.stderr


def test_one_source_for_the_program_the_layer_and_the_fleet_install():
    # the controller's package, the launch playbook's program and the recipe's files are one source
    assert Path(serve.__file__).resolve() == (RECIPE / "files" / "edge_llm_serve" / "__init__.py").resolve()
    assert onboard.SERVE_SCRIPT.resolve() == (RECIPE / "files" / "edge-llm-serve").resolve()
    assert not (REPO / "provisioner" / "board").exists()
    # the unit is the layer's file with its placeholders filled from contracts.board, as the recipe fills them
    assert on_board.SERVE_UNIT_SOURCE.resolve() == (RECIPE / "files" / "edge-llm-serve@.service").resolve()
    unit = launch.unit_text("llm")
    assert unit == on_board.serve_unit_text("llm") and "User=llm" in unit and "SupplementaryGroups=fastrpc" in unit
    assert f"ExecStart={on_board.SERVE_BIN} serve --config {on_board.SERVE_CONFIG_DIR}/%i.json" in unit
    # no limit of its own: the image's drop-in sets image.memlock (tests/image/test_memlock.py)
    assert not [ln for ln in unit.splitlines() if ln.startswith("LimitMEMLOCK")]
    recipe = (RECIPE / "edge-llm-serve_1.0.bb").read_text()
    source = on_board.SERVE_UNIT_SOURCE.read_text()
    for name in sorted(set(re.findall(r"@([A-Z_]+)@", source))):
        assert f"s,@{name}@,${{{name}}},g" in recipe, name      # the recipe fills every placeholder
    assert "inherit allarch systemd" in recipe


def test_launch_writes_a_socket_unit_that_holds_each_instances_port():
    """Each instance gets edge-llm-serve@<model>.socket on its bind and port: systemd holds the port across
    restarts (systemd.socket(5)); an IPv6 bind is bracketed as ListenStream= wants it."""
    from provisioner import catalog
    from provisioner.contracts.inventory import HostVars, ModelVars

    expect = HostVars(board=catalog.board("iq-8275-evk"), models=(
        ModelVars(name="gemma-4-e2b", kind="litertlm", runtime="litert_lm", qairt="2.44.0.260225",
                  chat_template="gemma", file="m.litertlm"),))
    for bind, listen in (("127.0.0.1", "127.0.0.1:9100"), ("::1", "[::1]:9100"), ("0.0.0.0", "0.0.0.0:9100")):
        plan = launch.units(expect, bind=bind, port_base=9100)
        inst = plan["instances"][0]
        assert inst["socket"] == "edge-llm-serve@gemma-4-e2b.socket"
        assert f"\nListenStream={listen}\n" in inst["socket_text"]
        assert "WantedBy=sockets.target" in inst["socket_text"]
        spec = launch.launch_spec(plan, user="llm")
        (sock,) = [f for f in spec["files"] if f["path"].endswith(".socket")]
        assert sock["path"] == "/etc/systemd/system/edge-llm-serve@gemma-4-e2b.socket"
        assert sock["reload"] and sock["units"] == [inst["socket"], inst["unit"]]
        assert spec["instances"][0]["socket"] == inst["socket"]
    moved = launch.keep_board_endpoint(inst, json.dumps({"port": 9200, "bind": "127.0.0.1"}))
    assert "\nListenStream=127.0.0.1:9200\n" in moved["socket_text"]


def test_a_board_whose_image_has_the_same_package_needs_no_copy(tmp_path, monkeypatch):
    """The launch's program is current on a board when it is the same zip, or when it is the image's entry point
    and the package the board's python3 imports has the controller's digest (one rule on both sides)."""
    import importlib.util
    import os
    import shutil

    from provisioner import shipped

    collections = REPO / "playbooks/collections"      # the module imports its module_utils, as AnsiballZ ships them
    monkeypatch.syspath_prepend(str(collections))
    path = collections / "ansible_collections/edge_llm/fleet/plugins/modules/serve.py"
    spec = importlib.util.spec_from_file_location("edge_llm_serve_module", path)
    board = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(board)
    site = tmp_path / "site-packages"
    shutil.copytree(onboard.SERVE_PACKAGE, site / shipped.SERVE_PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.delitem(sys.modules, shipped.SERVE_PACKAGE)      # find it where the board's python3 would
    monkeypatch.syspath_prepend(str(site))
    entry = tmp_path / "edge-llm-serve"
    entry.write_bytes(onboard.SERVE_SCRIPT.read_bytes())
    entry.chmod(0o755)
    spec_file = next(f for f in launch.launch_spec(_plan(), user="llm")["files"] if f.get("package"))
    assert spec_file["package"]["digest"] == shipped.serve_package_digest()
    ids = (os.getuid(), os.getgid())
    assert board.runs_package(str(entry), spec_file["package"], 0o755, *ids)
    (site / shipped.SERVE_PACKAGE / "metrics.py").write_text("# another build\n", encoding="utf-8")
    assert not board.runs_package(str(entry), spec_file["package"], 0o755, *ids)     # another package: copy
    zipped = tmp_path / "zipped"
    zipped.write_bytes(shipped.serve_program())
    assert not board.differs(str(zipped), onboard.program_bytes(), 0o644, *ids)


def _plan() -> dict:
    from provisioner import catalog
    from provisioner.contracts.inventory import HostVars, ModelVars

    expect = HostVars(board=catalog.board("iq-8275-evk"), models=(
        ModelVars(name="gemma-4-e2b", kind="litertlm", runtime="litert_lm", qairt="2.44.0.260225",
                  chat_template="gemma", file="m.litertlm"),))
    return launch.units(expect)
