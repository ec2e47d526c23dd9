#!/bin/bash
# Broken on purpose: checks /app/finished.txt, which the instruction never mentions.
if [ "$(cat /app/finished.txt 2>/dev/null)" = "done" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
