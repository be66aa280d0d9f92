"""The worker of the example repository: a runpod-python handler."""

import runpod


def handler(job):
    text = job["input"].get("text", "")
    if not isinstance(text, str):
        raise ValueError("input.text must be a string")
    return {"upper": text.upper(), "length": len(text)}


if __name__ == "__main__":
    runpod.serverless.start({"handler": handler})
