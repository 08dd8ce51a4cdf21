#!/usr/bin/env python3
"""Two cairn binaries side by side (a before and an after), alternating
request by request and round by round so both see the same machine state
(a filesystem busy writing back, say). Stdlib only; kept out of CI.

    python3 bench/peer/ab.py BEFORE AFTER [--runs N] [--rounds R] [--json FILE]

Figures, each for both binaries:
  p50 / p99   trivial run (echo via POST /v1/chat/completions, a new
              connection per run), requests alternating between the two
  start       the answer to POST /v1/runs (echo in a new session: 202 once
              the run's first entries are durable), p50 / p99, requests
              alternating, 5 ms apart (the run ends in between)
  throughput  1,000 trivial runs from 50 concurrent clients, rounds
              alternating (before, after, then after, before, ...): the
              server that goes second in a round tends to do better, so
              the rounds are even (an odd --rounds is raised by one) and
              each binary opens half of them
  server CPU  during those rounds, each server's user + system CPU time
              (/proc/PID/stat) per run it served (median of the rounds)

With --loop-fs GIB (root only): each binary's home is on a filesystem of
its own, a fresh GIB GiB ext4 without a journal (as this VM's root is)
loop-mounted with direct I/O and `discard`, so neither's deletions slow
the other's inode allocation (ext4 without a journal skips inodes freed
in the last minutes) and both start from the same empty disk; removed
at the end.

Output: a table; with --json, {"version": 1, "before", "after", "loop_fs_gib", "rows":
[{"figure", "unit", "before", "after", "ratio"}], "throughput_rounds",
"cpu_ms_rounds": {"before": [...], "after": [...]}} (ratio = after/before)."""

import argparse, http.client, json, os, shutil, socket, statistics, subprocess, sys, tempfile, threading, time
from concurrent.futures import ThreadPoolExecutor


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def post(port, path, payload, status):
    """POST `payload` on a new connection; milliseconds from the request to
    its whole answer, which must have `status`."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.connect()
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = time.perf_counter()
    c.request("POST", path, body=json.dumps(payload), headers={"content-type": "application/json"})
    r = c.getresponse()
    out = r.read()
    elapsed = (time.perf_counter() - t) * 1000
    c.close()
    assert r.status == status, (r.status, out[:200])
    return elapsed


def trivial(port):
    post(port, "/v1/chat/completions", {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}, 200)


def start(port):
    """Milliseconds until POST /v1/runs answers (the run goes on after)."""
    return post(port, "/v1/runs", {"component": "echo", "prompt": "hi"}, 202)


def serve(binary, home):
    p = subprocess.Popen([binary, "serve", "--insecure-local", "--listen", "127.0.0.1:0", "--home", home],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    url = next(w for w in line.split() if w.startswith("http://"))
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    return p, int(url.rsplit(":", 1)[1].strip("/"))


def loop_fs(gib):
    """A fresh ext4 without a journal on a loop device (direct I/O, mounted
    `discard`): (its mount point, a function that removes it). What a
    failed step had made is removed before the error goes up."""
    undo = []

    def remove():
        for step in reversed(undo):
            step()

    try:
        fd, img = tempfile.mkstemp(prefix="cairn-ab-", suffix=".img",
                                   dir=os.environ.get("TMPDIR", "/var/tmp"))
        os.close(fd)
        undo.append(lambda: os.remove(img))
        subprocess.run(["truncate", "-s", f"{gib}G", img], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-O", "^has_journal", "-E", "lazy_itable_init=0,nodiscard", img],
                       check=True)
        dev = subprocess.run(["losetup", "--direct-io=on", "--show", "-f", img], check=True,
                             capture_output=True, text=True).stdout.strip()
        undo.append(lambda: subprocess.run(["losetup", "-d", dev]))
        mnt = tempfile.mkdtemp(prefix="cairn-ab-mnt-")
        undo.append(lambda: os.rmdir(mnt))
        subprocess.run(["mount", "-o", "discard", dev, mnt], check=True)
        undo.append(lambda: subprocess.run(["umount", mnt]))
    except BaseException:
        remove()
        raise
    return mnt, remove


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q / 100))]


def throughput(port, total=1000, clients=50):
    left = [total]
    lock = threading.Lock()

    def client(_):
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            trivial(port)

    t = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    return total / (time.perf_counter() - t)


def cpu_seconds(pid):
    """User + system CPU time of process `pid` so far, in seconds."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json")
    ap.add_argument("--loop-fs", type=int, metavar="GIB",
                    help="each home on a fresh loop-mounted ext4 of this many GiB (root only)")
    a = ap.parse_args()
    if a.rounds % 2:
        a.rounds += 1
        log(f"--rounds raised to {a.rounds}: each binary opens half of the rounds")
    work = tempfile.mkdtemp(prefix="cairn-ab-")
    servers = {}
    removals = []
    try:
        for name, binary in (("before", a.before), ("after", a.after)):
            root = work
            if a.loop_fs:
                root, remove = loop_fs(a.loop_fs)
                removals.append(remove)
            servers[name] = serve(binary, os.path.join(root, name))
        ports = {n: s[1] for n, s in servers.items()}
        for n in ports:
            for _ in range(20):
                trivial(ports[n])
        lat = {"before": [], "after": []}
        for i in range(a.runs):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            for n in order:
                t = time.perf_counter()
                trivial(ports[n])
                lat[n].append((time.perf_counter() - t) * 1000)
        answered = {"before": [], "after": []}
        for i in range(a.runs):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            for n in order:
                answered[n].append(start(ports[n]))
                time.sleep(0.005)
        tput = {"before": [], "after": []}
        cpu = {"before": [], "after": []}
        for r in range(a.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for n in order:
                pid = servers[n][0].pid
                c = cpu_seconds(pid)
                tput[n].append(throughput(ports[n]))
                cpu[n].append((cpu_seconds(pid) - c) * 1000 / 1000)  # ms, 1,000 runs a round
                log(f"round {r + 1} {n}: {tput[n][-1]:.0f} runs/s, {cpu[n][-1]:.3f} ms CPU a run")
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
        for remove in removals:
            remove()
    rows = [
        ("trivial run p50", "ms", pct(lat["before"], 50), pct(lat["after"], 50)),
        ("trivial run p99", "ms", pct(lat["before"], 99), pct(lat["after"], 99)),
        ("run start answered, p50", "ms", pct(answered["before"], 50), pct(answered["after"], 50)),
        ("run start answered, p99", "ms", pct(answered["before"], 99), pct(answered["after"], 99)),
        ("1,000 runs, 50 clients (median round)", "runs/s",
         statistics.median(tput["before"]), statistics.median(tput["after"])),
        ("1,000 runs, 50 clients (slowest round)", "runs/s", min(tput["before"]), min(tput["after"])),
        ("server CPU per run, 50 clients (median round)", "ms",
         statistics.median(cpu["before"]), statistics.median(cpu["after"])),
    ]
    print(f"{'figure':<40} {'before':>9} {'after':>9} {'after/before':>13}")
    out = []
    for figure, unit, b, f in rows:
        print(f"{figure:<40} {b:>9.2f} {f:>9.2f} {f / b:>12.2f}x  {unit}")
        out.append({"figure": figure, "unit": unit, "before": b, "after": f, "ratio": f / b})
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"version": 1, "before": a.before, "after": a.after, "loop_fs_gib": a.loop_fs,
                       "rows": out,
                       "throughput_rounds": tput, "cpu_ms_rounds": cpu}, fh, indent=1)
            fh.write("\n")


if __name__ == "__main__":
    main()
