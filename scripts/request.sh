#!/usr/bin/env bash
# Sends one Agora protocol request: the document travels as a data: URI.
# usage: scripts/request.sh NODE_URL PD_FILE BODY
set -euo pipefail
url=$1 pd=$2 body=$3
python3 - "$url" "$pd" "$body" <<'PY'
import hashlib, json, sys, urllib.parse, urllib.request
url, pd_path, body = sys.argv[1:4]
text = open(pd_path, encoding="utf-8").read()
digest = hashlib.sha1(text.encode("utf-8")).hexdigest()
envelope = {
    "protocolHash": digest,
    "protocolSources": ["data:text/plain;charset=utf-8," + urllib.parse.quote(text)],
    "body": body,
}
req = urllib.request.Request(url.rstrip("/") + "/", data=json.dumps(envelope).encode(),
                             headers={"content-type": "application/json"})
with urllib.request.urlopen(req, timeout=600) as r:
    print(r.read().decode())
PY
