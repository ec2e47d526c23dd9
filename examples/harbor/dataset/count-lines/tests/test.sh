#!/bin/bash
# The verifier runs in a sandbox of its own: it sees only the declared artifact.
if python3 -c 'import json,sys; sys.exit(0 if json.load(open("/tmp/answer.json")) == {"lines": 17} else 1)'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
