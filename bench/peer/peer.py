#!/usr/bin/env python3
"""cairn beside Obelisk and Restate, side by side on this machine, through
each one's own HTTP API from the same client (stdlib only; TCP_NODELAY, a
new connection per run), each server run with its defaults on a fresh
home/database. All servers run at once and the figures alternate between
them: request by request for the latencies, round by round for throughput,
run by run for the steps and first-run rows, so each sees the same machine.

    python3 bench/peer/peer.py [--obelisk /tmp/obelisk/bin/obelisk] \
        [--restate] [--cairn target/release/cairn] [--quick] [--json FILE] \
        [--settle S]

(with neither peer: cairn's figures alone, for a before/after of cairn;
`bench/peer/obelisk.py` is the old name, the same as `--obelisk`.)

Build/install the peers once (never vendored, never in CI or the tests):
  Obelisk  apt-get install protobuf-compiler
           CARGO_TARGET_DIR=/tmp/obelisk-target cargo install obelisk --locked \
               --version 0.38.3 --root /tmp/obelisk      # ~20-40 min on 2 cores
           (0.38.3 is the newest whose rust-version Rust 1.95 meets.) It runs
           bench/peer/obelisk-workflow, built here for wasm32-wasip2 against
           the WIT that ships in the obelisk crate's sources.
  Restate  --restate installs bench/peer/restate-service (the server from
           npm's @restatedev/restate-server 1.7.12 and a Node service on
           @restatedev/restate-sdk, pinned by its package-lock.json) into
           target/peer/restate-service with `npm ci` (needs Node 20+).

Figures (cairn's controller / Obelisk's workflow / Restate's handler):
  trivial run     echo, via POST /v1/chat/completions  /  noop, via
                  POST /v1/executions?follow=true  /  noop, via POST
                  /bench/noop: submit -> finished
  throughput      1,000 trivial runs from 50 concurrent clients, three
                  rounds per server, rounds alternating between servers
  server CPU      during those rounds, the server's user + system CPU time
                  (Restate: server + service) / the runs it served
  durable steps   one run of 1,000: bench-emit's emits  /  random-u64
                  calls  /  ctx.run closures
  recovery        100 runs each waiting on two 500 ms durable timers (the
                  test guest `parent`'s sleeps / workflow sleeps /
                  ctx.sleep), SIGKILLed 300 ms in; restart -> all
                  finished (Restate: its server killed, the service kept)
  first run       process start -> first trivial run finished, on a
                  restart of a home/database that has run before
  memory          resident memory grown per waiting execution: 900 runs
                  each waiting on a 120 s timer, (RSS after - RSS before) /
                  900 (Restate: server + service; cairn with its
                  defaults evicts a run waiting on a timer that far away
                  and restores it by replay when it is due,
                  `[runs] evict_idle_ms`)

Before the first figure the servers wait --settle seconds (default 370): on
ext4 without a journal, files deleted recently (the last run's work
directory) slow every inode allocation, which costs cairn (a dozen inodes
a new session) and not the peers (one database file);
`bench/peer/deleted.py` measures that effect on its own. Recently is a
minute, or six while the inode table's block is dirty — as it stays under
load (ext4's `recently_deleted`: 60 s, plus 300 s for a dirty block): a
second run one minute after the first measured cairn's 50-client row at
0.81x Obelisk where runs that waited six minutes measured 0.97-0.98x
(`docs/bench/peer-round10-run{1,2,3}.json`).

After that wait and before the latency samples, each server gets five
trivial runs, alternating: the first request after minutes idle is a cold
start (19 ms for cairn in one run, where it set the p99), which the
"first run after start" row measures on its own.

Output: a table on stdout; with --json, {"version": 2, "obelisk", "restate",
"quick", "settle_s", "rows": [{"figure", "unit", "better", "cairn", "obelisk",
"restate", "ratio_obelisk", "ratio_restate"}], "latencies_ms": {server:
[ms, ...]}}, a ratio being cairn / peer (null where the peer was not run)
and `latencies_ms` each server's sequential trivial runs in the order made
(the p50/p99 rows' samples; the log names the five slowest and where in
the order they came).
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
RESTATE_SERVICE = os.path.join(ROOT, "bench", "peer", "restate-service")


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


class Server:
    """What every side shares: one server process (`proc`), killed with
    SIGKILL or stopped with SIGTERM."""

    proc = None

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()

    def pids(self):
        return [self.proc.pid]

    def close(self):
        pass


class Cairn(Server):
    name = "cairn"

    def __init__(self, binary, work):
        self.binary = binary
        self.home = os.path.join(work, "cairn-home")
        self.port = free_port()
        self.proc = None
        self.parent = None

    def start(self):
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--home", self.home, "--listen", f"127.0.0.1:{self.port}",
             "--insecure-local"],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(os.path.dirname(self.home), "cairn.log"), "ab"),
        )
        wait_port(self.port, self.proc, "cairn serve")


    def trivial(self, c):
        out = c.json("POST", "/v1/chat/completions", {
            "model": "echo", "messages": [{"role": "user", "content": "hi"}]})
        assert out["choices"][0]["message"]["content"], out

    def steps(self, c, n):
        out = c.json("POST", "/v1/chat/completions", {
            "model": "bench-emit", "messages": [{"role": "user", "content": str(n)}]})
        assert out["choices"][0]["message"]["content"] == str(n), out

    def prepare_nap(self, c):
        guest = os.path.join(ROOT, "target", "wasm-guests", "wasm32-wasip2", "release", "parent.wasm")
        if not os.path.exists(guest):
            raise RuntimeError(f"{guest} is missing: build cairn first (cargo build --release)")
        with open(guest, "rb") as f:
            self.parent = c.json("POST", "/v1/components", f.read())["digest"]

    def submit_nap(self, c, ms=1000):
        naps = json.dumps([{"sleep": ms // 2}, {"sleep": ms // 2}])
        out = c.json("POST", "/v1/runs", {"component": self.parent, "prompt": naps})
        return out["run_id"]

    def finished(self, c, run):
        status, raw = c.request("GET", f"/v1/runs/{run}")
        if status != 200:
            return False
        facts = json.loads(raw).get("facts")
        if facts and facts.get("status") != "finished":
            raise RuntimeError(f"run {run} ended {facts.get('status')}")
        return bool(facts)


class Obelisk(Server):
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

    def submit_nap(self, c, ms=1000):
        out = c.json("POST", "/v1/executions",
                     {"ffqn": "bench:trivial/workflow.nap", "params": [ms]})
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

class Restate(Server):
    """Restate's server (the binary from npm, run directly so a kill reaches
    it) and a Node service registered with it as a deployment; a kill or a
    restart is the server's, the service (user code) keeps running."""

    name = "restate"

    def __init__(self, work, service_dir):
        self.work = work
        self.service_dir = service_dir
        self.binary = os.path.join(service_dir, "node_modules", "@restatedev",
                                   "restate-server-linux-x64", "bin", "restate-server")
        self.port = free_port()
        self.admin = free_port()
        self.service_port = free_port()
        self.config = os.path.join(work, "restate.toml")
        with open(self.config, "w") as f:
            f.write(
                f'base-dir = "{work}/data"\n'
                "disable-telemetry = true\n"
                f'bind-address = "127.0.0.1:{free_port()}"\n'
                'log-filter = "error"\n'
                "[ingress]\n"
                f'bind-address = "127.0.0.1:{self.port}"\n'
                "[admin]\n"
                f'bind-address = "127.0.0.1:{self.admin}"\n'
                "disable-web-ui = true\n"
            )
        self.proc = None
        self.service = None
        self.registered = False

    def start(self):
        if self.service is None:
            self.service = subprocess.Popen(
                ["node", "service.mjs", str(self.service_port)], cwd=self.service_dir,
                env={**os.environ, "RESTATE_LOGGING": "ERROR"},
                stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(self.work, "service.log"), "ab"))
            wait_port(self.service_port, self.service, "the Restate service")
        self.proc = subprocess.Popen(
            [self.binary, "--no-logo", "--config-file", self.config], cwd=self.work,
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.work, "restate.log"), "ab"))
        wait_port(self.admin, self.proc, "restate-server (admin)")
        wait_port(self.port, self.proc, "restate-server (ingress)")
        if not self.registered:
            admin = Conn(self.admin)
            deadline = time.monotonic() + 60
            while True:
                status, raw = admin.request(
                    "POST", "/deployments", {"uri": f"http://127.0.0.1:{self.service_port}"})
                if status in (200, 201):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"registering the Restate service: HTTP {status}: {raw[:300]!r}")
                time.sleep(0.1)
            self.registered = True


    def close(self):
        if self.service is not None:
            self.service.terminate()
            self.service.wait()

    def pids(self):
        return [self.proc.pid, self.service.pid]

    def trivial(self, c):
        out = c.json("POST", "/bench/noop", "hi")
        assert out == "hi", out

    def steps(self, c, n):
        c.json("POST", "/bench/steps", n)

    def prepare_nap(self, c):
        pass

    def submit_nap(self, c, ms=1000):
        return c.json("POST", "/bench/nap/send", ms // 2)["invocationId"]

    def finished(self, c, inv):
        status, raw = c.request("GET", f"/restate/invocation/{inv}/output")
        if status == 200:
            return True
        if status in (470, 404, 503):
            return False
        raise RuntimeError(f"invocation {inv}: HTTP {status}: {raw[:300]!r}")


def install_restate():
    """bench/peer/restate-service installed under target/peer with npm ci."""
    dest = os.path.join(ROOT, "target", "peer", "restate-service")
    os.makedirs(dest, exist_ok=True)
    for name in ("package.json", "package-lock.json", "service.mjs"):
        shutil.copy(os.path.join(RESTATE_SERVICE, name), dest)
    if not os.path.exists(os.path.join(dest, "node_modules", "@restatedev", "restate-server-linux-x64")):
        log("installing the Restate server and SDK (npm ci)")
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=dest, check=True)
    return dest


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


