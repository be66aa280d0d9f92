#!/usr/bin/env bash
# A worker repository's CI, offline: build the worker image, run Berth with
# the endpoint declared in berth.json, run the pytest suite against it with
# runpod-python, stop Berth. docs/ci.md walks through it; Berth's own CI
# runs it (compat/ciexample_test.go).
#
# Needs: docker, berth (BERTH, default: on PATH), python3 with pytest and
# runpod-python. Settings: BASE (the worker image's base), WORK (a scratch
# directory), PORT (Berth's port, default 8080).
set -euo pipefail
cd "$(dirname "$0")"
BERTH=${BERTH:-berth}
PYTHON=${PYTHON:-python3}
WORK=${WORK:-$(mktemp -d)}
PORT=${PORT:-8080}
export WORKER_IMAGE=${WORKER_IMAGE:-upper-worker:ci-$$}

# 1. The worker image.
docker build -q --build-arg BASE="${BASE:-python:3.11-slim}" -t "$WORKER_IMAGE" .

# 2. Berth, with the template and endpoint of berth.json made true before
#    it answers; its own key, so nothing of the host's leaks in.
export BERTH_API_KEY=ci-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
export BERTH_URL=http://127.0.0.1:$PORT
"$BERTH" serve --addr "127.0.0.1:$PORT" --data "$WORK/berth-data" --apply berth.json >"$WORK/berth.log" 2>&1 &
BERTH_PID=$!
cleanup() {
  kill "$BERTH_PID" 2>/dev/null && wait "$BERTH_PID" || true
  # The endpoint's worker container (berth serve leaves containers for its
  # next start), then the image.
  docker ps -aq --filter "ancestor=$WORKER_IMAGE" | xargs -r docker rm -f >/dev/null
  docker rmi -f "$WORKER_IMAGE" >/dev/null 2>&1 || true
}
trap cleanup EXIT
for _ in $(seq 1 300); do
  "$BERTH" endpoint get upper -o id >/dev/null 2>&1 && break
  kill -0 "$BERTH_PID" 2>/dev/null || { cat "$WORK/berth.log"; exit 1; }
  sleep 0.2
done

# 3. The tests, with the SDK pointed at Berth.
export ENDPOINT_ID=$("$BERTH" endpoint get upper -o id)
export RUNPOD_API_KEY=$BERTH_API_KEY
export RUNPOD_API_BASE_URL=$BERTH_URL
export RUNPOD_ENDPOINT_BASE_URL=$BERTH_URL/v2
status=0
"$PYTHON" -m pytest -q -p no:cacheprovider tests || status=$?
[ "$status" -eq 0 ] || { echo "--- berth log"; tail -50 "$WORK/berth.log"; }
exit "$status"
