"""runpod-python with one API key of a given level against Berth (docs/keys.md).
argv: LEVEL (all | restricted | readonly), GRANTED endpoint id, OTHER endpoint id.
Each check prints one JSON line {"check", "ok", "detail"}. Environment:
RUNPOD_API_KEY, RUNPOD_API_BASE_URL, RUNPOD_ENDPOINT_BASE_URL."""

import json
import os
import sys
import time
import traceback

import runpod

runpod.api_key = os.environ["RUNPOD_API_KEY"]
LEVEL, GRANTED, OTHER = sys.argv[1], sys.argv[2], sys.argv[3]


def report(name, ok, detail=None):
    print(json.dumps({"check": name, "ok": bool(ok), "detail": detail}, default=str), flush=True)


def check(name):
    def deco(fn):
        try:
            ok, detail = fn()
            report(name, ok, detail)
        except Exception:  # pylint: disable=broad-except
            report(name, False, traceback.format_exc())
        return fn
    return deco


def refused(fn, *words):
    """fn raises, and its message holds every word."""
    try:
        out = fn()
    except Exception as e:  # pylint: disable=broad-except
        msg = str(e)
        return all(w in msg for w in words), msg
    return False, "not refused: %r" % (out,)


@check(LEVEL + ": run_sync on the granted endpoint")
def _():
    ep = runpod.Endpoint(GRANTED)
    if LEVEL == "readonly":
        # The SDK raises the job API's status, not its body (which names the
        # level: the Go test reads it).
        return refused(lambda: ep.run_sync({"mode": "echo", "value": "k"}, timeout=60), "403", "Forbidden")
    out = ep.run_sync({"mode": "echo", "value": "k"}, timeout=180)
    return isinstance(out, list) and out[0]["echo"] == "k", out


@check(LEVEL + ": health of the granted endpoint")
def _():
    h = runpod.Endpoint(GRANTED).health()
    return "jobs" in h and "workers" in h, h


@check(LEVEL + ": the other endpoint")
def _():
    ep = runpod.Endpoint(OTHER)
    if LEVEL == "restricted":
        return refused(lambda: ep.health(), "403", "Forbidden")
    return "jobs" in ep.health(), "health answered"


@check(LEVEL + ": get_endpoints lists what the key may see")
def _():
    ids = sorted(e["id"] for e in runpod.get_endpoints())
    want = sorted([GRANTED] if LEVEL == "restricted" else [GRANTED, OTHER])
    return ids == want, ids


@check(LEVEL + ": get_pods (account-wide)")
def _():
    if LEVEL == "restricted":
        return refused(runpod.get_pods, "Restricted", "pods")
    return isinstance(runpod.get_pods(), list), "listed"


@check(LEVEL + ": create_template (an account-wide write)")
def _():
    name = "keys-tpl-" + LEVEL + "-" + str(time.time())
    mk = lambda: runpod.create_template(name=name, image_name="x:1", is_serverless=True)
    if LEVEL == "restricted":
        return refused(mk, "Restricted", "saveTemplate")
    if LEVEL == "readonly":
        return refused(mk, "Read Only", "saveTemplate")
    t = mk()
    return t.get("name") == name, t


print(json.dumps({"done": True}), flush=True)