def cpu_s(pids):
    """CPU seconds (user + system) the processes `pids` have used."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def rss_kib(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def await_all(server, runs, since, limit=120):
    c = Conn(server.port)
    pending = list(runs)
    while pending:
        pending = [r for r in pending if not server.finished(c, r)]
        if time.perf_counter() - since > limit:
            raise RuntimeError(f"{server.name}: {len(pending)} runs never finished after the restart")
        if pending:
            time.sleep(0.01)
    return time.perf_counter() - since


def measure(servers, quick, settle=0.0):
    """Every figure of every server, alternating; returns {name: {figure: value}}.
    `settle`: seconds to wait, servers up, before the first figure."""
    out = {s.name: {} for s in servers}
    for s in servers:
        s.start()
        c = Conn(s.port)
        for _ in range(20):
            s.trivial(c)
        s.prepare_nap(c)
    fresh = {s.name: Conn(s.port, fresh=True) for s in servers}
    if settle > 0:
        # Files deleted just before (the previous run's work directory)
        # slow every inode allocation for a minute on ext4 without a
        # journal, and cairn allocates about a dozen a new session:
        # `deleted.py` measures that on its own.
        log(f"waiting {settle:.0f} s for the filesystem to settle (nothing deleted meanwhile)")
        time.sleep(settle)
        # The first request after minutes idle is a cold start of its own
        # (19 ms for cairn, 6 for Obelisk, 10 for Restate in one run whose
        # p99 it set; "first run after start" is the row for cold starts):
        # five each, alternating, before the samples.
        for _ in range(5):
            for s in servers:
                s.trivial(fresh[s.name])
    # Latency: one client, sequential, requests alternating between servers.
    n = 100 if quick else 300
    lat = {s.name: [] for s in servers}
    for _ in range(n):
        for s in servers:
            t = time.perf_counter()
            s.trivial(fresh[s.name])
            lat[s.name].append((time.perf_counter() - t) * 1000)
    for s in servers:
        o = out[s.name]
        o["p50"], o["p99"] = pct(lat[s.name], 50), pct(lat[s.name], 99)
        o["latencies"] = lat[s.name]
        slowest = sorted(range(n), key=lambda i: -lat[s.name][i])[:5]
        log(f"{s.name}: trivial run p50 {o['p50']:.2f} ms, p99 {o['p99']:.2f} ms; slowest: "
            + ", ".join(f"#{i + 1} {lat[s.name][i]:.1f} ms" for i in slowest))
    # Throughput: 50 clients, three rounds each, rounds alternating — a
    # server whose throughput falls as its unwritten bytes pile up shows it
    # in its later rounds. Which server goes first turns with each round:
    # the first to follow the latency phase shares the machine with what
    # the others still do after it (a database's flushes and compactions),
    # and before round thirteen cairn was always that one.
    total = 300 if quick else 1000
    rounds = {s.name: [] for s in servers}
    cpu = {s.name: 0.0 for s in servers}
    for r in range(3):
        for s in servers[r % len(servers):] + servers[:r % len(servers)]:
            conns = [Conn(s.port, fresh=True) for _ in range(50)]
            lock = threading.Lock()
            left = [total]

            def client(conn, s=s, lock=lock, left=left):
                while True:
                    with lock:
                        if left[0] == 0:
                            return
                        left[0] -= 1
                    s.trivial(conn)

            c0 = cpu_s(s.pids())
            t = time.perf_counter()
            with ThreadPoolExecutor(50) as pool:
                list(pool.map(client, conns))
            rounds[s.name].append(total / (time.perf_counter() - t))
            cpu[s.name] += cpu_s(s.pids()) - c0
    for s in servers:
        r = rounds[s.name]
        out[s.name]["throughput"] = statistics.median(r)
        out[s.name]["throughput_min"] = min(r)
        out[s.name]["cpu_per_run"] = cpu[s.name] * 1000 / (3 * total)
        log(f"{s.name}: {total} runs from 50 clients, three rounds: "
            + ", ".join(f"{x:.0f}" for x in r) + " runs/s, "
            + f"server CPU {out[s.name]['cpu_per_run']:.2f} ms a run")
    # Durable steps, runs alternating.
    steps = {s.name: [] for s in servers}
    for _ in range(3 if quick else 5):
        for s in servers:
            t = time.perf_counter()
            s.steps(fresh[s.name], 1000)
            steps[s.name].append(1000 / (time.perf_counter() - t))
    for s in servers:
        out[s.name]["steps"] = statistics.median(steps[s.name])
        log(f"{s.name}: 1,000 durable steps in one run: {out[s.name]['steps']:.0f} steps/s")
    # Recovery of 100 interrupted runs, one server at a time (the others idle).
    for s in servers:
        c = Conn(s.port)
        runs = [s.submit_nap(c) for _ in range(100)]
        time.sleep(0.3)
        s.kill()
        t = time.perf_counter()
        s.start()
        out[s.name]["recovery"] = await_all(s, runs, t)
        log(f"{s.name}: 100 interrupted runs finished {out[s.name]['recovery']:.2f} s after the restart")
    # First run after a start (of a home/database that has run before),
    # restarts alternating.
    firsts = {s.name: [] for s in servers}
    for _ in range(2 if quick else 3):
        for s in servers:
            s.stop()
            t = time.perf_counter()
            s.start()
            s.trivial(Conn(s.port))
            firsts[s.name].append((time.perf_counter() - t) * 1000)
    for s in servers:
        out[s.name]["first"] = statistics.median(firsts[s.name])
        log(f"{s.name}: first run after start {out[s.name]['first']:.0f} ms")
    # Memory per waiting execution.
    # (900: cairn's default quota of live runs on this 2-core machine is 984.)
    waiting = 300 if quick else 900
    for s in servers:
        c = Conn(s.port)
        time.sleep(1.0)
        before = rss_kib(s.pids())
        for _ in range(waiting):
            s.submit_nap(c, 240_000)
        time.sleep(2.0)
        after = rss_kib(s.pids())
        out[s.name]["memory"] = (after - before) / waiting
        log(f"{s.name}: {waiting} waiting runs: RSS {before / 1024:.0f} -> {after / 1024:.0f} MiB, "
            f"{out[s.name]['memory']:.1f} KiB each")
        s.stop()
        s.close()
    return out


FIGURES = [
    ("p50", "trivial run, submit -> finished, p50", "ms", "lower"),
    ("p99", "trivial run, submit -> finished, p99", "ms", "lower"),
    ("throughput", "1,000 trivial runs, 50 clients (median of 3 rounds)", "runs/s", "higher"),
    ("throughput_min", "1,000 trivial runs, 50 clients (slowest round)", "runs/s", "higher"),
    ("cpu_per_run", "server CPU per run, 50 clients", "ms", "lower"),
    ("steps", "1,000 durable steps in one run", "steps/s", "higher"),
    ("recovery", "100 interrupted runs, restart -> all finished", "s", "lower"),
    ("first", "first run after start", "ms", "lower"),
    ("memory", "memory per waiting execution", "KiB", "lower"),
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--obelisk", help="the obelisk binary")
    ap.add_argument("--restate", action="store_true", help="run Restate too (installs it with npm)")
    ap.add_argument("--cairn", default=os.path.join(ROOT, "target", "release", "cairn"))
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--settle", type=float, default=None,
                    help="seconds to wait before the first figure, after anything this run or "
                         "the last deleted (default 370; 0 with --quick)")
    args = ap.parse_args(argv)
    settle = args.settle if args.settle is not None else (0.0 if args.quick else 370.0)
    version, wasm = build_workflow(args.obelisk) if args.obelisk else (None, None)
    if args.obelisk:
        log(f"obelisk {version}, workflow {wasm}")
    service = install_restate() if args.restate else None
    work = tempfile.mkdtemp(prefix="cairn-peer-", dir=os.path.join(ROOT, "target"))
    servers = []
    try:
        for name in ("cairn", "obelisk", "restate"):
            os.makedirs(os.path.join(work, name))
        servers.append(Cairn(args.cairn, os.path.join(work, "cairn")))
        if args.obelisk:
            servers.append(Obelisk(args.obelisk, os.path.join(work, "obelisk"), wasm))
        if service:
            servers.append(Restate(os.path.join(work, "restate"), service))
        figures = measure(servers, args.quick, settle)
    finally:
        for s in servers:
            for proc in (s.proc, getattr(s, "service", None)):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    peers = [s.name for s in servers[1:]]
    rows = []
    print(f"{'figure':<52} {'cairn':>9} " + " ".join(f"{p:>9} {'ratio':>7}" for p in peers) + "  unit")
    for key, figure, unit, better in FIGURES:
        mine = figures["cairn"][key]
        row = {"figure": figure, "unit": unit, "better": better, "cairn": mine}
        line = f"{figure:<52} {mine:>9.2f} "
        for p in ("obelisk", "restate"):
            peer = figures.get(p, {}).get(key)
            row[p] = peer
            row[f"ratio_{p}"] = mine / peer if peer else None
            if p in peers:
                line += f"{peer:>9.2f} {mine / peer if peer else float('nan'):>6.2f}x "
        rows.append(row)
        print(line + f" {unit} ({better} is better)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"version": 2, "obelisk": version, "settle_s": settle,
                       "restate": "1.7.12" if service else None,
                       "quick": args.quick, "rows": rows,
                       "latencies_ms": {s.name: figures[s.name]["latencies"] for s in servers}},
                      f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
