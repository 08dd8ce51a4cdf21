"""Recovery figures: how fast `cairn serve` is back after a kill -9.

    python3 bench/faults/restart.py path/to/cairn [--sessions N] [--waiting W]
        [--rounds R] [--dir DIR] [--reuse] [--json FILE]

Builds a home once: N sessions of one finished `echo` run each (from 8
concurrent clients), then W `approval` runs left waiting on a decision,
and kills the server (SIGKILL). Each round copies that home (so every
round restarts the same crash), restarts `cairn serve` on it and times:

  serving    process start -> `GET /healthz` answers 200
  lookup     -> `GET /v1/runs/{id}` of an ended run (a finished echo run
             that was never looked up in this process) answers
  answered   -> every waiting run's decision is accepted (`POST
             /v1/decisions/{id}`, retried while it answers 409 restoring)
  finished   -> every waiting run is `finished`

Output: one line per round and a summary; with --json, {"version": 1,
"sessions", "waiting", "rounds": [{"serving_ms", "lookup_ms",
"answered_ms", "finished_ms"}]}. Stdlib only; kept out of CI."""
import argparse, http.client, json, os, shutil, signal, subprocess, sys, tempfile, threading, time
from concurrent.futures import ThreadPoolExecutor


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def request(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    data = None if body is None else json.dumps(body)
    c.request(method, path, body=data, headers={"content-type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    c.close()
    try:
        return r.status, json.loads(raw) if raw else None
    except ValueError:
        return r.status, raw.decode(errors="replace")


def serve(cairn, home):
    """Start `cairn serve` on `home`; returns (process, port) once it prints
    where it listens."""
    p = subprocess.Popen([cairn, "serve", "--insecure-local", "--listen", "127.0.0.1:0", "--home", home],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    url = next(w for w in line.split() if w.startswith("http://"))
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    return p, int(url.rsplit(":", 1)[1].strip("/"))


def build(cairn, home, sessions, waiting):
    p, port = serve(cairn, home)
    made = [0]
    ended = []

    def one(i):
        s, body = request(port, "POST", "/v1/runs", {"session": f"s-{i}", "component": "echo", "prompt": "hi"})
        assert s == 202, (s, body)
        made[0] += 1
        if made[0] % 1000 == 0:
            log(f"  {made[0]} sessions")
        return body["run_id"]

    with ThreadPoolExecutor(8) as pool:
        ended = list(pool.map(one, range(sessions)))
    waits = []
    for i in range(waiting):
        s, body = request(port, "POST", "/v1/runs", {"session": f"w-{i}", "component": "approval", "prompt": "ship?"})
        assert s == 202, (s, body)
        waits.append(body["run_id"])
    # Every waiting run has asked before the kill.
    deadline = time.time() + 60
    while time.time() < deadline:
        s, body = request(port, "GET", "/v1/decisions")
        if s == 200 and len(body.get("decisions", body) if isinstance(body, dict) else body) >= waiting:
            break
        time.sleep(0.1)
    # The echo runs' ends are durable (their 202s came before; wait for them).
    for run in ended[-50:]:
        request(port, "GET", f"/v1/runs/{run}")
    time.sleep(0.3)
    p.send_signal(signal.SIGKILL)
    p.wait()
    return ended, waits


def round_(cairn, base, ended, waits, scratch):
    home = os.path.join(scratch, "round")
    shutil.rmtree(home, ignore_errors=True)
    # `cp -a`: a run's worker.sock is a socket, which copytree cannot copy.
    subprocess.run(["cp", "-a", base, home], check=True)
    # The copy's pages are dirty: flush them so the restart is not timed
    # against the copy's writeback.
    os.sync()
    t0 = time.perf_counter()
    p, port = serve(cairn, home)
    while True:
        try:
            s, _ = request(port, "GET", "/healthz")
            if s == 200:
                break
        except OSError:
            pass
        time.sleep(0.002)
    serving = time.perf_counter() - t0
    s, body = request(port, "GET", f"/v1/runs/{ended[len(ended) // 2]}")
    assert s == 200, (s, body)
    lookup = time.perf_counter() - t0
    pending = set(waits)
    while pending:
        s, body = request(port, "GET", "/v1/decisions")
        items = body.get("decisions", []) if isinstance(body, dict) else (body or [])
        for d in items:
            if d.get("run_id") in pending:
                s2, _ = request(port, "POST", f"/v1/decisions/{d['decision_id']}", {"value": True})
                if s2 in (200, 202):
                    pending.discard(d["run_id"])
        if pending:
            time.sleep(0.005)
    answered = time.perf_counter() - t0
    for run in waits:
        while True:
            s, body = request(port, "GET", f"/v1/runs/{run}")
            state = body.get("state") if s == 200 else None
            if state not in (None, "running", "waiting", "starting", "preparing", "restoring"):
                assert state == "finished", body
                break
            time.sleep(0.005)
    finished = time.perf_counter() - t0
    p.send_signal(signal.SIGTERM)
    p.wait()
    return dict(serving_ms=serving * 1e3, lookup_ms=lookup * 1e3, answered_ms=answered * 1e3, finished_ms=finished * 1e3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cairn")
    ap.add_argument("--sessions", type=int, default=10000)
    ap.add_argument("--waiting", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--reuse", action="store_true",
                    help="restart the home an earlier run built in --dir (another cairn's, say)")
    a = ap.parse_args()
    scratch = a.dir or tempfile.mkdtemp(prefix="cairn-restart-")
    base = os.path.join(scratch, "base")
    meta = os.path.join(scratch, "base.json")
    if a.reuse and os.path.exists(meta):
        with open(meta) as f:
            ended, waits = json.load(f)
        log(f"reusing the home in {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(base)
        log(f"building a home of {a.sessions} sessions and {a.waiting} waiting runs in {base}")
        ended, waits = build(a.cairn, base, a.sessions, a.waiting)
        with open(meta, "w") as f:
            json.dump([ended, waits], f)
    rounds = []
    for i in range(a.rounds):
        r = round_(a.cairn, base, ended, waits, scratch)
        rounds.append(r)
        print(f"round {i + 1}: serving {r['serving_ms']:.0f} ms, lookup {r['lookup_ms']:.0f} ms, "
              f"answered {r['answered_ms']:.0f} ms, finished {r['finished_ms']:.0f} ms", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"version": 1, "sessions": a.sessions, "waiting": a.waiting, "rounds": rounds}, f, indent=1)
    if not a.dir:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
