"""HTTP client of edge-llm-serve for board modules: health wait, endpoint/auth probe, streaming benchmark.

Shared by the ``serve`` module (fleet launch: wait for GET /health, then probe) and the ``api``
module (probe or bench on their own), so both reach the service the same way. Runs ON the board
(a loopback-only service is measured where it listens); stdlib only, a QLI image has no pip.
The bearer token is a function argument here; callers never return or log it.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import time

LOOPBACK = ("127.0.0.1", "::1", "localhost")
ANY = ("0.0.0.0", "::", "")


def local_host(bind):
    """Where a client on the board reaches a service bound to ``bind``."""
    return "127.0.0.1" if bind in ANY else bind


def endpoint(inst, address):
    """The base URL a client uses: the board's own loopback for a loopback bind, else the board's address."""
    bind = str(inst.get("bind") or "127.0.0.1")
    host = bind if bind in LOOPBACK else (address if bind in ("0.0.0.0", "::") and address else bind)
    return f"http://{host}:{int(inst['port'])}/v1"


def _conn(inst, timeout):
    return http.client.HTTPConnection(local_host(str(inst.get("bind") or "127.0.0.1")), int(inst["port"]),
                                      timeout=timeout)


def request(inst, method, path, token, body=None, timeout=30):
    """(status, raw body) of one request to the instance on the board."""
    conn = _conn(inst, timeout)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def wait_healthy(inst, retries, delay, timeout, sleep=time.sleep):
    """None once GET /health answers 200 (at most ``retries`` attempts ``delay`` s apart), else the last error.

    Bounded like the uri/until loop it replaces: a service that cannot start (its port taken, a
    missing model) fails the launch after retries x (timeout + delay) seconds instead of hanging it.
    """
    last = "no attempt"
    for attempt in range(max(1, int(retries))):
        if attempt:
            sleep(float(delay))
        try:
            status, _ = request(inst, "GET", "/health", None, timeout=float(timeout))
        except (OSError, http.client.HTTPException) as exc:
            last = f"{type(exc).__name__}: {exc}"
            continue
        if status == 200:
            return None
        last = f"HTTP {status}"
    return last


def stream_once(inst, token, prompt, max_tokens, timeout):
    """One streamed chat completion: seconds to the first content chunk, tokens, decode tok/s."""
    conn = _conn(inst, timeout)
    # include_usage: the last chunk then carries usage and the service's `timing`, whose decode_tok_s is the
    # runtime's own rate on the NPU (what edge-llm-serve read from LiteRT-LM / Genie), beside the client's view
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    t0 = time.monotonic()
    first = last = runtime = None
    chunks = 0
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            event = json.loads(data)
            timing = event.get("timing")
            if isinstance(timing, dict) and timing.get("decode_tok_s") is not None:
                runtime = float(timing["decode_tok_s"])
            delta = (event.get("choices") or [{}])[0].get("delta") or {}
            if delta.get("content"):
                now = time.monotonic()
                first = first if first is not None else now
                last = now
                chunks += 1
    finally:
        conn.close()
    if first is None:
        raise RuntimeError("the stream ended without a token")
    decode = round((chunks - 1) / (last - first), 2) if chunks > 1 and last > first else None
    return {"ttft_s": round(first - t0, 4), "tokens": chunks, "decode_tok_s": decode, "runtime_decode_tok_s": runtime}


#: /proc/net/tcp's "st" column for a listening socket (include/net/tcp_states.h: TCP_LISTEN = 10)
TCP_LISTEN = "0A"


def _listening_inodes(port):
    """Inodes of every TCP socket listening on ``port`` (any address, IPv4 and IPv6), from /proc/net/tcp{,6}.

    Columns per proc(5): sl, local_address (hex addr:port), rem_address, st, ..., uid, timeout, inode.
    """
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == TCP_LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def _socket_inodes(pid):
    """Socket inodes among the open files of process ``pid`` (its /proc/<pid>/fd links "socket:[inode]")."""
    found = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for name in names:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if link.startswith("socket:["):
            found.add(link[8:-1])
    return found


def _holder(inodes):
    """'pid N (uid U)' of a process holding one of ``inodes`` (what an operator needs to find it)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _socket_inodes(entry) & inodes:
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except OSError:
                uid = "?"
            return f"pid {entry} (uid {uid})"
    return "another process"


