"""`provisioner station export-lava`: a LAVA job per board type of a release.

LAVA's schemas are not on PyPI (no `lava-common` there); Debian ships LAVA's own `lava-common`
(2023.01, installed by .ci/run), whose voluptuous schemas validate the job, its timeouts, the
minimal boot and the interactive test here, with LAVA's own code. That release predates LAVA's qdl
deploy and boot methods (added 2026.06, lava_common/schemas/{deploy,boot}/qdl.py), so those two
actions are checked against the fields LAVA documents for them (to-qdl.md, method-qdl.md at
Linaro/lava d27bcfdb) and against the release's own files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from provisioner.cli import main

SYSTEM_PYTHON = "/usr/bin/python3"
VALIDATE = r"""
import json, sys
from voluptuous import Schema
from lava_common.schemas import job, validate_action
data = json.load(sys.stdin)
Schema(job(), extra=False)(data)                    # the job: device_type, timeouts, actions, ...
for i, action in enumerate(data["actions"]):
    (kind, body), = action.items()
    if kind == "boot" and body["method"] == "minimal":
        validate_action("boot.minimal", i, body, strict=True)
    elif kind == "test":
        validate_action("test.interactive", i, body, strict=True)
print("ok")
"""
# to-qdl.md / lava_common/schemas/deploy/qdl.py and method-qdl.md / boot/qdl.py (Linaro/lava d27bcfdb)
DEPLOY_QDL_KEYS = {"to", "qcomflash", "uniquify", "rootfs_image", "timeout", "namespace", "failure_retry"}
BOOT_QDL_REQUIRED = {"method", "firehose_program", "rawprogram"}
BOOT_QDL_KEYS = BOOT_QDL_REQUIRED | {"patch", "path", "storage", "debug", "docker", "timeout", "namespace",
                                     "failure_retry"}


def _lava_common() -> str | None:
    if not shutil.which(SYSTEM_PYTHON):
        return None
    ok = subprocess.run([SYSTEM_PYTHON, "-c", "import lava_common.schemas"], capture_output=True)
    return SYSTEM_PYTHON if ok.returncode == 0 else None


@pytest.fixture
def job(release_8275, tmp_path, capsys):
    assert main(["station", "export-lava", str(release_8275), "--url-base", "https://artifacts.lab/edge-llm/",
                 "--out", str(tmp_path / "lava"), "--json"]) == 0
    (path,) = json.loads(capsys.readouterr().out)["jobs"]
    return yaml.safe_load(open(path, encoding="utf-8"))


def test_job_flashes_what_the_station_flashes_and_checks_the_banner(job, release_8275):
    bundle = next((release_8275 / "flash").iterdir())
    assert job["device_type"] == "monaco-evk"        # LAVA's device type of the IQ-8275 EVK (QCS8275, monaco)
    deploy, flash, boot, test = (next(iter(a.values())) for a in job["actions"])
    assert [next(iter(a)) for a in job["actions"]] == ["deploy", "boot", "boot", "test"]
    assert deploy["to"] == "qdl" and set(deploy) <= DEPLOY_QDL_KEYS
    assert deploy["qcomflash"] == {"url": "https://artifacts.lab/edge-llm/gemma4-e2b-iq8275-2026.11/"
                                          f"{bundle.name.removesuffix('.qcomflash')}.qcomflash.tar.gz"}
    assert flash["method"] == "qdl" and BOOT_QDL_REQUIRED <= set(flash) <= BOOT_QDL_KEYS
    assert flash["path"] == bundle.name and flash["storage"] == "ufs"
    for name in [flash["firehose_program"], *flash["rawprogram"].split(), *flash["patch"].split()]:
        assert (bundle / name).is_file(), name
    assert sorted(flash["rawprogram"].split()) == sorted(p.name for p in bundle.glob("rawprogram*.xml"))
    assert boot["method"] == "minimal"
    messages = [s["successes"][0]["message"] for s in test["interactive"][0]["script"]]
    assert messages == ["edge-llm release gemma4-e2b-iq8275-2026.11", "edge-llm id hostkey"]


def test_job_passes_lavas_own_schema(job):
    python = _lava_common()
    if python is None:
        pytest.skip("Debian's lava-common is not installed (apt-get install lava-common)")
    res = subprocess.run([python, "-c", VALIDATE], input=json.dumps(job), capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]
    # the schema can fail: a job without a device type is refused
    bad = dict(job)
    del bad["device_type"]
    res = subprocess.run([python, "-c", VALIDATE], input=json.dumps(bad), capture_output=True, text=True)
    assert res.returncode != 0 and "device_type" in res.stderr


def test_bad_url_base_is_one_line(release_8275, tmp_path, capsys):
    assert main(["station", "export-lava", str(release_8275), "--url-base", "artifacts.lab",
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is not a URL" in err and "Traceback" not in err


def test_an_out_that_is_not_a_writable_folder_is_one_line(release_8275, tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out in (afile, Path("/proc/edge-llm-lava")):
        assert main(["station", "export-lava", str(release_8275), "--url-base", "https://artifacts.lab/x",
                     "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "is not a writable folder" in err and "Traceback" not in err
