"""Every management function runpod-python exports, called against Berth
as a provisioning script calls them (runpod.create_pod, …; GraphQL at
$RUNPOD_API_BASE_URL/graphql). Each check prints one JSON line
{"check", "ok", "detail", "seconds"}; the last line lists the functions
runpod exports and those called. Environment: RUNPOD_API_KEY,
RUNPOD_API_BASE_URL, IMAGE (a pod image answering on 8888), VOLUME (a
network volume's id, made through REST: the SDK has no call for it),
VOLUME_DC (its data centre), HOME (a scratch directory: set_credentials
writes ~/.runpod/config.toml)."""

import functools
import json
import os
import time
import traceback

import runpod
from runpod import error

runpod.api_key = os.environ["RUNPOD_API_KEY"]
IMAGE = os.environ["IMAGE"]
VOLUME = os.environ["VOLUME"]
VOLUME_DC = os.environ["VOLUME_DC"]

called = set()
exported = sorted(n for n in runpod.__all__ if callable(getattr(runpod, n, None)))
for _name in exported:
    _fn = getattr(runpod, _name)
    if isinstance(_fn, type) or not callable(_fn):
        continue

    def _wrap(fn, name):
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            called.add(name)
            return fn(*a, **kw)
        return wrapper

    setattr(runpod, _name, _wrap(_fn, _name))


def report(name, ok, detail=None, seconds=None):
    print(json.dumps({"check": name, "ok": bool(ok), "detail": detail, "seconds": seconds}, default=str), flush=True)


def check(name):
    def deco(fn):
        start = time.time()
        try:
            res = fn()
            ok, detail = res if isinstance(res, tuple) else (bool(res), res)
            report(name, ok, detail, round(time.time() - start, 1))
        except Exception:  # pylint: disable=broad-except
            report(name, False, traceback.format_exc(), round(time.time() - start, 1))
        return fn
    return deco


def refused(fn, *words):
    """fn raises the SDK's QueryError whose message holds every word."""
    try:
        fn()
        return False, "accepted"
    except error.QueryError as e:
        return all(w.lower() in str(e).lower() for w in words), str(e)


state = {}

# ---- credentials (the SDK's own config file) ----


@check("set_credentials / get_credentials / check_credentials")
def _():
    runpod.set_credentials(runpod.api_key, profile="berth")
    creds = runpod.get_credentials("berth")
    valid, msg = runpod.check_credentials("berth")
    path = os.path.join(os.environ["HOME"], ".runpod", "config.toml")
    return creds == {"api_key": runpod.api_key} and valid and os.path.exists(path), (creds, valid, msg)


# ---- account ----


@check("get_user")
def _():
    u = runpod.get_user()
    vols = {v["id"]: v["dataCenterId"] for v in u["networkVolumes"]}
    return u["id"] and vols.get(VOLUME) == VOLUME_DC, u


@check("update_user_settings")
def _():
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBerthCompatKeyForTheSdkTestsOnly compat@berth"
    u = runpod.update_user_settings(key)
    return u["pubKey"] == key and runpod.get_user()["pubKey"] == key, u


# ---- GPUs ----


@check("get_gpus")
def _():
    gpus = runpod.get_gpus()
    ids = [g["id"] for g in gpus]
    return "NVIDIA GeForce RTX 4090" in ids and all("displayName" in g and "memoryInGb" in g for g in gpus), len(gpus)


@check("get_gpu")
def _():
    g = runpod.get_gpu("NVIDIA GeForce RTX 4090", gpu_quantity=2)
    return g["id"] == "NVIDIA GeForce RTX 4090" and g["memoryInGb"] == 24 and "lowestPrice" in g, g


@check("get_gpu of an unknown type: the SDK's ValueError")
def _():
    try:
        runpod.get_gpu("NVIDIA Quantum 9000")
        return False, "no error"
    except ValueError as e:
        return True, str(e)


# ---- registry auths ----


