#!/usr/bin/env bash
# A worker repository's CI: run Berth with the endpoint declared in
# berth.json — Berth builds the worker's image from this folder (its
# "build") before it answers — run the pytest suite against it with
# runpod-python, stop Berth. docs/ci.md walks through it; Berth's own CI
# runs it offline (e2e/compat/ciexample_test.go).
#
# Needs: docker, berth (BERTH, default: on PATH), python3 with pytest and
# runpod-python. Settings: BASE_IMAGE (the worker image's base, default
# python:3.11-slim), PIP_INSTALL (yes: pip installs runpod; no: the base
# has it), WORK (a scratch directory), PORT (Berth's port, default 8080).
set -euo pipefail
cd "$(dirname "$0")"
BERTH=${BERTH:-berth}
PYTHON=${PYTHON:-python3}
WORK=${WORK:-$(mktemp -d)}
PORT=${PORT:-8080}
export BASE_IMAGE=${BASE_IMAGE:-python:3.11-slim} PIP_INSTALL=${PIP_INSTALL:-yes}

# 1. Berth, with the endpoint of berth.json made true before it answers:
#    its start builds the worker image and waits for the build (a failed
#    build stops it, its log saying why). Its own key, so nothing of the
#    host's leaks in.
export BERTH_API_KEY=ci-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
export BERTH_URL=http://127.0.0.1:$PORT
"$BERTH" serve --addr "127.0.0.1:$PORT" --data "$WORK/berth-data" --apply berth.json >"$WORK/berth.log" 2>&1 &
BERTH_PID=$!
IMAGE=
cleanup() {
  kill "$BERTH_PID" 2>/dev/null && wait "$BERTH_PID" || true
  # The endpoint's worker container (berth serve leaves containers for its
  # next start). The built image stays: the next run with the same source
  # builds nothing (docker rmi "$IMAGE" to drop it).
  [ -z "$IMAGE" ] || docker ps -aq --filter "ancestor=$IMAGE" | xargs -r docker rm -f >/dev/null
}
trap cleanup EXIT
# Berth answers once the build is done (up to 15 min here).
for _ in $(seq 1 4500); do
  "$BERTH" endpoint get upper -o id >/dev/null 2>&1 && break
  kill -0 "$BERTH_PID" 2>/dev/null || { cat "$WORK/berth.log"; exit 1; }
  sleep 0.2
done
IMAGE=$("$BERTH" template get upper -o json | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["imageName"])')
echo "worker image: $IMAGE"

# 2. The tests, with the SDK pointed at Berth.
export ENDPOINT_ID=$("$BERTH" endpoint get upper -o id)
export RUNPOD_API_KEY=$BERTH_API_KEY
export RUNPOD_API_BASE_URL=$BERTH_URL
export RUNPOD_ENDPOINT_BASE_URL=$BERTH_URL/v2
status=0
"$PYTHON" -m pytest -q -p no:cacheprovider tests || status=$?
[ "$status" -eq 0 ] || { echo "--- berth log"; tail -50 "$WORK/berth.log"; }
exit "$status"
