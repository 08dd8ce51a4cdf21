"""One chat call with the official openai SDK whose timeout is shorter than
the run: the SDK retries (x-stainless-retry-count), and each retry joins the
run the first attempt started.

    python chat_retry.py BASE MODEL PROMPT
Prints one JSON line: {"ok", "text"?, "session"?, "error"?}.
"""
import json
import sys

import openai

base, model, prompt = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=0.6, max_retries=3)
try:
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": prompt}]
    )
    done = raw.parse()
    print(json.dumps({
        "ok": True,
        "text": done.choices[0].message.content,
        "session": raw.headers.get("x-cairn-session"),
        "retries": int(raw.http_request.headers.get("x-stainless-retry-count", "0")),
    }))
except openai.APITimeoutError as e:
    print(json.dumps({"ok": False, "error": str(e)}))
