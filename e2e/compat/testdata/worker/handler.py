"""A worker written with runpod-python, as a user writes one: an async
generator handler (so it can stream) started with runpod.serverless.start.
compat's tests run it on the host (with `berth worker-env`) and in a
Berth-launched container. input.mode picks what it does."""

import asyncio
import os

import runpod


async def handler(job):
    inp = job["input"]
    mode = inp.get("mode", "echo")
    if mode == "echo":
        yield {"echo": inp.get("value"), "job": job["id"]}
    elif mode == "stream":
        for i in range(int(inp.get("n", 3))):
            yield {"chunk": i}
            await asyncio.sleep(0.05)
    elif mode == "sleep":
        await asyncio.sleep(float(inp.get("seconds", 1)))
        yield {"slept": inp.get("seconds", 1)}
    elif mode == "fail":
        raise ValueError(inp.get("message", "the handler failed"))
    elif mode == "env":
        yield {k: os.environ.get(k) for k in ("RUNPOD_ENDPOINT_ID", "RUNPOD_POD_ID", "RUNPOD_WEBHOOK_GET_JOB")}
    elif mode == "volume":
        with open(os.path.join("/runpod-volume", inp["file"]), encoding="utf-8") as f:
            yield {"content": f.read()}
    else:
        raise ValueError(f"unknown mode {mode!r}")


runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})
