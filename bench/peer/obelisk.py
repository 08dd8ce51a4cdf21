#!/usr/bin/env python3
"""cairn beside Obelisk, side by side on this machine, through each one's
own HTTP API from the same client (stdlib only; keep-alive connections with
TCP_NODELAY), each server run with its defaults on a fresh home/database.

    python3 bench/peer/obelisk.py [--obelisk /tmp/obelisk/bin/obelisk] \
        [--cairn target/release/cairn] [--quick] [--json FILE]

(without --obelisk: cairn's figures alone, for a before/after of cairn)

Build the peer once (never vendored, never in CI or the test suite):
    apt-get install protobuf-compiler
    CARGO_TARGET_DIR=/tmp/obelisk-target cargo install obelisk --locked \
        --version 0.38.3 --root /tmp/obelisk      # ~20-40 min on 2 cores
(0.38.3 is the newest whose rust-version Rust 1.95 meets.) The Obelisk side
runs bench/peer/obelisk-workflow, built here for wasm32-wasip2 against the
WIT that ships in the obelisk crate's sources (copied from cargo's
registry into its wit/deps/).

Figures (cairn's controller / Obelisk's workflow):
  trivial run     echo, via POST /v1/chat/completions  /  noop, via
                  POST /v1/executions?follow=true: submit -> finished, a
                  new connection per run
  throughput      1,000 trivial runs from 50 concurrent clients
  durable steps   one run of 1,000: bench-emit's emits  /  random-u64 calls
                  (Obelisk's default batching of non-blocking events)
  recovery        100 runs each waiting on two 500 ms durable timers (the
                  test guest `counter`'s decision timeouts / workflow
                  sleeps), SIGKILLed 300 ms in; restart -> all finished
  first run       process start -> first trivial run finished, on a
                  restart of a home/database that has run before

Output: a table on stdout; with --json, {"version": 1, "rows": [{"figure",
"unit", "cairn", "obelisk", "ratio", "better"}]} where ratio is
cairn / obelisk.
"""

import argparse
import glob
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKFLOW = os.path.join(ROOT, "bench", "peer", "obelisk-workflow")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Conn:
    """An HTTP/1.1 client connection with TCP_NODELAY: kept alive, or
    (`fresh`) a new connection per request — Obelisk's streamed responses
    stall ~40 ms on a reused connection (it does not set TCP_NODELAY), so
    the run figures use fresh connections on both sides."""

    def __init__(self, port, fresh=False):
        self.port = port
        self.fresh = fresh
        self.c = None

    def request(self, method, path, body=None, ctype="application/json"):
        if self.fresh and self.c is not None:
            self.c.close()
            self.c = None
        for attempt in range(2):
            if self.c is None:
                self.c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                self.c.connect()
                self.c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
                headers = {"accept": "application/json"}
                if data is not None:
                    headers["content-type"] = ctype
                self.c.request(method, path, body=data, headers=headers)
                r = self.c.getresponse()
                raw = r.read()
                return r.status, raw
            except (http.client.HTTPException, ConnectionError, OSError):
                self.c.close()
                self.c = None
                if attempt == 1:
                    raise
        raise RuntimeError("unreachable")

    def json(self, method, path, body=None, ok=(200, 201, 202)):
        status, raw = self.request(method, path, body)
        if status not in ok:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {raw[:400]!r}")
        return json.loads(raw) if raw.strip() else None


def wait_port(port, proc, what, deadline=120):
    start = time.monotonic()
    while time.monotonic() - start < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.005)
    raise RuntimeError(f"{what} did not listen on {port}")


class Cairn:
    name = "cairn"

    def __init__(self, binary, work):
        self.binary = binary
        self.home = os.path.join(work, "cairn-home")
        self.port = free_port()
        self.proc = None
        self.counter = None

    def start(self):
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--home", self.home, "--listen", f"127.0.0.1:{self.port}",
             "--insecure-local"],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(os.path.dirname(self.home), "cairn.log"), "ab"),
        )
        wait_port(self.port, self.proc, "cairn serve")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()

    def trivial(self, c):
        out = c.json("POST", "/v1/chat/completions", {
            "model": "echo", "messages": [{"role": "user", "content": "hi"}]})
        assert out["choices"][0]["message"]["content"], out

    def steps(self, c, n):
        out = c.json("POST", "/v1/chat/completions", {
            "model": "bench-emit", "messages": [{"role": "user", "content": str(n)}]})
        assert out["choices"][0]["message"]["content"] == str(n), out

    def prepare_nap(self, c):
        guest = os.path.join(ROOT, "target", "wasm-guests", "wasm32-wasip2", "release", "counter.wasm")
        if not os.path.exists(guest):
            raise RuntimeError(f"{guest} is missing: build cairn first (cargo build --release)")
        with open(guest, "rb") as f:
            self.counter = c.json("POST", "/v1/components", f.read())["digest"]

    def submit_nap(self, c):
        out = c.json("POST", "/v1/runs", {"component": self.counter, "prompt": "3 1 500"})
        return out["run_id"]

    def finished(self, c, run):
        status, raw = c.request("GET", f"/v1/runs/{run}")
        if status != 200:
            return False
        facts = json.loads(raw).get("facts")
        if facts and facts.get("status") != "finished":
            raise RuntimeError(f"run {run} ended {facts.get('status')}")
        return bool(facts)


