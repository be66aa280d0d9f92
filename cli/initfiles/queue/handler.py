"""A RunPod serverless worker: runpod-python takes jobs from the endpoint's
queue and calls handler with each one; what it returns is the job's output."""

import runpod


def handler(job):
    name = job["input"].get("name", "world")
    return {"greeting": f"Hello, {name}!"}


runpod.serverless.start({"handler": handler})
