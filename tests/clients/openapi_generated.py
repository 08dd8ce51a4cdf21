"""A client generated from cairn's /openapi.json by openapi-python-client,
used as its users would: generate, import, call GET /v1/runs and
GET /v1/sessions, and read typed models back (enums as enums).

usage: openapi_generated.py BASE_URL WORKDIR
Prints one JSON line: what the generated client read."""

import json
import os
import subprocess
import sys
import urllib.request

base, work = sys.argv[1], sys.argv[2]
doc = os.path.join(work, "openapi.json")
with urllib.request.urlopen(f"{base}/openapi.json") as r, open(doc, "wb") as f:
    f.write(r.read())
bindir = os.path.dirname(sys.executable)
env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
gen = subprocess.run(
    [os.path.join(bindir, "openapi-python-client"), "generate", "--path", doc,
     "--output-path", os.path.join(work, "client"), "--overwrite"],
    capture_output=True, text=True, env=env,
)
out = gen.stdout + gen.stderr
assert gen.returncode == 0, out
# Nothing skipped: every schema and operation made it into the client.
assert "Warning" not in out and "Skipping" not in out, out

sys.path.insert(0, os.path.join(work, "client"))
from cairn_client import Client  # noqa: E402
from cairn_client.api.runs import get_runs  # noqa: E402
from cairn_client.api.sessions import get_sessions  # noqa: E402
from cairn_client.models import RunState  # noqa: E402

client = Client(base_url=base, raise_on_unexpected_status=True)
runs = get_runs.sync_detailed(client=client)
assert runs.status_code == 200, runs
assert isinstance(runs.parsed, list) and runs.parsed, runs.parsed
states = [r.state for r in runs.parsed]
assert all(isinstance(s, RunState) for s in states), states
sessions = get_sessions.sync_detailed(client=client)
assert sessions.status_code == 200, sessions
assert isinstance(sessions.parsed, list) and sessions.parsed, sessions.parsed
print(json.dumps({
    "runs": [str(r.run_id) for r in runs.parsed],
    "states": [s.value for s in states],
    "sessions": [s.session_id for s in sessions.parsed],
}))
