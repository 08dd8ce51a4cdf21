"""Where cairn's trivial-run tail is not: `python3 bench/peer/tail.py [N]`.

Three cairn servers (release build), one per `[store] first_commit_sync`
mode (auto, each, syncfs), each run N sequential trivial runs, the
servers alternating request by request; first alone ("quiet"), then
beside a writer that dirties the filesystem (256 KiB every 20 ms, never
synced, as a neighbouring database's background writes would). Prints
p50/p99 per mode and phase, then the figures as one JSON line. Kept out of
CI (`docs/bench/tail-first-commit.json` holds a run).
"""
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 600
work = tempfile.mkdtemp(prefix="tail-", dir=os.path.join(peer.ROOT, "target"))
stop = threading.Event()
def dirtier(path):
    # A database's background writes: 256 KiB every 20 ms, never synced.
    buf = os.urandom(256 << 10)
    with open(path, "wb") as f:
        i = 0
        while not stop.is_set():
            f.seek((i % 64) * len(buf)); f.write(buf); f.flush()
            i += 1
            time.sleep(0.02)
servers = {}
try:
    for name, mode in (("auto", "auto"), ("each", "each"), ("syncfs", "syncfs")):
        os.makedirs(os.path.join(work, name, "cairn-home"))
        with open(os.path.join(work, name, "cairn-home", "cairn.toml"), "w") as f:
            f.write(f'[store]\nfirst_commit_sync = "{mode}"\n')
        s = peer.Cairn(os.path.join(peer.ROOT, "target", "release", "cairn"), os.path.join(work, name))
        s.start()
        c = peer.Conn(s.port)
        for _ in range(20):
            s.trivial(c)
        servers[name] = (s, c)
    out = {}
    for phase in ("quiet", "dirtied"):
        if phase == "dirtied":
            t = threading.Thread(target=dirtier, args=(os.path.join(work, "dirt.bin"),), daemon=True)
            t.start()
            time.sleep(1)
        lat = {n: [] for n in servers}
        for _ in range(N):
            for n, (s, c) in servers.items():
                t0 = time.perf_counter()
                s.trivial(c)
                lat[n].append((time.perf_counter() - t0) * 1000)
        for n, xs in lat.items():
            xs.sort()
            p50 = xs[len(xs) // 2]; p99 = xs[int(len(xs) * 0.99)]
            out[f"{phase}/{n}"] = (p50, p99)
            print(f"{phase:8} {n:7} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms", flush=True)
    stop.set()
finally:
    stop.set()
    for s, c in servers.values():
        s.proc.kill(); s.proc.wait()
    shutil.rmtree(work, ignore_errors=True)
print(json.dumps(out))
