"""runpod-python's client against Berth: runpod.Endpoint and
runpod.AsyncioEndpoint on endpoint sys.argv[1], whose worker runs
testdata/worker/handler.py. Each check prints one JSON line
{"check", "ok", "detail"}; compat's Go test reads them. Environment:
RUNPOD_API_KEY, RUNPOD_ENDPOINT_BASE_URL (Berth's /v2)."""

import asyncio
import concurrent.futures
import json
import os
import sys
import time
import traceback

import aiohttp
import runpod

runpod.api_key = os.environ["RUNPOD_API_KEY"]
EP = sys.argv[1]
ep = runpod.Endpoint(EP)


def report(name, ok, detail=None, seconds=None):
    print(json.dumps({"check": name, "ok": bool(ok), "detail": detail, "seconds": seconds}, default=str), flush=True)


def check(name):
    def deco(fn):
        start = time.time()
        try:
            res = fn()
            if asyncio.iscoroutine(res):
                res = asyncio.run(res)
            ok, detail = res if isinstance(res, tuple) else (bool(res), res)
            report(name, ok, detail, round(time.time() - start, 1))
        except Exception:  # pylint: disable=broad-except
            report(name, False, traceback.format_exc(), round(time.time() - start, 1))
        return fn
    return deco


def wait_status(job, want, seconds=120):
    deadline = time.time() + seconds
    st = None
    while time.time() < deadline:
        st = job.status()
        if st in want:
            return st
        time.sleep(0.2)
    return st


@check("Endpoint.run_sync")
def _():
    out = ep.run_sync({"mode": "echo", "value": "hello"}, timeout=180)
    return isinstance(out, list) and out[0]["echo"] == "hello", out


@check("Endpoint.run_sync {input: …} form")
def _():
    out = ep.run_sync({"input": {"mode": "echo", "value": 2}}, timeout=120)
    return out[0]["echo"] == 2, out


@check("Endpoint.run + Job.status + Job.output")
def _():
    job = ep.run({"mode": "echo", "value": "async"})
    first = job.status()
    out = job.output(timeout=120)
    return first in ("IN_QUEUE", "IN_PROGRESS", "COMPLETED") and out[0]["echo"] == "async" and job.status() == "COMPLETED", (first, out)


@check("Job.stream")
def _():
    job = ep.run({"mode": "stream", "n": 4})
    chunks = list(job.stream())
    return chunks == [{"chunk": i} for i in range(4)], chunks


@check("a failing handler: FAILED with its error")
def _():
    job = ep.run({"mode": "fail", "message": "bad input"})
    st = wait_status(job, ("FAILED",))
    raw = job._fetch_job()  # pylint: disable=protected-access
    return st == "FAILED" and "bad input" in str(raw.get("error")), raw


@check("Job.cancel of a running job")
def _():
    job = ep.run({"mode": "sleep", "seconds": 60})
    wait_status(job, ("IN_PROGRESS",))
    res = job.cancel()
    st = wait_status(job, ("CANCELLED",), 30)
    return st == "CANCELLED", (res, st)


@check("Job.output timeout")
def _():
    job = ep.run({"mode": "sleep", "seconds": 8})
    try:
        job.output(timeout=2)
        return False, "no TimeoutError"
    except TimeoutError:
        return job.output(timeout=120) == [{"slept": 8}], "TimeoutError, then the output"


@check("Endpoint.run_sync of a job that takes a while")
def _():
    out = ep.run_sync({"mode": "sleep", "seconds": 2}, timeout=120)
    return out == [{"slept": 2}], out


@check("concurrent run_sync from 4 threads")
def _():
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda i: ep.run_sync({"mode": "echo", "value": i}, timeout=180), range(4)))
    return [o[0]["echo"] for o in outs] == [0, 1, 2, 3], outs


@check("Endpoint.health")
def _():
    h = ep.health()
    return "jobs" in h and "workers" in h and h["jobs"]["completed"] >= 1, h


@check("Endpoint.purge_queue")
def _():
    res = ep.purge_queue()
    return res.get("status") == "completed" and "removed" in res, res


@check("an unknown endpoint: the HTTP error surfaces")
def _():
    try:
        runpod.Endpoint("nosuchendpoint00").run_sync({"x": 1}, timeout=10)
        return False, "no error"
    except Exception as e:  # pylint: disable=broad-except
        return "404" in str(e), str(e)


@check("a wrong key: the SDK's unauthorized error")
def _():
    try:
        runpod.Endpoint(EP, api_key="wrong").health()
        return False, "no error"
    except RuntimeError as e:
        return "nauthorized" in str(e), str(e)


@check("AsyncioEndpoint: run, status, output, stream, cancel, health, purge_queue")
async def _():
    async with aiohttp.ClientSession() as session:
        aep = runpod.AsyncioEndpoint(EP, session)
        job = await aep.run({"mode": "echo", "value": "aio"})
        out = await job.output(timeout=120)
        st = await job.status()
        sjob = await aep.run({"mode": "stream", "n": 3})
        chunks = [c async for c in sjob.stream()]
        cjob = await aep.run({"mode": "sleep", "seconds": 60})
        for _ in range(600):
            if await cjob.status() == "IN_PROGRESS":
                break
            await asyncio.sleep(0.2)
        await cjob.cancel()
        cst = None
        for _ in range(150):
            cst = await cjob.status()
            if cst == "CANCELLED":
                break
            await asyncio.sleep(0.2)
        health = await aep.health()
        purge = await aep.purge_queue()
        ok = (out == [{"echo": "aio", "job": job.job_id}] and st == "COMPLETED" and chunks == [{"chunk": i} for i in range(3)]
              and cst == "CANCELLED" and "workers" in health and purge.get("status") == "completed")
        return ok, {"out": out, "status": st, "chunks": chunks, "cancelled": cst, "health": health, "purge": purge}


@check("AsyncioEndpoint: 4 concurrent jobs")
async def _():
    async with aiohttp.ClientSession() as session:
        aep = runpod.AsyncioEndpoint(EP, session)
        jobs = await asyncio.gather(*[aep.run({"mode": "echo", "value": i}) for i in range(4)])
        outs = await asyncio.gather(*[j.output(timeout=180) for j in jobs])
        return [o[0]["echo"] for o in outs] == [0, 1, 2, 3], outs


print(json.dumps({"done": True}), flush=True)
