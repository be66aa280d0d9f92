#!/usr/bin/env python3
"""pyworker: a stdlib-only worker speaking RunPod's worker protocol.

Berth's FlashBoot benchmark runs it in an image built from Debian packages
(internal/dockertest.BuildDebianPythonImage), since there is no PyPI here to
install runpod-python from. It does what runpod.serverless.start does for a
plain handler: long-polls job-take, runs the handler, posts job-done, and
pings with the ids of the jobs in progress (runpod-wire.md §1).

The handler returns input["echo"] when the input is an object with that
key, else the whole input.
"""

import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

KEY = os.environ["RUNPOD_AI_API_KEY"]
WORKER = os.environ["RUNPOD_POD_ID"]
TAKE = os.environ["RUNPOD_WEBHOOK_GET_JOB"].replace("$ID", WORKER)
DONE = os.environ["RUNPOD_WEBHOOK_POST_OUTPUT"].replace("$RUNPOD_POD_ID", WORKER)
PING = os.environ.get("RUNPOD_WEBHOOK_PING", "").replace("$RUNPOD_POD_ID", WORKER)
INTERVAL = int(os.environ.get("RUNPOD_PING_INTERVAL", "10000")) / 1000.0

running = set()
lock = threading.Lock()
stopping = threading.Event()


def log(msg):
    print(json.dumps({"message": msg, "level": "INFO"}), flush=True)


def call(url, body=None, timeout=90):
    req = urllib.request.Request(url, data=body, headers={"Authorization": KEY, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read()


def pinger():
    while not stopping.wait(INTERVAL):
        with lock:
            ids = ",".join(sorted(running))
        url = PING + ("?job_id=" + ids if ids else "")
        try:
            call(url, timeout=2 * INTERVAL)
        except Exception as e:  # the next ping retries
            log("ping failed: %s" % e)


def handler(inp):
    if isinstance(inp, dict) and "echo" in inp:
        return inp["echo"]
    return inp


def on_term(signum, frame):
    stopping.set()
    with lock:
        idle = not running
    if idle:
        os._exit(0)


def main():
    signal.signal(signal.SIGTERM, on_term)
    if PING:
        threading.Thread(target=pinger, daemon=True).start()
    log("worker %s ready" % WORKER)
    while not stopping.is_set():
        try:
            status, ctype, body = call(TAKE + "&job_in_progress=0")
        except urllib.error.HTTPError as e:
            time.sleep(5 if e.code == 429 else 0)
            continue
        except (socket.timeout, TimeoutError):
            continue  # a long poll that outlived its timeout (e.g. frozen): ask again
        except Exception as e:
            log("job-take failed: %s" % e)
            time.sleep(0.2)
            continue
        if status != 200 or not body or not ctype.startswith("application/json"):
            continue
        job = json.loads(body)
        with lock:
            running.add(job["id"])
        try:
            out = {"output": handler(job.get("input"))}
        except Exception as e:
            out = {"error": str(e)}
        try:
            call(DONE.replace("$ID", job["id"]) + "&isStream=false", json.dumps(out).encode())
        except Exception as e:
            log("job-done failed: %s" % e)
        with lock:
            running.discard(job["id"])
    sys.exit(0)


if __name__ == "__main__":
    main()