class Obelisk:
    name = "obelisk"

    def __init__(self, binary, work, wasm):
        self.binary = binary
        self.work = work
        self.port = free_port()
        self.proc = None
        self.server = os.path.join(work, "server.toml")
        self.deployment = os.path.join(work, "deployment.toml")
        with open(self.server, "w") as f:
            f.write(
                f'api.listening_addr = "127.0.0.1:{self.port}"\n'
                "webui.enabled = false\n"
                "external.enabled = false\n"
                f'database.sqlite.directory = "{work}/sqlite"\n'
                "[wasm]\n"
                f'cache_directory = "{work}/wasm-cache"\n'
                "[wasm.codegen_cache]\n"
                f'directory = "{work}/codegen-cache"\n'
            )
        with open(self.deployment, "w") as f:
            f.write(
                "[[workflow_wasm]]\n"
                'name = "trivial"\n'
                f'location = "{wasm}"\n'
                "stub_wasi = true\n"
            )

    def start(self):
        self.proc = subprocess.Popen(
            [self.binary, "server", "run", "--server-config", self.server,
             "--deployment", self.deployment],
            cwd=self.work,
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.work, "obelisk.log"), "ab"),
        )
        wait_port(self.port, self.proc, "obelisk server run")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()

    def _follow(self, c, fn, params):
        out = c.json("POST", "/v1/executions?follow=true",
                     {"ffqn": f"bench:trivial/workflow.{fn}", "params": params})
        return out

    def trivial(self, c):
        out = self._follow(c, "noop", ["hi"])
        assert out == {"ok": "hi"}, out

    def steps(self, c, n):
        self._follow(c, "steps", [n])

    def prepare_nap(self, c):
        pass

    def submit_nap(self, c):
        out = c.json("POST", "/v1/executions",
                     {"ffqn": "bench:trivial/workflow.nap", "params": [1000]})
        return out["ok"]

    def finished(self, c, eid):
        status, raw = c.request("GET", f"/v1/executions/{eid}/status")
        if status != 200:
            return False
        text = raw.decode()
        if '"finished"' not in text:
            return False
        if '"ok"' not in text:
            raise RuntimeError(f"execution {eid} did not end ok: {text[:300]}")
        return True


