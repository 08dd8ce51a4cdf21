"""Fault figures: kill -9 rounds of `cairn serve` during emitting runs.

    python3 bench/faults/kill_serve.py path/to/cairn ROUNDS [DIR]

Each round serves a fresh home, starts four `bench-emit` runs of 20,000
entries with an SSE follower each (what a follower sees is committed),
kills the server at a random moment (0.2-2 s in), restarts it, waits for
every run to end, and exports each session (every read checks each line's
checksum). It counts the entries followers saw, those missing from the
journal or changed there, text deltas beyond the 20,000 each run emits
(duplicates), runs restored by replay, and runs that did not finish, and
prints one JSON line per round and a TOTAL line. Needs `requests`."""
import json, os, random, signal, subprocess, sys, threading, time, requests, zlib

CAIRN = sys.argv[1]
ROUNDS = int(sys.argv[2])
DIR = sys.argv[3] if len(sys.argv) > 3 else "/tmp/cairn-faults"
RUNS = 4
N = 20000

def serve(home):
    p = subprocess.Popen([CAIRN, "serve", "--insecure-local", "--listen", "127.0.0.1:0", "--home", home],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    url = next(w for w in line.split() if w.startswith("http://"))
    return p, url

def follow(url, session, seen, stop):
    try:
        with requests.get(f"{url}/v1/sessions/{session}/events", stream=True, timeout=60) as r:
            seq = None
            for raw in r.iter_lines(decode_unicode=True):
                if stop.is_set():
                    return
                if raw.startswith("id: "):
                    seq = int(raw[4:])
                elif raw.startswith("data: ") and seq is not None:
                    seen[seq] = raw[6:]
                    seq = None
    except Exception:
        return

totals = dict(kills=0, seen=0, lost=0, changed=0, duplicated=0, restored=0, runs=0, failed=0, entries=0)
for rnd in range(ROUNDS):
    home = f"{DIR}/home-{rnd}"
    subprocess.run(["rm", "-rf", home])
    os.makedirs(home)
    p, url = serve(home)
    runs = []
    for i in range(RUNS):
        r = requests.post(f"{url}/v1/runs", json={"component": "bench-emit", "prompt": str(N)}).json()
        runs.append((r["session_id"], r["run_id"]))
    seen = {s: {} for s, _ in runs}
    stop = threading.Event()
    threads = [threading.Thread(target=follow, args=(url, s, seen[s], stop), daemon=True) for s, _ in runs]
    for t in threads: t.start()
    time.sleep(random.uniform(0.2, 2.0))
    p.send_signal(signal.SIGKILL); p.wait()
    stop.set()
    totals["kills"] += 1
    snapshot = {s: dict(v) for s, v in seen.items()}
    p, url = serve(home)
    deadline = time.time() + 120
    states = {}
    for s, run in runs:
        while time.time() < deadline:
            v = requests.get(f"{url}/v1/runs/{run}").json()
            st = (v.get("facts") or {}).get("status")
            if st:
                states[run] = st
                break
            time.sleep(0.1)
    p.send_signal(signal.SIGTERM); p.wait()
    for s, run in runs:
        out = subprocess.run([CAIRN, "export", s, "--home", home], capture_output=True, text=True).stdout
        lines = [l for l in out.splitlines() if l.strip()]
        by_seq = {}
        for l in lines:
            by_seq[json.loads(l)["seq"]] = l
        totals["entries"] += len(lines)
        assert sorted(by_seq) == list(range(1, len(lines) + 1)), f"{s}: seqs not dense"
        for seq, l in snapshot[s].items():
            totals["seen"] += 1
            if seq not in by_seq: totals["lost"] += 1
            elif by_seq[seq] != l: totals["changed"] += 1
        texts = [json.loads(l)["payload"]["event"].get("text") for l in lines
                 if json.loads(l)["payload"]["event"].get("type") == "text_delta"]
        runs_started = sum(1 for l in lines if json.loads(l)["payload"]["event"].get("type") == "resumed_by_replay")
        totals["restored"] += 1 if runs_started else 0
        if len(texts) != N: totals["duplicated"] += abs(len(texts) - N)
        totals["runs"] += 1
        if states.get(run) != "finished": totals["failed"] += 1
    print(f"round {rnd}: " + json.dumps(totals), flush=True)
print("TOTAL " + json.dumps(totals))
