"""Prints, as a JSON object by name, the GraphQL documents runpod-python's
management functions send: each function of runpod.api.ctl_commands is
called as a user would, with run_graphql_query replaced by a recorder, so
the documents come from the SDK's own generator modules
(runpod/api/mutations, runpod/api/queries) with its own defaults.

The names without a colon are graphqlapi's fixtures (testdata/runpod-python,
see testdata/clients.json), made with "{{placeholder}}" arguments; names with
"more:" are further calls (every option) that are only validated.

Run with Debian's python3 and PYTHONPATH=<runpod-python>:<python-shims>.
"""

import json
import sys

import runpod.api.ctl_commands as ctl

docs = {}
current = [None]


class Anything(dict):
    """A response that satisfies whatever the function reads."""

    def __getitem__(self, key):
        if key == "gpuTypes":
            return [Anything()]
        if key == "networkVolumes":
            return [{"id": "{{volumeId}}", "dataCenterId": "EU-RO-1"}]
        return Anything()

    def __len__(self):
        return 1


def record(query, api_key=None):  # pylint: disable=unused-argument
    name = current[0]
    if name in docs and docs[name] != query:
        # A function that sends two documents (create_pod asks get_gpu
        # first): the first is kept under name+"#1".
        docs[name + "#1"] = docs[name]
    docs[name] = query
    return Anything(data=Anything())


ctl.run_graphql_query = record


class Placeholder(str):
    """A "{{name}}" placeholder that passes the SDK's checks of a value
    (create_pod's cloud_type must be one of ALL, COMMUNITY, SECURE)."""

    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def call(name, fn, *args, **kwargs):
    current[0] = name
    fn(*args, **kwargs)


# The fixtures (graphqlapi/testdata/runpod-python).
call("create_template", ctl.create_template, "{{name}}", "{{image}}", "{{dockerArgs}}",
     env={"GREETING": "hello", "MODE": "graphql test"}, is_serverless=True)
call("create_endpoint", ctl.create_endpoint, "{{name}}", "{{templateId}}")
call("create_endpoint_flashboot", ctl.create_endpoint, "{{name}}", "{{templateId}}", gpu_ids="ADA_24,-NVIDIA L4",
     network_volume_id="{{volumeId}}", locations="EU-RO-1", idle_timeout=30, scaler_type="REQUEST_COUNT",
     scaler_value=2, workers_min=0, workers_max=2, flashboot=True, allowed_cuda_versions="12.4,12.5", gpu_count=2)
call("get_endpoints", ctl.get_endpoints)
call("update_endpoint_template", ctl.update_endpoint_template, "{{endpointId}}", "{{templateId}}")
call("get_gpus", ctl.get_gpus)
call("get_gpu", ctl.get_gpu, "{{gpuId}}", "{{gpuCount}}")
call("get_user", ctl.get_user)
call("update_user_settings", ctl.update_user_settings, "{{pubKey}}")
call("get_pods", ctl.get_pods)
call("get_pod", ctl.get_pod, "{{podId}}")
call("create_gpu_pod", ctl.create_pod, "{{name}}", "{{image}}", "{{gpuTypeId}}", cloud_type=Placeholder("{{cloudType}}"),
     ports="8888/http,22/tcp", env={"A": "1", "B": "two words"})
call("create_cpu_pod", ctl.create_pod, "{{name}}", "{{image}}", instance_id="cpu3c-2-4")
call("stop_pod", ctl.stop_pod, "{{podId}}")
call("resume_pod", ctl.resume_pod, "{{podId}}", "{{gpuCount}}")
call("terminate_pod", ctl.terminate_pod, "{{podId}}")
call("save_registry_auth", ctl.create_container_registry_auth, "{{name}}", "{{username}}", "{{password}}")
call("update_registry_auth", ctl.update_container_registry_auth, "{{id}}", "{{username}}", "{{password}}")
call("delete_registry_auth", ctl.delete_container_registry_auth, "{{id}}")

# Every option of each function, validated only.
call("more:create_template", ctl.create_template, "t", "img:1", "python -u h.py", container_disk_in_gb=5,
     volume_in_gb=2, volume_mount_path="/data", ports="8000/http, 22/tcp", env={"K": "V"}, is_serverless=False,
     registry_auth_id="auth1")
call("more:create_endpoint", ctl.create_endpoint, "e", "tpl", gpu_ids="AMPERE_24", network_volume_id="nv",
     locations="US-TX-3", idle_timeout=9, scaler_type="QUEUE_DELAY", scaler_value=1, workers_min=1,
     workers_max=1, flashboot=False, allowed_cuda_versions="12.1", gpu_count=1)
call("more:create_gpu_pod", ctl.create_pod, "p", "img:1", "NVIDIA GeForce RTX 4090", cloud_type="SECURE",
     support_public_ip=False, start_ssh=False, data_center_id="EU-RO-1", country_code="RO", gpu_count=2,
     volume_in_gb=5, container_disk_in_gb=7, min_vcpu_count=2, min_memory_in_gb=4, docker_args="sleep 1",
     ports="22/tcp", volume_mount_path="/workspace", env={"K": "V"}, template_id="tpl", network_volume_id="nv",
     allowed_cuda_versions=["12.4"], min_download=10, min_upload=10)
call("more:create_cpu_pod", ctl.create_pod, "p", "img:1", network_volume_id="{{volumeId}}", template_id="tpl",
     country_code="RO", min_download=1, min_upload=1, ports="22/tcp", env={"K": "V"})

json.dump(docs, sys.stdout, indent=1, sort_keys=True)
