"""`provisioner litert build` against a local fixture LiteRT-LM repository and recording stand-ins.

The fixture repository has the real file paths and, at the line numbers the patches state, their
anchor lines; the @litert external holds the verbatim LiteRT d865fd82 excerpt from
tests/image/litert_sources.py; the three patches are the layer's own files. `bazel`, `git-lfs` and
`clang-18` are stand-ins that record their arguments; `readelf` records and then runs the real one.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from provisioner.cli import main
from provisioner.errors import BuildError
from provisioner.image import litert as L
from provisioner.ui import Reporter
from tests.image import litert_sources

UTIL = "runtime/util/litert_util.cc"
EXEC = "runtime/executor/llm_litert_npu_compiled_model_executor.cc"
HTP = "litert/vendors/qualcomm/core/backends/htp_backend.cc"
POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32 + "\nsize 22020096\n"


def elf(machine: int = 183) -> bytes:
    return b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8 + struct.pack("<HHI", 3, machine, 1) + b"\0" * 40 + b"\0" * 200


def numbered(path: str, n: int, lines: dict[int, str]) -> str:
    return "".join(lines.get(i, f"// {path} line {i}") + "\n" for i in range(1, n + 1))


def source_files(variant: str = "pinned") -> dict[str, str]:
    """LiteRT-LM files with the anchors where the patch headers say they are (cbf463d97fa3)."""
    guard = "#if defined(__ANDROID__) || defined(__EMSCRIPTEN__)" if variant == "pinned" else \
        "#if defined(__ANDROID__) || defined(__EMSCRIPTEN__) || defined(__APPLE__)"
    neon = "#if defined(__ANDROID__) && defined(__ARM_NEON)"
    return {
        UTIL: numbered(UTIL, 120, {71: guard, 96: "#endif"}),
        EXEC: numbered(EXEC, 600, {
            57: "#if defined(__ANDROID__)", 120: neon, 300: neon, 496: "#if defined(__ANDROID__)",
            497: "  LITERT_ASSIGN_OR_RETURN(::litert::qualcomm::QualcommOptions & qnn_opts,",
            498: " " * 26 + "options.GetQualcommOptions());", 550: neon}),
        ".bazelversion": "7.6.1\n",
        "prebuilt/linux_arm64/libGemmaModelConstraintProvider.so": POINTER,
    }


def git(*args, cwd):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


BAZEL = r'''#!/usr/bin/env python3
import json, os, shutil, struct, sys
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["STANDIN_RECORD"], "a") as f:
    f.write(json.dumps({"tool": "bazel", "argv": args, "cwd": os.getcwd(),
                        "sdk": os.environ.get("LITERT_QAIRT_SDK")}) + "\n")
base = Path(os.environ["STANDIN_OUTPUT_BASE"])
ext = base / "external" / "litert"
if args[:1] == ["info"]:
    print(base); sys.exit(0)
if args[:1] == ["fetch"]:
    print("Loading: 0 packages loaded"); print("INFO: All external dependencies fetched successfully.")
    if not ext.exists():
        shutil.copytree(os.environ["STANDIN_LITERT_EXTERNAL"], ext)
    sys.exit(0)
if args[:1] == ["build"]:
    assert "--nofetch" in args, "build must not refetch (patch 3 would be lost)"
    htp = (ext / "litert/vendors/qualcomm/core/backends/htp_backend.cc").read_text()
    # the real file already has an x86_64 guard further down: look for patch 3's own one
    if "device_custom_configs;\n#if defined(__x86_64__) || defined(_M_X64)\n" not in htp:
        print("ERROR: patch 3 missing in @litert"); sys.exit(1)
    m = int(os.environ.get("STANDIN_ELF_MACHINE", "183"))
    blob = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8 + struct.pack("<HHI", 3, m, 1) + b"\0" * 240
    out = base / "execroot" / "bin"
    for rel in ("runtime/engine/litert_lm_main",
                "external/litert/litert/vendors/qualcomm/dispatch/libLiteRtDispatch_Qualcomm.so",
                "external/litert/litert/runtime/libLiteRt.so", "python/litert_lm/litert-lm"):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(blob + rel.encode())
    link = Path("bazel-bin")
    if not link.exists():
        link.symlink_to(out)
    print("INFO: Build completed successfully, 4321 total actions"); sys.exit(0)
sys.exit(2)
'''

GIT_LFS = r'''#!/usr/bin/env python3
import json, os, struct, sys
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["STANDIN_RECORD"], "a") as f:
    f.write(json.dumps({"tool": "git-lfs", "argv": args, "cwd": os.getcwd()}) + "\n")
if args[:1] == ["version"]:
    print("git-lfs/3.4.1 (GitHub; linux amd64; go 1.21)"); sys.exit(0)
if args[:1] == ["pull"]:
    if os.environ.get("STANDIN_LFS_BROKEN"):
        print("batch response: Repository or object not found", file=sys.stderr); sys.exit(2)
    p = Path("prebuilt/linux_arm64/libGemmaModelConstraintProvider.so")
    head = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8 + struct.pack("<HHI", 3, 183, 1)
    p.write_bytes(head + b"\0" * 240 + b"gemma")
    sys.exit(0)
sys.exit(1)
'''

READELF = '''#!/bin/sh
echo "{\\"tool\\": \\"readelf\\", \\"argv\\": \\"$*\\"}" >> "$STANDIN_RECORD"
exec /usr/bin/readelf "$@"
'''


@pytest.fixture
def lt(tmp_path, monkeypatch):
    # the fixture upstream: commit 1 = pinned layout, commit 2 = "another commit" with a moved anchor
    up = tmp_path / "upstream"
    for rel, text in source_files().items():
        (up / rel).parent.mkdir(parents=True, exist_ok=True)
        (up / rel).write_text(text)
    git("init", "-q", str(up), cwd=tmp_path)
    git("add", "-A", cwd=up)
    git("commit", "-qm", "pinned", cwd=up)
    pinned = git("rev-parse", "HEAD", cwd=up)
    (up / UTIL).write_text(source_files("other")[UTIL])
    git("commit", "-qam", "other", cwd=up)
    other = git("rev-parse", "HEAD", cwd=up)
    external = tmp_path / "litert-external"
    (external / HTP).parent.mkdir(parents=True)
    (external / HTP).write_text(litert_sources.htp_backend_cc())
    sdk = tmp_path / "sdk"
    (sdk / "qairt" / "2.44.0.260225" / "lib").mkdir(parents=True)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("bazel", BAZEL), ("git-lfs", GIT_LFS), ("readelf", READELF),
                       ("clang-18", "#!/bin/sh\nexit 0\n"), ("clang++-18", "#!/bin/sh\nexit 0\n")):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_RECORD", str(record))
    monkeypatch.setenv("STANDIN_OUTPUT_BASE", str(tmp_path / "output_base"))
    monkeypatch.setenv("STANDIN_LITERT_EXTERNAL", str(external))
    monkeypatch.delenv("LITERT_QAIRT_SDK", raising=False)
    return SimpleNamespace(up=up, pinned=pinned, other=other, sdk=sdk, record=record, tmp=tmp_path,
                           out=tmp_path / "out", work=tmp_path / "work")


def opts(lt, **kw) -> L.LitertOptions:
    base = dict(work=lt.work, out=lt.out, qairt_sdk=str(lt.sdk), source=str(lt.up), rev=lt.pinned, allow_cross=True,
                env=dict(os.environ))
    base.update(kw)
    return L.LitertOptions(**base)


def records(lt, tool=None):
    if not lt.record.exists():
        return []
    rows = [json.loads(ln) for ln in lt.record.read_text().splitlines()]
    return [r for r in rows if tool is None or r["tool"] == tool]


def test_full_build_with_layer_patches(lt):
    res = L.litert_build(opts(lt), reporter=Reporter(quiet=True))
    name = "litert-lm-runtime-cbf463d97fa3-qairt2.44.0.260225-aarch64.tar.gz"
    assert L.tarball_name() == name
    assert res.tarball == lt.out / f"litert-lm-runtime-{lt.pinned[:12]}-qairt2.44.0.260225-aarch64.tar.gz"
    data = res.tarball.read_bytes()
    assert hashlib.sha256(data).hexdigest() == res.sha256
    assert (lt.out / (res.tarball.name + ".sha256")).read_text() == f"{res.sha256}  {res.tarball.name}\n"
    with tarfile.open(res.tarball) as tf:
        members = tf.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert set(names) == {"BUILDINFO.json", "bin", "lib", *(
        "bin/litert_lm_main", "lib/libLiteRtDispatch_Qualcomm.so", "lib/libLiteRt.so",
        "lib/libGemmaModelConstraintProvider.so", "lib/liblitert-lm.so")}
    with tarfile.open(res.tarball) as tf:
        info = json.loads(tf.extractfile("BUILDINFO.json").read())
    assert info["litert_lm"] == lt.pinned and info["qairt"] == "2.44.0.260225"
    assert sorted(info["patches"]) == [p.name for p in L.find_patches(L.PATCH_DIR)]
    assert info["files"] == res.files
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.uname == "" for m in members)
    # the layout contract: exactly the files the layer installs
    from provisioner.contracts.board import LITERT_FILES
    assert {n for n in names if "/" in n} == set(LITERT_FILES)

    src = lt.work / "LiteRT-LM"
    util = (src / UTIL).read_text().splitlines()
    assert util[70] == "#if defined(__ANDROID__) || defined(__EMSCRIPTEN__) || defined(__linux__)"
    ex = (src / EXEC).read_text().splitlines()
    assert ex[56] == ex[495] == "#if defined(__ANDROID__) || defined(__linux__)"
    assert ex[119] == ex[299] == ex[549] == "#if defined(__ANDROID__) && defined(__ARM_NEON)"   # untouched
    htp = (lt.tmp / "output_base" / "external" / "litert" / HTP).read_text().splitlines()
    assert htp[423] == litert_sources.X86_GUARD and htp[431] == "#endif"
    assert htp[424:431] == litert_sources.SOC_LINES          # the two-line socModel of d865fd82, kept

    bz = records(lt, "bazel")
    fetch = next(r for r in bz if r["argv"][0] == "fetch")
    build = next(r for r in bz if r["argv"][0] == "build")
    assert fetch["argv"][-3:] == build["argv"][-3:]     # --nofetch: all three fetched before
    assert build["argv"] == ["build", "--nofetch", "-c", "opt", "--repo_env=CC=clang-18",
                             "--repo_env=CXX=clang++-18", "//runtime/engine:litert_lm_main",
                             "@litert//litert/vendors/qualcomm/dispatch:dispatch_api_so",
                             "//python/litert_lm:litert-lm"]
    assert build["sdk"] == str(lt.sdk) + "/" and Path(build["cwd"]) == src
    assert [r["argv"] for r in records(lt, "git-lfs") if r["argv"][0] == "pull"]
    assert len(records(lt, "readelf")) == 5 and all("-h" in r["argv"] for r in records(lt, "readelf"))

    # a second run is idempotent: patches already applied, byte-identical tarball
    again = L.litert_build(opts(lt), reporter=Reporter(quiet=True))
    assert again.sha256 == res.sha256


def test_patch_anchor_missing_at_another_commit(lt):
    with pytest.raises(BuildError) as exc:
        L.litert_build(opts(lt, rev=lt.other), reporter=Reporter(quiet=True))
    msg = str(exc.value)
    assert msg.startswith("0001-") and "anchor '#if defined(__ANDROID__) || defined(__EMSCRIPTEN__)'" in msg
    assert UTIL in msg and "\n" not in msg
    assert not records(lt, "bazel")                    # stopped before bazel


def test_x86_output_and_lfs_pointer_refused(lt, monkeypatch):
    monkeypatch.setenv("STANDIN_ELF_MACHINE", "62")
    with pytest.raises(BuildError, match="is not an aarch64 ELF .readelf: Advanced Micro Devices X86-64"):
        L.litert_build(opts(lt), reporter=Reporter(quiet=True))
    monkeypatch.setenv("STANDIN_ELF_MACHINE", "183")
    lib = lt.work / "LiteRT-LM" / L.LFS_LIB
    lib.write_text(POINTER)
    monkeypatch.setenv("STANDIN_LFS_BROKEN", "1")
    with pytest.raises(BuildError, match="step 'lfs' failed"):
        L.litert_build(opts(lt), reporter=Reporter(quiet=True))
    with pytest.raises(BuildError, match="Git LFS pointer"):
        L.check_aarch64(lib, "lib/libGemmaModelConstraintProvider.so", os.environ)
    # an offline mirror (--source) whose working tree has the real library: used when LFS is unreachable
    (lt.up / L.LFS_LIB).write_bytes(elf() + b"from-mirror")
    res = L.litert_build(opts(lt), reporter=Reporter(quiet=True))
    with tarfile.open(res.tarball) as tf:
        assert tf.extractfile("lib/libGemmaModelConstraintProvider.so").read().endswith(b"from-mirror")


def test_qairt_sdk_value_rules(tmp_path, lt):
    assert L.qairt_sdk_value(str(lt.sdk)) == str(lt.sdk) + "/"
    assert L.qairt_sdk_value(str(lt.sdk / "qairt" / "2.44.0.260225")) == str(lt.sdk) + "/"
    with pytest.raises(BuildError, match="no QAIRT SDK given"):
        L.qairt_sdk_value(None)
    with pytest.raises(BuildError, match="does not accept a .zip"):
        L.qairt_sdk_value(str(tmp_path / "v2.44.0.260225.zip"))
    (tmp_path / "other" / "qairt" / "2.45.0.260326").mkdir(parents=True)
    with pytest.raises(BuildError, match=r"does not contain qairt/2.44.0.260225/ \(it has qairt/2.45.0.260326\)"):
        L.qairt_sdk_value(str(tmp_path / "other"))
    with pytest.raises(BuildError, match="does not exist"):
        L.qairt_sdk_value(str(tmp_path / "missing"))


def test_cli_dry_run_plan_and_missing_sdk(lt, capsys):
    rc = main(["litert", "build", "--work", str(lt.work), "--qairt-sdk", str(lt.sdk), "--out", str(lt.out),
               "--dry-run", "--json"])
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert plan[0] == f"LITERT_QAIRT_SDK={lt.sdk}/"
    assert any("--nofetch" in ln and "dispatch_api_so" in ln for ln in plan)
    assert any(ln.startswith("patch-3:") and "external/litert" in ln for ln in plan)
    assert records(lt) == [] and not lt.work.exists()          # nothing ran
    rc = main(["litert", "build", "--work", str(lt.work), "--out", str(lt.out), "--dry-run"])
    assert rc == 2
    assert "no QAIRT SDK given for LITERT_QAIRT_SDK" in capsys.readouterr().err


def test_non_aarch64_host_refused_without_allow_cross(lt, monkeypatch, capsys):
    monkeypatch.setattr(L.platform, "machine", lambda: "x86_64")
    rc = main(["litert", "build", "--work", str(lt.work), "--qairt-sdk", str(lt.sdk), "--out", str(lt.out)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "this host is x86_64" in err and "aarch64" in err
    assert records(lt) == []


def test_apply_patch_is_idempotent_and_reports_other_lines(lt, tmp_path):
    d = tmp_path / "tree"
    (d / UTIL).parent.mkdir(parents=True)
    (d / UTIL).write_text(source_files()[UTIL])
    p1 = L.find_patches(L.PATCH_DIR)[0]
    assert L.apply_patch(p1, d) == "applied"
    assert L.apply_patch(p1, d) == "already applied"
    # anchor present but at another line: patch refuses, we say so
    (d / UTIL).write_text("\n".join(["x"] * 80 + ["#if defined(__ANDROID__) || defined(__EMSCRIPTEN__)"]) + "\n")
    with pytest.raises(BuildError, match="anchors found but at other lines"):
        L.apply_patch(p1, d)


def test_patch_3_anchors_are_the_real_soc_lines():
    """`litert build` checks patch 3's anchors in @litert: the seven allocate-and-emplace lines of d865fd82."""
    info = L.read_patch(L.find_patches(L.PATCH_DIR)[2])
    assert info.files == {HTP: litert_sources.SOC_LINES}


def test_patch_3_in_a_litert_of_another_commit_names_the_anchor(tmp_path):
    """A LiteRT whose socModel assignment is one line: the first differing anchor is named, nothing changes."""
    lines = list(litert_sources.SOC_LINES)
    lines[3:5] = ["  htp_device_custom_config->socModel = soc_info_.soc_model;"]
    tree = litert_sources.write_litert_tree(tmp_path / "litert", soc_lines=lines)
    before = (tree / HTP).read_text()
    p3 = L.find_patches(L.PATCH_DIR)[2]
    with pytest.raises(BuildError, match=r"^0003-.*anchor 'htp_device_custom_config->socModel =' not found in "
                                         + HTP):
        L.apply_patch(p3, tree)
    assert (tree / HTP).read_text() == before
    fresh = litert_sources.write_litert_tree(tmp_path / "pinned")
    assert L.apply_patch(p3, fresh) == "applied" and L.apply_patch(p3, fresh) == "already applied"
