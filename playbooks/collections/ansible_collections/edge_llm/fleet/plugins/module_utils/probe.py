"""Board-side probe runner (shared by the verify and deploy modules): read, stat and run what a spec names.

The spec is built on the controller (provisioner.fleet.verify.probe_spec); this code knows nothing
about boards. ``run_one`` is the smoke inference: the verify module runs it on ``current``, the
deploy module on a version directory before ``current`` may point at it - the same probe, so a
health gate and ``fleet verify`` can never disagree. Standard library only: a QLI image has no pip.
"""

from __future__ import annotations

import grp
import hashlib
import json
import mmap
import os
import pwd
import re
import resource
import shutil
import stat
import subprocess
import tempfile

CACHE = "/opt/edge-llm/.sha256-cache.json"   # beside the models: same disk, survives reboots
BUILD_RE = re.compile(rb"v?(2\.\d{1,2}\.\d{1,2}\.\d{6})")
MAX_READ = 65536


def read_text(path):
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_READ)
    except OSError as exc:
        return {"content": None, "error": exc.strerror}
    return {"content": data.decode("utf-8", "replace").rstrip("\n")}


def stat_path(path):
    try:
        st = os.stat(path)
    except OSError as exc:
        return {"exists": False, "error": exc.strerror}
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    kind = "char" if stat.S_ISCHR(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file"
    return {"exists": True, "mode": f"{stat.S_IMODE(st.st_mode):04o}", "owner": owner, "group": group,
            "size": st.st_size, "type": kind}


def systemctl(args):
    exe = shutil.which("systemctl") or "/bin/systemctl"
    try:
        proc = subprocess.run([exe] + args, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    return proc.stdout.strip(), proc.stderr.strip()


def lib_build(path):
    """QAIRT build id carried as text inside a library (what `strings | grep` finds)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return None
            with mmap.mmap(fh.fileno(), min(size, 256 << 20), access=mmap.ACCESS_READ) as mm:
                m = BUILD_RE.search(mm)
                return m.group(1).decode() if m else None
    except (OSError, ValueError):
        return None


class HashCache:
    """sha256 per file, reused while (inode, size, mtime) are unchanged: a 3-5 GB model is hashed once."""

    def __init__(self, enabled, writable):
        self.enabled = enabled
        self.writable = writable
        self.data = {}
        self.dirty = False
        if enabled:
            try:
                with open(CACHE) as fh:
                    self.data = json.load(fh)
            except (OSError, ValueError):
                self.data = {}

    def sha256(self, path, st):
        key = os.path.realpath(path)
        ident = [st.st_ino, st.st_size, st.st_mtime_ns]
        hit = self.data.get(key)
        if self.enabled and hit and hit.get("id") == ident:
            return hit["sha256"], True
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(4 << 20), b""):
                h.update(chunk)
        digest = h.hexdigest()
        self.data[key] = {"id": ident, "sha256": digest}
        self.dirty = True
        return digest, False

    def save(self):
        if not (self.dirty and self.writable):
            return
        try:
            os.makedirs(os.path.dirname(CACHE), exist_ok=True)
            tmp = f"{CACHE}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                json.dump(self.data, fh)
            os.replace(tmp, CACHE)
        except OSError:
            pass


def model_info(spec, cache):
    mdir = spec["dir"]
    out = {"dir": mdir, "exists": os.path.isdir(mdir)}
    if not out["exists"]:
        return out
    resolved = os.path.realpath(mdir)
    out["resolved"] = resolved
    out["version"] = os.path.basename(resolved)
    meta = {}
    meta_path = os.path.join(mdir, spec.get("meta") or "model.json")
    try:
        with open(meta_path) as fh:
            meta = json.load(fh)
    except (OSError, ValueError):
        meta = {}
    out["meta"] = meta
    files = {}
    for root, _dirs, names in os.walk(mdir, followlinks=False):
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, mdir)
            if rel == (spec.get("meta") or "model.json"):
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            entry = {"size": st.st_size}
            if spec.get("hash"):
                entry["sha256"], entry["cached"] = cache.sha256(path, st)
            files[rel] = entry
    out["files"] = files
    out["json"] = {}
    for name in spec.get("json") or []:
        try:
            with open(os.path.join(mdir, name)) as fh:
                out["json"][name] = json.load(fh)
        except (OSError, ValueError) as exc:
            out["json"][name] = {"error": str(exc)}
    return out


def qairt_info(spec):
    out = {"installed": [], "marker": None, "lib_builds": {}}
    try:
        out["installed"] = sorted(d for d in os.listdir(spec["root"]) if not d.startswith("."))
    except OSError:
        pass
    marker = read_text(spec["marker"]).get("content")
    if marker:
        m = re.search(r"([0-9]+\.[0-9]+\.[0-9]+\.[0-9]{6})", marker)
        out["marker"] = m.group(1) if m else marker[:64]
    for lib in spec.get("libs") or []:
        out["lib_builds"][lib] = lib_build(lib) if os.path.isfile(lib) else None
    return out


def run_one(spec):
    work = tempfile.mkdtemp(prefix="edge-llm-verify-")
    try:
        def sub(text):
            return text.replace("{work}", work)
        for path, content in (spec.get("files") or {}).items():
            with open(sub(path), "w", encoding="utf-8") as fh:
                fh.write(content)
        # the run directory's symlinks (e.g. litert_lm_main's model beside its dispatch library)
        for link, target in (spec.get("links") or {}).items():
            os.symlink(sub(target), sub(link))
        argv = [sub(a) for a in spec["argv"]]
        env = dict(os.environ)
        env.update({k: str(v) for k, v in (spec.get("env") or {}).items()})
        cwd = spec.get("cwd") if spec.get("cwd") and os.path.isdir(spec["cwd"]) else work
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", env=env, cwd=cwd,
                                  timeout=float(spec.get("timeout") or 300), check=False)
        except subprocess.TimeoutExpired:
            return {"rc": None, "error": "smoke inference timed out after {}s".format(spec.get("timeout"))}
        except OSError as exc:
            return {"rc": None, "error": f"cannot run {argv[0]}: {exc.strerror}"}
        collected = {}
        for path in spec.get("collect") or []:
            try:
                with open(sub(path), encoding="utf-8", errors="replace") as fh:
                    collected[path] = fh.read(1 << 20)
            except OSError:
                collected[path] = None
        return {"rc": proc.returncode, "stdout": proc.stdout[-20000:], "stderr": proc.stderr[-8000:],
                "collected": collected}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def gather(spec, check_mode):
    probe = {"read": {}, "stat": {}, "exists": {}, "units_active": {}, "units_show": {}, "models": {},
             "qairt": {}, "runs": {}, "groups": {}}
    for key, path in (spec.get("read") or {}).items():
        paths = path if isinstance(path, list) else [path]     # first existing wins (aliases)
        for candidate in paths:
            probe["read"][key] = read_text(candidate)
            if probe["read"][key].get("content") is not None:
                break
    for key, directory in (spec.get("read_dir") or {}).items():
        found = {}
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".conf"))
        except OSError:
            names = []
        for name in names:
            found[name] = read_text(os.path.join(directory, name)).get("content")
        probe.setdefault("read_dir", {})[key] = found
    for key, path in (spec.get("stat") or {}).items():
        probe["stat"][key] = stat_path(path)
    for key, paths in (spec.get("exists") or {}).items():
        probe["exists"][key] = [p for p in paths if not os.path.exists(p)]
    for name in spec.get("group_members") or []:
        try:
            probe["groups"][name] = {"exists": True, "members": grp.getgrnam(name).gr_mem}
        except KeyError:
            probe["groups"][name] = {"exists": False}
    for key, unit in (spec.get("units_active") or {}).items():
        out, _err = systemctl(["is-active", unit])
        probe["units_active"][key] = out
    for key, (unit, prop) in (spec.get("units_show") or {}).items():
        out, _err = systemctl(["show", "-p", prop, unit])
        value = None
        if out and "=" in out:
            value = out.split("=", 1)[1].strip() or None
        probe["units_show"][key] = value
    if spec.get("rlimit_memlock"):
        soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        probe["rlimit_memlock"] = {"soft": "infinity" if soft == resource.RLIM_INFINITY else soft,
                                   "hard": "infinity" if hard == resource.RLIM_INFINITY else hard}
    cache = HashCache(enabled=not spec.get("rehash"), writable=not check_mode)
    for name, mspec in (spec.get("models") or {}).items():
        probe["models"][name] = model_info(mspec, cache)
    cache.save()
    for name, qspec in (spec.get("qairt") or {}).items():
        probe["qairt"][name] = qairt_info(qspec)
    for name, rspec in (spec.get("runs") or {}).items():
        results = [run_one(rspec) for _ in range(max(1, int(rspec.get("repeat") or 1)))]
        probe["runs"][name] = results[0]
        if len(results) > 1:
            probe.setdefault("repeats", {})[name] = results
    return probe