def build_workflow(obelisk_bin):
    version = subprocess.run([obelisk_bin, "--version"], capture_output=True, text=True).stdout.split()[-1]
    registry = os.path.expanduser("~/.cargo/registry/src")
    wit = sorted(glob.glob(f"{registry}/*/obelisk-{version}/wit"))
    if not wit:
        raise RuntimeError(f"obelisk {version}'s sources are not in {registry}: build it with cargo install")
    deps = os.path.join(WORKFLOW, "wit", "deps")
    shutil.rmtree(deps, ignore_errors=True)
    os.makedirs(deps)
    for pkg in ("obelisk_types@4.2.0", "obelisk_workflow@5.1.0"):
        shutil.copytree(os.path.join(wit[0], pkg), os.path.join(deps, pkg))
    target = os.path.join(ROOT, "target", "peer")
    subprocess.run(["cargo", "build", "--release", "--target", "wasm32-wasip2"],
                   cwd=WORKFLOW, env={**os.environ, "CARGO_TARGET_DIR": target}, check=True)
    return version, os.path.join(target, "wasm32-wasip2", "release", "bench_obelisk_workflow.wasm")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def measure(server, quick):
    """Every figure of one server; returns {figure: value}."""
    out = {}
    server.start()
    c = Conn(server.port)
    for _ in range(20):
        server.trivial(c)
    server.prepare_nap(c)
    # Latency, one client, sequential, a connection per run.
    n = 100 if quick else 300
    c = Conn(server.port, fresh=True)
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        server.trivial(c)
        lat.append((time.perf_counter() - t) * 1000)
    out["p50"], out["p99"] = pct(lat, 50), pct(lat, 99)
    log(f"{server.name}: trivial run p50 {out['p50']:.2f} ms, p99 {out['p99']:.2f} ms")
    # Throughput: 50 clients.
    total = 300 if quick else 1000
    conns = [Conn(server.port, fresh=True) for _ in range(50)]
    lock = threading.Lock()
    left = [total]

    def client(conn):
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            server.trivial(conn)

    # Three rounds in a row: a server whose throughput falls as its
    # unwritten bytes pile up shows it in the later rounds.
    rounds = []
    for _ in range(3):
        left[0] = total
        t = time.perf_counter()
        with ThreadPoolExecutor(50) as pool:
            list(pool.map(client, conns))
        rounds.append(total / (time.perf_counter() - t))
    out["throughput"] = statistics.median(rounds)
    out["throughput_min"] = min(rounds)
    log(f"{server.name}: {total} runs from 50 clients, three rounds: "
        + ", ".join(f"{r:.0f}" for r in rounds) + " runs/s")
    # Durable steps.
    steps = []
    for _ in range(3 if quick else 5):
        t = time.perf_counter()
        server.steps(c, 1000)
        steps.append(1000 / (time.perf_counter() - t))
    out["steps"] = statistics.median(steps)
    log(f"{server.name}: 1,000 durable steps in one run: {out['steps']:.0f} steps/s")
    # Recovery of 100 interrupted runs.
    runs = [server.submit_nap(c) for _ in range(100)]
    time.sleep(0.3)
    server.kill()
    t = time.perf_counter()
    server.start()
    c = Conn(server.port)
    pending = list(runs)
    while pending:
        pending = [r for r in pending if not server.finished(c, r)]
        if time.perf_counter() - t > 120:
            raise RuntimeError(f"{server.name}: {len(pending)} runs never finished after the restart")
        if pending:
            time.sleep(0.01)
    out["recovery"] = time.perf_counter() - t
    log(f"{server.name}: 100 interrupted runs finished {out['recovery']:.2f} s after the restart")
    # First run after a start (of a home/database that has run before).
    firsts = []
    for _ in range(2 if quick else 3):
        server.stop()
        t = time.perf_counter()
        server.start()
        c = Conn(server.port)
        server.trivial(c)
        firsts.append((time.perf_counter() - t) * 1000)
    out["first"] = statistics.median(firsts)
    log(f"{server.name}: first run after start {out['first']:.0f} ms")
    server.stop()
    return out


FIGURES = [
    ("p50", "trivial run, submit -> finished, p50", "ms", "lower"),
    ("p99", "trivial run, submit -> finished, p99", "ms", "lower"),
    ("throughput", "1,000 trivial runs, 50 clients (median of 3 rounds)", "runs/s", "higher"),
    ("throughput_min", "1,000 trivial runs, 50 clients (slowest round)", "runs/s", "higher"),
    ("steps", "1,000 durable steps in one run", "steps/s", "higher"),
    ("recovery", "100 interrupted runs, restart -> all finished", "s", "lower"),
    ("first", "first run after start", "ms", "lower"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--obelisk", help="the obelisk binary (without it: cairn's figures alone)")
    ap.add_argument("--cairn", default=os.path.join(ROOT, "target", "release", "cairn"))
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args()
    version, wasm = build_workflow(args.obelisk) if args.obelisk else (None, None)
    if args.obelisk:
        log(f"obelisk {version}, workflow {wasm}")
    work = tempfile.mkdtemp(prefix="cairn-peer-", dir=os.path.join(ROOT, "target"))
    try:
        os.makedirs(os.path.join(work, "cairn"))
        os.makedirs(os.path.join(work, "obelisk"))
        cairn = measure(Cairn(args.cairn, os.path.join(work, "cairn")), args.quick)
        obelisk = (measure(Obelisk(args.obelisk, os.path.join(work, "obelisk"), wasm), args.quick)
                   if args.obelisk else {})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    print(f"{'figure':<48} {'cairn':>10} {'obelisk':>10} {'ratio':>8}  unit")
    for key, figure, unit, better in FIGURES:
        peer = obelisk.get(key)
        ratio = cairn[key] / peer if peer else float("nan")
        rows.append({"figure": figure, "unit": unit, "cairn": cairn[key],
                     "obelisk": peer, "ratio": ratio, "better": better})
        print(f"{figure:<48} {cairn[key]:>10.2f} {peer if peer else float('nan'):>10.2f} "
              f"{ratio:>7.2f}x  {unit} ({better} is better)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"version": 1, "obelisk": version, "quick": args.quick, "rows": rows}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
