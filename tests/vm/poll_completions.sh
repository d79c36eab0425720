#!/bin/sh
# Test tool, run in a guest by lab.start_pollers: asks the local trtllm-serve for a 4-token completion about once
# a second and logs one line per request: "<start> <end> <curl exit code>" (0 = HTTP 2xx; 7 refused, 28 timed out,
# 22 HTTP error, 52/56 connection dropped). A line is written only for a request that ran, so a poller that the
# guest's scheduler starved leaves a gap, never a failure (lab.availability_per_second reads both).
body='{"model": "openai/gpt-oss-120b", "prompt": "hi", "max_tokens": 4}'
while :; do
    start=$(date +%s.%N)
    curl -fsS -m 10 -o /dev/null -H 'Content-Type: application/json' -d "$body" http://127.0.0.1:8000/v1/completions
    rc=$?
    echo "$start $(date +%s.%N) $rc"
    sleep 1
done
