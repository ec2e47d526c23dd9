#!/bin/bash
# Named rewards: the share of odd-length and of even-length cases that are right.
cd /app && python3 /tests/check.py > /logs/verifier/reward.json