@check("create_container_registry_auth")
def _():
    a = runpod.create_container_registry_auth("compat-registry", "me", "s3cret")
    state["auth"] = a["id"]
    return a["id"] and a["name"] == "compat-registry", a


@check("update_container_registry_auth")
def _():
    a = runpod.update_container_registry_auth(state["auth"], "me2", "s3cret2")
    return a["id"] == state["auth"], a


@check("create_container_registry_auth with a name in use: refused")
def _():
    return refused(lambda: runpod.create_container_registry_auth("compat-registry", "x", "y"), "compat-registry")


# ---- templates ----


@check("create_template (serverless)")
def _():
    t = runpod.create_template("compat-worker", IMAGE, docker_start_cmd="serve --port 8888",
                               env={"MODE": "compat", "EMPTY": ""}, is_serverless=True)
    state["tpl"] = t["id"]
    return (t["name"] == "compat-worker" and t["imageName"] == IMAGE and t["isServerless"]
            and {"key": "MODE", "value": "compat"} in t["env"]), t


@check("create_template (pod: ports, volume, registry auth)")
def _():
    t = runpod.create_template("compat-pod", IMAGE, container_disk_in_gb=5, volume_in_gb=10,
                               volume_mount_path="/data", ports="8888/http, 22/tcp",
                               registry_auth_id=state["auth"])
    state["pod_tpl"] = t["id"]
    return t["ports"] == "8888/http,22/tcp" and t["volumeMountPath"] == "/data" and not t["isServerless"], t


@check("create_template with a name in use: refused")
def _():
    return refused(lambda: runpod.create_template("compat-worker", IMAGE), "compat-worker")


# ---- endpoints ----


@check("create_endpoint (defaults)")
def _():
    e = runpod.create_endpoint("compat-ep", state["tpl"], workers_max=0)
    state["ep"] = e["id"]
    return e["templateId"] == state["tpl"] and e["gpuIds"] == "AMPERE_16" and e["workersMax"] == 0, e


@check("create_endpoint (network volume, locations, FlashBoot, CUDA, scaler)")
def _():
    e = runpod.create_endpoint("compat-ep-2", state["tpl"], gpu_ids="ADA_24,AMPERE_24", network_volume_id=VOLUME,
                               locations=VOLUME_DC, idle_timeout=9, scaler_type="REQUEST_COUNT", scaler_value=2,
                               workers_min=0, workers_max=0, flashboot=True, allowed_cuda_versions="12.4", gpu_count=2)
    state["ep2"] = e["id"]
    return (e["networkVolumeId"] == VOLUME and e["locations"] == VOLUME_DC and e["flashBootType"] == "FLASHBOOT"
            and e["scalerType"] == "REQUEST_COUNT" and e["gpuCount"] == 2 and e["allowedCudaVersions"] == "12.4"), e


@check("create_endpoint of an unknown template: refused")
def _():
    return refused(lambda: runpod.create_endpoint("x", "nosuchtemplate"), "templateId")


@check("get_endpoints")
def _():
    eps = {e["id"]: e for e in runpod.get_endpoints()}
    e2 = eps.get(state["ep2"], {})
    return state["ep"] in eps and e2.get("networkVolume", {}).get("dataCenterId") == VOLUME_DC, list(eps)


@check("update_endpoint_template")
def _():
    t2 = runpod.create_template("compat-worker-2", IMAGE, is_serverless=True)
    e = runpod.update_endpoint_template(state["ep"], t2["id"])
    eps = {x["id"]: x for x in runpod.get_endpoints()}
    return e["templateId"] == t2["id"] and eps[state["ep"]]["templateId"] == t2["id"], e


# ---- pods ----


def pod_status(pid):
    p = runpod.get_pod(pid)
    return p and p["desiredStatus"]


@check("create_pod (CPU, the SDK's defaults)")
def _():
    p = runpod.create_pod("compat-cpu", IMAGE, ports="8888/tcp")
    state["pod"] = p["id"]
    return p["imageName"] == IMAGE and pod_status(p["id"]) == "RUNNING", p


