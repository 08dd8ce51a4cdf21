#!/usr/bin/env python3
"""Kill a cairn server with SIGKILL at the Nth call of each syscall while it
starts a run of an existing session (`POST /v1/runs`, or with `--start chat`
a `POST /v1/chat/completions` naming it; with `--session new` the start
creates the session), restart it,
and check the home: every run ends, an acknowledged run is kept, the
journal's seqs are dense, generations are reserved once each and rising, a
later run of the session finishes, and no worker is left with a `creating`
marker (a new session's goes before its worker leaves the live index).

    python3 bench/faults/kill_at_syscalls.py --cairn target/release/cairn \
        [--start runs|chat] [--session existing|new] [--syscalls fdatasync,mkdirat,...] \
        [--most 40] [--json out.json]

Needs `strace` (its `inject=SYSCALL:signal=SIGKILL:when=N`, attached to the
running server, so N counts from the request). Not part of the test suite:
one pass of the default syscalls takes a few minutes. Exits 1 when a check
fails; `--json` writes every case as {syscall, when, killed, answered, ok,
detail}.
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, time, urllib.error, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peer"))
import peer  # noqa: E402  (free_port, wait_port)

DEFAULT = "statx,write,fdatasync,mkdirat,openat2,renameat,pwrite64,unlinkat,linkat,fcntl,close"


def call(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                               headers={"content-type": "application/json"})
    with urllib.request.urlopen(r, timeout=20) as resp:
        return resp.status, json.loads(resp.read() or b"null")


def serve(binary, home):
    port = peer.free_port()
    proc = subprocess.Popen([binary, "serve", "--home", home, "--listen", f"127.0.0.1:{port}",
                             "--insecure-local"], stdout=subprocess.DEVNULL,
                            stderr=open(home + ".log", "ab"))
    peer.wait_port(port, proc, "cairn serve")
    return proc, port


def ended(port, session, deadline=30.0, missing_ok=False):
    """The session's runs once every one has ended; with `missing_ok`, a
    session that is not there (a creation rolled back) has none."""
    t = time.monotonic()
    while True:
        try:
            _, runs = call(port, "GET", f"/v1/runs?session={session}")
        except urllib.error.HTTPError as e:
            if e.code == 404 and missing_ok:
                return []
            raise
        if all(r.get("facts") for r in runs):
            return runs
        if time.monotonic() - t > deadline:
            raise AssertionError(f"runs did not end: {[r['state'] for r in runs]}")
        time.sleep(0.05)


def entries(home):
    out = []
    workers = os.path.join(home, "workers")
    for w in os.listdir(workers):
        segments = os.path.join(workers, w, "session", "segments")
        if os.path.isdir(segments):
            for name in sorted(os.listdir(segments)):
                with open(os.path.join(segments, name)) as f:
                    out.extend(json.loads(line) for line in f if line.strip())
    return out


def start(port, how, prompt):
    """Start a run of session `s` the way `how` names; its HTTP status."""
    if how == "chat":
        data = json.dumps({"model": "echo", "messages": [{"role": "user", "content": prompt}]}).encode()
        r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=data, method="POST",
                                   headers={"content-type": "application/json", "x-cairn-session": "s"})
        with urllib.request.urlopen(r, timeout=20) as resp:
            return resp.status
    return call(port, "POST", "/v1/runs", {"component": "echo", "prompt": prompt, "session": "s"})[0]


def markers(home):
    workers = os.path.join(home, "workers")
    return [w for w in os.listdir(workers) if os.path.exists(os.path.join(workers, w, "creating"))]


def check(port, home, answered, before):
    """`before`: the runs the session had before the killed start."""
    acknowledged = answered in (200, 202)
    # Unanswered, a new session may have been rolled back.
    runs = ended(port, "s", missing_ok=before == 0 and not acknowledged)
    status, third = call(port, "POST", "/v1/runs", {"component": "echo", "prompt": "three", "session": "s"})
    assert status == 202, f"a later start was answered {status}"
    runs = ended(port, "s")
    facts = next(r["facts"] for r in runs if r["run_id"] == third["run_id"])
    assert facts["status"] == "finished", f"a later run ended {facts['status']}"
    lines = entries(home)
    seqs = [e["seq"] for e in lines]
    assert seqs == list(range(1, len(seqs) + 1)), "the journal's seqs are not dense"
    gens = [e["payload"]["event"]["generation"] for e in lines
            if e["payload"].get("event", {}).get("type") == "generation_reserved"]
    assert gens == sorted(set(gens)), f"generations reserved twice or out of order: {gens}"
    if acknowledged:
        assert len(runs) == before + 2, f"an acknowledged run was lost: {len(runs)} runs"
    left = markers(home)
    assert not left, f"workers left with a creating marker: {left}"
    return f"{len(runs)} runs {sorted(r['facts']['status'] for r in runs)}, generations {gens}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cairn", required=True)
    ap.add_argument("--start", choices=["runs", "chat"], default="runs",
                    help="how the killed start is made: POST /v1/runs (headless) or a chat call")
    ap.add_argument("--session", choices=["existing", "new"], default="existing",
                    help="whether the killed start names a session with a run, or creates it")
    ap.add_argument("--syscalls", default=DEFAULT)
    ap.add_argument("--most", type=int, default=40, help="the highest N tried for each syscall")
    ap.add_argument("--json")
    a = ap.parse_args()
    if shutil.which("strace") is None:
        sys.exit("strace is needed (apt-get install strace)")
    root = tempfile.mkdtemp(prefix="kill-at-")
    base = os.path.join(root, "base")
    proc, port = serve(a.cairn, base)
    before = 0
    if a.session == "existing":
        call(port, "POST", "/v1/runs", {"component": "echo", "prompt": "one", "session": "s"})
        ended(port, "s")
        before = 1
    proc.terminate()
    proc.wait()
    cases = []
    for syscall in a.syscalls.split(","):
        for when in range(1, a.most + 1):
            home = os.path.join(root, f"{syscall}-{when}")
            shutil.copytree(base, home, symlinks=True)
            proc, port = serve(a.cairn, home)
            tracer = subprocess.Popen(["strace", "-f", "-qq", "-o", "/dev/null", "-p", str(proc.pid),
                                       "-e", f"trace={syscall}",
                                       "-e", f"inject={syscall}:signal=SIGKILL:when={when}"],
                                      stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # attached to every thread
            try:
                answered = start(port, a.start, "two")
            except Exception as e:  # the server died before answering
                answered = f"no answer ({type(e).__name__})"
            time.sleep(0.3)
            killed = proc.poll() is not None
            if not killed:
                tracer.terminate()
                proc.terminate()
                proc.wait()
            tracer.wait()
            proc, port = serve(a.cairn, home)
            try:
                detail, ok = check(port, home, answered, before), True
            except Exception as e:
                detail, ok = str(e), False
            proc.terminate()
            proc.wait()
            case = {"syscall": syscall, "when": when, "killed": killed, "answered": answered,
                    "ok": ok, "detail": detail}
            cases.append(case)
            print(f"{syscall} #{when}: {'killed' if killed else 'not reached'}, answered {answered}: "
                  f"{'ok' if ok else 'FAILED'} ({detail})", flush=True)
            shutil.rmtree(home, ignore_errors=True)
            if not killed:
                break
    failed = [c for c in cases if not c["ok"]]
    print(f"{len(cases)} cases, {sum(c['killed'] for c in cases)} killed, {len(failed)} failed")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cairn": a.cairn, "start": a.start, "session": a.session, "cases": cases},
                      f, indent=1)
    shutil.rmtree(root, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
