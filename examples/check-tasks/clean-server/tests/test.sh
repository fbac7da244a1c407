#!/bin/bash
mkdir -p /logs/verifier
# The test starts a server of its own, queries it, stops it, and only
# then writes the reward.
python3 -m http.server 8765 --bind 127.0.0.1 --directory /app >/dev/null 2>&1 &
srv=$!
got=$(python3 - <<'PY'
import time, urllib.error, urllib.request
for _ in range(100):
    try:
        print(urllib.request.urlopen('http://127.0.0.1:8765/greeting.txt', timeout=2).read().decode().strip())
        break
    except urllib.error.HTTPError:
        break  # the server answered: no retry
    except OSError:
        time.sleep(0.1)
PY
)
kill $srv; wait $srv 2>/dev/null
if [ "$got" = hello ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
