#!/usr/bin/env python3
"""Whether cairn's slowest trivial runs are its own or the machine's:
`python3 bench/peer/shared_tail.py docs/bench/peer-round2*-run*.json [--json FILE]`.

`bench/peer/peer.py` times its trivial runs alternating request by request
between the servers, so request i of each server is made within a few
milliseconds of the others'. For each run file, this takes cairn's
slowest 5 % (above its p95) and counts how many lie within two requests of
a peer's slowest 5 %: a stall of the machine (the host, the disk, the
kernel's writeback) slows every server at once, one of cairn's own slows
cairn alone. Beside it, the share of all request indices that lie that
near a peer's slow ones: what chance alone gives. Stdlib only; kept out
of CI.

Output: a table; with --json, {"version": 1, "window": 2, "runs": [{"file",
"cairn_slow", "near_a_peers_slow", "share", "chance"}]}.
"""
import argparse
import json

WINDOW = 2


def slow(latencies):
    """Indices of the requests above the p95."""
    ranked = sorted(latencies)
    threshold = ranked[int(len(latencies) * 0.95)]
    return [i for i, ms in enumerate(latencies) if ms > threshold]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--json")
    a = ap.parse_args()
    runs = []
    for path in a.files:
        with open(path) as f:
            lat = json.load(f).get("latencies_ms") or {}
        peers = [p for p in ("obelisk", "restate") if p in lat]
        if "cairn" not in lat or not peers:
            continue
        n = len(lat["cairn"])
        near = {j for p in peers for i in slow(lat[p]) for j in range(i - WINDOW, i + WINDOW + 1)}
        near &= set(range(n))
        ours = slow(lat["cairn"])
        hits = sum(1 for i in ours if i in near)
        runs.append({"file": path, "cairn_slow": len(ours), "near_a_peers_slow": hits,
                     "share": round(hits / len(ours), 3), "chance": round(len(near) / n, 3)})
    print(f"{'run':<44} {'cairn slow':>10} {'near a peer':>12} {'share':>6} {'chance':>7}")
    for r in runs:
        print(f"{r['file']:<44} {r['cairn_slow']:>10} {r['near_a_peers_slow']:>12} "
              f"{r['share']:>6.0%} {r['chance']:>7.0%}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"version": 1, "window": WINDOW, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
