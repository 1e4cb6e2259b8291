#!/usr/bin/env bash
# Usage: scripts/timed.sh NAME COMMAND...: runs COMMAND and prints its wall time as "[make test] NAME: N s"
# (also when it fails, whose exit status it returns).
start=$(date +%s)
"${@:2}"
rc=$?
echo "[make test] $1: $(($(date +%s) - start)) s (exit $rc)"
exit $rc
