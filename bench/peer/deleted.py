"""Where cairn's trivial-run tail comes from: `python3 bench/peer/deleted.py
[--obelisk BIN] [--files N] [--runs N] [--quiet S] [--json FILE]`.

Every new cairn session allocates about a dozen inodes (its directories,
documents, journal, generation and control socket; DESIGN.md's layout).
On ext4 without a journal, allocating an inode checks each free candidate's
deletion time and skips those freed in the last minute (several minutes
while their inode table block is dirty): right after many files were
deleted nearby, every allocation scans past them. A store that keeps its
state in one database file (Obelisk's SQLite) allocates none per run.

One cairn server (release build) and, with `--obelisk`, one Obelisk server
on fresh homes under `target/`, each warmed with 20 trivial runs. Phase
"settled": `--quiet` seconds after anything was deleted, `--runs`
sequential trivial runs per server, alternating request by request. Phase
"after deleting": `--files` small files written next to the homes (same
filesystem), synced, deleted, then the same runs at once. Phase
"settled again": `--quiet` seconds later, the same runs. Prints p50/p99 per
server and phase, the filesystem and whether it has a journal, then one
JSON line. Kept out of CI (`docs/bench/tail-deleted-run{1,2}.json` hold two
runs).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402


def filesystem(path):
    """(type, device, has a journal) of the filesystem holding `path`."""
    # The longest mount point the path lies under (the last mounted wins a tie).
    best = (-1, "?", "?")
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, mnt, fstype = line.split()[:3]
            if path == mnt or path.startswith(mnt.rstrip("/") + "/"):
                if len(mnt) >= best[0]:
                    best = (len(mnt), fstype, dev)
    _, fstype, dev = best
    journal = None
    if fstype == "ext4":
        # jbd2 names each journal it runs "<device>-<inode>".
        jbd2 = "/proc/fs/jbd2"
        name = os.path.basename(dev)
        journal = os.path.isdir(jbd2) and any(e.startswith(name + "-") for e in os.listdir(jbd2))
    return fstype, dev, journal


def churn(where, files):
    """Write `files` small files under `where`, sync them, delete them."""
    os.makedirs(where)
    for d in range(files // 1000 + 1):
        sub = os.path.join(where, f"d{d}")
        os.makedirs(sub)
        for i in range(min(1000, files - d * 1000)):
            with open(os.path.join(sub, f"f{i}"), "wb") as f:
                f.write(b"x" * 64)
    os.sync()
    shutil.rmtree(where)


def measure(servers, runs):
    lat = {s.name: [] for s, _ in servers}
    for _ in range(runs):
        for s, c in servers:
            t0 = time.perf_counter()
            s.trivial(c)
            lat[s.name].append((time.perf_counter() - t0) * 1000)
    out = {}
    for name, xs in lat.items():
        xs.sort()
        out[name] = {"p50_ms": peer.pct(xs, 50), "p99_ms": peer.pct(xs, 99)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--obelisk", help="the obelisk binary (optional)")
    ap.add_argument("--cairn", default=os.path.join(peer.ROOT, "target", "release", "cairn"))
    ap.add_argument("--files", type=int, default=40_000)
    ap.add_argument("--runs", type=int, default=600)
    ap.add_argument("--quiet", type=float, default=65.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    wasm = peer.build_workflow(args.obelisk)[1] if args.obelisk else None
    work = tempfile.mkdtemp(prefix="tail-deleted-", dir=os.path.join(peer.ROOT, "target"))
    fstype, dev, journal = filesystem(os.path.realpath(work))
    peer.log(f"filesystem: {fstype} on {dev}"
             + ("" if journal is None else (", with a journal" if journal else ", without a journal")))
    servers = []
    figures = {}
    try:
        os.makedirs(os.path.join(work, "cairn"))
        servers.append(peer.Cairn(args.cairn, os.path.join(work, "cairn")))
        if args.obelisk:
            os.makedirs(os.path.join(work, "obelisk"))
            servers.append(peer.Obelisk(args.obelisk, os.path.join(work, "obelisk"), wasm))
        conns = []
        for s in servers:
            s.start()
            c = peer.Conn(s.port, fresh=True)
            for _ in range(20):
                s.trivial(c)
            conns.append((s, c))
        for phase in ("settled", "after deleting", "settled again"):
            if phase == "after deleting":
                peer.log(f"writing and deleting {args.files} files next to the homes")
                churn(os.path.join(work, "churn"), args.files)
            else:
                peer.log(f"{args.quiet:.0f} s with nothing deleted")
                time.sleep(args.quiet)
            figures[phase] = measure(conns, args.runs)
            for name, f in figures[phase].items():
                print(f"{phase:15} {name:8} p50 {f['p50_ms']:6.2f} ms  p99 {f['p99_ms']:6.2f} ms",
                      flush=True)
    finally:
        for s in servers:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    out = {"version": 1, "filesystem": fstype, "journal": journal, "files": args.files,
           "runs": args.runs, "quiet_s": args.quiet, "phases": figures}
    print(json.dumps(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