@check("get_pod")
def _():
    p = runpod.get_pod(state["pod"])
    ports = [x["privatePort"] for x in (p["runtime"] or {}).get("ports", [])]
    return p["desiredStatus"] == "RUNNING" and 8888 in ports and p["uptimeSeconds"] >= 0, p


@check("get_pods")
def _():
    return state["pod"] in [p["id"] for p in runpod.get_pods()]


@check("stop_pod")
def _():
    p = runpod.stop_pod(state["pod"])
    return p["desiredStatus"] == "EXITED" and runpod.get_pod(state["pod"])["runtime"] is None, p


@check("resume_pod")
def _():
    p = runpod.resume_pod(state["pod"], 1)
    return p["desiredStatus"] == "RUNNING" and pod_status(state["pod"]) == "RUNNING", p


@check("create_pod with network_volume_id (mounted at its volume_mount_path)")
def _():
    p = runpod.create_pod("compat-nv", IMAGE, network_volume_id=VOLUME, ports="8888/tcp")
    state["nv_pod"] = p["id"]
    return pod_status(p["id"]) == "RUNNING", p


@check("create_pod with volume_mount_path=/workspace and a network volume")
def _():
    p = runpod.create_pod("compat-nv-ws", IMAGE, network_volume_id=VOLUME, volume_mount_path="/workspace")
    full = runpod.get_pod(p["id"])
    runpod.terminate_pod(p["id"])
    return full["volumeMountPath"] == "/workspace" and full["desiredStatus"] == "RUNNING", full


@check("create_pod from a template")
def _():
    p = runpod.create_pod("compat-from-tpl", template_id=state["pod_tpl"])
    full = runpod.get_pod(p["id"])
    runpod.terminate_pod(p["id"])
    return full["imageName"] == IMAGE and full["ports"] == "8888/http,22/tcp", full


@check("create_pod (GPU) on a host without GPUs: runs without one")
def _():
    p = runpod.create_pod("compat-gpu", IMAGE, gpu_type_id="NVIDIA GeForce RTX 4090")
    full = runpod.get_pod(p["id"])
    runpod.terminate_pod(p["id"])
    return full["desiredStatus"] == "RUNNING", full


@check("create_pod cloud_type=COMMUNITY: recorded, served by this host")
def _():
    p = runpod.create_pod("c", IMAGE, gpu_type_id="NVIDIA GeForce RTX 4090", cloud_type="COMMUNITY")
    ok = pod_status(p["id"]) == "RUNNING"
    runpod.terminate_pod(p["id"])
    return ok, p


@check("create_pod of an unknown network volume: refused")
def _():
    return refused(lambda: runpod.create_pod("c", IMAGE, network_volume_id="nosuchvolume", data_center_id="EU-RO-1"), "networkVolumeId")


@check("terminate_pod")
def _():
    for pid in (state["pod"], state["nv_pod"]):
        runpod.terminate_pod(pid)
    gone, detail = refused(lambda: runpod.get_pod(state["pod"]), "not found")
    return gone and state["pod"] not in [p["id"] for p in runpod.get_pods()], detail


@check("delete_container_registry_auth")
def _():
    # The template using it goes first (through REST: the SDK has no call).
    import requests  # pylint: disable=import-outside-toplevel
    base = os.environ["RUNPOD_API_BASE_URL"]
    r = requests.delete(f"{base}/v1/templates/{state['pod_tpl']}", headers={"Authorization": f"Bearer {runpod.api_key}"}, timeout=30)
    ok = runpod.delete_container_registry_auth(state["auth"])
    return r.status_code == 204 and ok is not None, (r.status_code, ok)


# ---- the logger workers use ----


@check("RunPodLogger")
def _():
    called.add("RunPodLogger")
    log = runpod.RunPodLogger()
    log.info("from the compat suite")
    log.debug("debug line")
    return True


print(json.dumps({"exported": exported, "called": sorted(called), "done": True}), flush=True)