def listener_problem(inst, systemctl="systemctl"):
    """Why the token must not be sent to the instance's port (None when its unit's own process listens there).

    A local user can bind the service's port while the service restarts; the real service then fails with
    "address in use", and a client that only knows host and port would hand the board's bearer token to the
    impostor. So before any request that carries the token, every socket listening on the port must belong
    to the main process of the instance's systemd unit (``systemctl show -p MainPID``, systemctl(1)).
    """
    port, unit = int(inst["port"]), str(inst.get("unit") or "")
    inodes = _listening_inodes(port)
    if not inodes:
        return f"nothing listens on port {port}"
    if not unit:
        return f"no unit named for port {port}: cannot tell who listens there"
    try:
        out = subprocess.run([systemctl, "show", "-p", "MainPID", "--value", unit], capture_output=True,
                             text=True, timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot ask systemd for {unit}'s process ({exc})"
    pid = out if out.isdigit() else "0"
    stray = inodes - (_socket_inodes(pid) if pid != "0" else set())
    if stray:
        whose = f"{unit} (MainPID {pid})" if pid != "0" else f"{unit}, which is not running"
        return (f"port {port} is held by {_holder(stray)}, not by {whose}: the token was not sent "
                f"(another process took the port; stop it and restart {unit})")
    return None


def read_token(path):
    """The token in ``path`` (None if it cannot be read or is empty)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def probe(instances, token, address):
    """Endpoints and auth of each instance: the board's token accepted, a request without it refused (401)."""
    endpoints, problems = {}, []
    for inst in instances:
        model = str(inst["model"])
        endpoints[model] = endpoint(inst, address)
        why = listener_problem(inst)
        if why:
            problems.append(f"{model}: {why}")
            continue
        try:
            ok, _ = request(inst, "GET", "/v1/models", token)
            anon, _ = request(inst, "GET", "/v1/models", None)
        except (OSError, http.client.HTTPException) as exc:
            problems.append(f"{model}: {exc}")
            continue
        if ok != 200:
            problems.append(f"{model}: GET /v1/models with the board's token answered {ok}")
        if anon != 401:
            problems.append(f"{model}: GET /v1/models without a token answered {anon}, not 401")
    return {"kind": "launch", "endpoints": endpoints, "auth": "bearer"}, problems


def bench(instances, token, address, runs, prompt, max_tokens, timeout):
    """``runs`` streamed chat completions per instance: per-run figures and medians of TTFT and decode."""
    out = {}
    for inst in instances:
        done, errors = [], []
        why = listener_problem(inst)
        for _ in range(0 if why else max(1, int(runs))):
            try:
                done.append(stream_once(inst, token, prompt, int(max_tokens), int(timeout)))
            except (OSError, ValueError, RuntimeError, http.client.HTTPException) as exc:
                errors.append(str(exc)[:200])
        ttfts = [r["ttft_s"] for r in done]
        decs = [r["decode_tok_s"] for r in done if r["decode_tok_s"] is not None]
        rts = [r["runtime_decode_tok_s"] for r in done if r["runtime_decode_tok_s"] is not None]
        errors += [why] if why else []
        out[str(inst["model"])] = {
            "endpoint": endpoint(inst, address), "n": len(done), "failed": len(errors), "errors": errors[:3],
            "runs": done, "median_ttft_s": round(statistics.median(ttfts), 4) if ttfts else None,
            "median_decode_tok_s": round(statistics.median(decs), 2) if decs else None,
            "median_runtime_decode_tok_s": round(statistics.median(rts), 2) if rts else None}
    problems = [f"{m}: {b['failed']} of {b['n'] + b['failed']} streamed requests failed ({b['errors'][0]})"
                for m, b in out.items() if b["failed"]]
    return {"kind": "api_benchmark", "api": out}, problems


#: the options of one streamed API bench, for edge_llm.fleet.api (mode=bench) and edge_llm.fleet.verify's
#: api option alike (AnsibleModule argument spec entries)
BENCH_OPTIONS = {
    "runs": {"type": "int", "default": 3},
    "prompt": {"type": "str", "default": "Explain in two sentences what an NPU is."},
    "max_tokens": {"type": "int", "default": 64},
    "timeout": {"type": "int", "default": 120},
    "health_retries": {"type": "int", "default": 0},
    "health_delay": {"type": "float", "default": 2},
    "health_timeout": {"type": "float", "default": 5},
}


def bench_options(p, token):
    """:func:`bench_when_healthy` for validated :data:`BENCH_OPTIONS` ``p`` (with instances and address)."""
    return bench_when_healthy(p["instances"], token, p["address"], p["runs"], p["prompt"], p["max_tokens"],
                              p["timeout"], (p["health_retries"], p["health_delay"], p["health_timeout"]))


def bench_when_healthy(instances, token, address, runs, prompt, max_tokens, timeout, health=(0, 2, 5)):
    """:func:`bench` over the instances whose GET /health answers 200. With ``health`` retries (retries, delay,
    timeout), first wait (bounded) for each instance -- a service that just booted is still loading its model --
    and report one that never answered as failed, so a caller needs no separate wait task per board."""
    retries, delay, health_timeout = health
    up, down = [], {}
    for inst in instances:
        why = wait_healthy(inst, retries, delay, health_timeout) if retries else None
        if why is None:
            up.append(inst)
        else:
            down[str(inst["model"])] = why
    payload, problems = bench(up, token, address, runs, prompt, max_tokens, timeout) if up else (
        {"kind": "api_benchmark", "api": {}}, [])
    for model, why in down.items():
        payload["api"][model] = {"n": 0, "failed": 1, "errors": [f"GET /health never answered 200 ({why})"]}
        problems.append(f"{model}: GET /health never answered 200 ({why})")
    return payload, problems
