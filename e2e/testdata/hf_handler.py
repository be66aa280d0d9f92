# A runpod-python worker that loads its model the way real workers do: the
# official huggingface_hub, offline, in the cache Berth mounts (HF_HOME and
# HF_HUB_CACHE come from Berth, HF_HUB_OFFLINE=1 from the template).
import hashlib
import os

import runpod
from huggingface_hub import hf_hub_download, snapshot_download


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def handler(job):
    inp = job["input"]
    repo, rev = inp["repo"], inp["revision"]
    snapshot = snapshot_download(repo, revision=rev)
    files = {}
    for root, _, names in os.walk(snapshot):
        for name in names:
            full = os.path.join(root, name)
            files[os.path.relpath(full, snapshot)] = sha256(full)
    one = hf_hub_download(repo, inp["file"], revision=rev)
    return {
        "snapshot": snapshot,
        "files": files,
        "file": {"path": one, "sha256": sha256(one)},
        "env": {k: os.environ.get(k) for k in ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE")},
    }


runpod.serverless.start({"handler": handler})
