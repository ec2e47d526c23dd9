#!/bin/bash
# The expected count comes from the answer service, through the allowlisted proxy.
expected=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://localhost:8799/count", timeout=10).read().decode().strip())')
if [ -n "$expected" ] && [ "$(tr -d '[:space:]' < /app/count.txt 2>/dev/null)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "expected '$expected'"
  echo 0 > /logs/verifier/reward.txt
fi
