package httpapi

import (
	"maps"
	"strings"

	"berth/mgmt"
)

// operations lists every route.
func operations() []op {
	const get, post, patch, del = "GET", "POST", "PATCH", "DELETE"
	tid := obj{"name": "templateId", "in": "path", "required": true, "description": "10 lowercase letters or digits; another shape is answered 400.",
		"schema": obj{"type": "string", "pattern": "^[a-z0-9]{10}$"}}
	eid := pathP("endpointId", "")
	pid := pathP("podId", "")
	vid := pathP("networkVolumeId", "")
	rid := pathP("containerRegistryAuthId", "")
	tFlags := []obj{
		boolQ("includeEndpointBoundTemplates", "List templates used by an endpoint too (hidden by default, as on RunPod)."),
		boolQ("includePublicTemplates", "Accepted; Berth has no other users' templates."),
		boolQ("includeRunpodTemplates", "Accepted; Berth has no official templates."),
	}
	eFlags := []obj{boolQ("includeTemplate", "Add the template."), boolQ("includeWorkers", "Add the workers.")}
	pFlags := []obj{
		boolQ("includeMachine", "Add this host as machine."), boolQ("includeNetworkVolume", "Add the network volume."),
		boolQ("includeSavingsPlans", "Add savingsPlans (always [])."), boolQ("includeTemplate", "Add the template."),
		boolQ("includeWorkers", "List serverless workers as pods too (list only)."),
	}
	m := mErr
	ops := []op{
		{method: get, path: "/v1/openapi.json", id: "GetOpenAPI", tag: "docs", summary: "This document",
			responses: obj{"200": resp("The OpenAPI 3 document of every Berth route.", obj{"type": "object"})}},
		{method: get, path: "/v1/docs", id: "GetDocs", tag: "docs", summary: "This document as an HTML page",
			responses: obj{"200": obj{"description": "Every operation with its summary, linking to /v1/openapi.json.",
				"content": obj{"text/html": obj{"schema": obj{"type": "string"}}}}}},
		{method: get, path: "/metrics", id: "Metrics", tag: "metrics", summary: "Prometheus metrics: requests, latency, queue depth and workers per endpoint",
			responses: obj{"200": textResp("Prometheus text exposition format.")}},
		{method: post, path: "/graphql", id: "GraphQL", tag: "graphql", summary: "RunPod's GraphQL API: the management calls of runpod-python and runpodctl",
			desc: "The schema is graphqlapi/schema.graphql; docs/management.md lists the operations served and refused. " +
				"GraphQL errors (syntax, validation, a refused mutation) answer 200 with errors[0].message, as RunPod does.",
			body: body(ref("GraphQLRequest")),
			responses: obj{"200": resp("data, and errors when any.", ref("GraphQLResponse")),
				"400": resp("The body is not a GraphQL request.", ref("GraphQLResponse")), "413": resp("Body over 1 MB.", ref("GraphQLResponse"))}},

		// Templates.
		{method: post, path: "/v1/templates", id: "CreateTemplate", tag: "templates", summary: "Create a template",
			body: body(ref("TemplateCreateInput")),
			responses: obj{"200": resp("Created.", ref("Template")), "400": m("Invalid input; the message names the field."),
				"409": m("A template with this name exists."), "413": m("Body over 1 MB.")}},
		{method: get, path: "/v1/templates", id: "ListTemplates", tag: "templates", summary: "List templates", params: tFlags,
			responses: obj{"200": resp("Oldest first.", arrayOf(ref("Template"))), "400": m("Invalid flag.")}},
		{method: get, path: "/v1/templates/{templateId}", id: "GetTemplate", tag: "templates", summary: "Find a template by id",
			desc: "The include flags are checked, but a template asked for by id is always returned.", params: append([]obj{tid}, tFlags...),
			responses: obj{"200": resp("The template.", ref("Template")), "400": m("Invalid id or flag."), "404": m("Template not found.")}},
		templateUpdate(patch, "/v1/templates/{templateId}", "UpdateTemplate", tid),
		templateUpdate(post, "/v1/templates/{templateId}/update", "UpdateTemplatePost", tid),
		{method: del, path: "/v1/templates/{templateId}", id: "DeleteTemplate", tag: "templates", summary: "Delete a template", params: []obj{tid},
			responses: obj{"204": noBody("Deleted."), "400": m("Invalid id."), "404": m("Template not found."),
				"409": m("An endpoint or pod uses the template; the message names them.")}},

		// Endpoints.
		{method: post, path: "/v1/endpoints", id: "CreateEndpoint", tag: "endpoints", summary: "Create an endpoint",
			body:      body(ref("EndpointCreateInput")),
			responses: obj{"200": resp("Created.", ref("Endpoint")), "400": m("Invalid input or a missing template or volume."), "413": m("Body over 1 MB.")}},
		{method: get, path: "/v1/endpoints", id: "ListEndpoints", tag: "endpoints", summary: "List endpoints", params: eFlags,
			responses: obj{"200": resp("Oldest first.", arrayOf(ref("Endpoint"))), "400": m("Invalid flag.")}},
		{method: get, path: "/v1/endpoints/{endpointId}", id: "GetEndpoint", tag: "endpoints", summary: "Find an endpoint by id",
			params:    append([]obj{eid}, eFlags...),
			responses: obj{"200": resp("The endpoint.", ref("Endpoint")), "400": m("Invalid flag."), "404": m("Endpoint not found.")}},
		endpointUpdate(patch, "/v1/endpoints/{endpointId}", "UpdateEndpoint", eid),
		endpointUpdate(post, "/v1/endpoints/{endpointId}/update", "UpdateEndpointPost", eid),
		{method: del, path: "/v1/endpoints/{endpointId}", id: "DeleteEndpoint", tag: "endpoints", summary: "Delete an endpoint",
			desc:      "Its job routes answer 404 at once; every unfinished job (queued or running) is cancelled, webhooks firing with CANCELLED; its workers are stopped.",
			params:    []obj{eid},
			responses: obj{"204": noBody("Deleted."), "404": m("Endpoint not found.")}},
		{method: get, path: "/v1/endpoints/{endpointId}/worker-env", id: "WorkerEnv", tag: "berth extensions",
			summary:   "Register a worker run outside Docker and get its RUNPOD_* environment",
			params:    []obj{eid, queryP("baseUrl", "Base URL the worker reaches Berth at [this request's scheme and host].", obj{"type": "string"})},
			responses: obj{"200": resp("The environment.", ref("WorkerEnv")), "404": m("Endpoint not found.")}},
		{method: get, path: "/v1/endpoints/{endpointId}/workers/{workerId}/logs", id: "WorkerLogs", tag: "berth extensions",
			summary: "A worker container's logs (stdout and stderr merged by line)",
			desc:    "The logs of an endpoint's last failed worker container are kept until its next failure, so a worker that would not start can still be read.",
			params:  append([]obj{eid, pathP("workerId", "The worker's id (its RUNPOD_POD_ID), as in includeWorkers.")}, logParams(true)...),
			responses: obj{"200": logResp(), "400": m("Invalid parameter."), "404": m("Endpoint not found, or the worker has no container (an external worker, or one long gone)."),
				"503": m("No container runtime (Docker not reachable), or it failed.")}},

		// Pods.
		{method: post, path: "/v1/pods", id: "CreatePod", tag: "pods", summary: "Create and start a pod",
			desc: "When the container cannot start, nothing is created and the answer says why.", body: body(ref("PodCreateInput")),
			responses: obj{"201": resp("Created and running.", ref("Pod")), "400": m("Invalid input, a missing reference, or a container that cannot be made (no such image)."),
				"409": m("Not enough free GPUs."), "413": m("Body over 1 MB."), "503": m("No container runtime (Docker not reachable) or the runtime failed.")}},
		{method: get, path: "/v1/pods", id: "ListPods", tag: "pods", summary: "List pods",
			params: append([]obj{
				queryP("computeType", "", enumS("", "GPU", "CPU")), listQ("cpuFlavorId", "Any of these CPU flavors."),
				listQ("dataCenterId", "Any of these data centres."), queryP("desiredStatus", "", enumS("", "RUNNING", "EXITED", "TERMINATED")),
				queryP("endpointId", "Workers of this endpoint (with includeWorkers=true).", obj{"type": "string"}),
				listQ("gpuTypeId", "Any of these GPU types."), queryP("id", "", obj{"type": "string"}),
				queryP("imageName", "", obj{"type": "string"}), queryP("name", "", obj{"type": "string"}),
				queryP("networkVolumeId", "", obj{"type": "string"}), queryP("templateId", "", obj{"type": "string"}),
			}, pFlags...),
			responses: obj{"200": resp("Pods oldest first, then workers (includeWorkers).", arrayOf(obj{"anyOf": []obj{ref("Pod"), ref("Worker")}})),
				"400": m("Invalid filter.")}},
		{method: get, path: "/v1/pods/{podId}", id: "GetPod", tag: "pods", summary: "Find a pod by id", params: append([]obj{pid}, pFlags...),
			responses: obj{"200": resp("The pod.", ref("Pod")), "400": m("Invalid flag."), "404": m("Pod not found.")}},
		podUpdate(patch, "/v1/pods/{podId}", "UpdatePod", pid),
		podUpdate(post, "/v1/pods/{podId}/update", "UpdatePodPost", pid),
		{method: del, path: "/v1/pods/{podId}", id: "DeletePod", tag: "pods", summary: "Terminate a pod: remove its container, pod volume and record",
			desc:   "Without a container runtime the record is removed and the runtime removes the container as an orphan at its next reconcile.",
			params: []obj{pid},
			responses: obj{"204": noBody("Deleted."), "404": m("Pod not found."), "409": m("The pod is locked."),
				"503": m("The runtime could not remove the container; the record is kept and says why.")}},
		podAction("start", "Start a stopped pod", pid),
		podAction("stop", "Stop a pod (its container disk is kept)", pid),
		podAction("reset", "Replace a pod's container with a fresh one (container disk wiped, volume kept)", pid),
		podAction("restart", "Restart a pod's container", pid),
		{method: get, path: "/v1/pods/{podId}/logs", id: "PodLogs", tag: "berth extensions", summary: "A pod container's logs (stdout and stderr merged by line)",
			params: append([]obj{pid}, logParams(false)...),
			responses: obj{"200": logResp(), "400": m("Invalid parameter (jobId is for worker logs only)."),
				"404": m("Pod not found, or it has no container."), "503": m("No container runtime (Docker not reachable), or it failed.")}},

		// Network volumes.
		{method: post, path: "/v1/networkvolumes", id: "CreateNetworkVolume", tag: "network volumes", summary: "Create a network volume (a directory under the data folder)",
			body:      body(ref("NetworkVolumeCreateInput")),
			responses: obj{"200": resp("Created.", ref("NetworkVolume")), "400": m("Invalid input."), "413": m("Body over 1 MB.")}},
		{method: get, path: "/v1/networkvolumes", id: "ListNetworkVolumes", tag: "network volumes", summary: "List network volumes",
			responses: obj{"200": resp("Oldest first.", arrayOf(ref("NetworkVolume")))}},
		{method: get, path: "/v1/networkvolumes/{networkVolumeId}", id: "GetNetworkVolume", tag: "network volumes", summary: "Find a network volume by id",
			params: []obj{vid}, responses: obj{"200": resp("The volume.", ref("NetworkVolume")), "404": m("Network volume not found.")}},
		volumeUpdate(patch, "/v1/networkvolumes/{networkVolumeId}", "UpdateNetworkVolume", vid),
		volumeUpdate(post, "/v1/networkvolumes/{networkVolumeId}/update", "UpdateNetworkVolumePost", vid),
		{method: del, path: "/v1/networkvolumes/{networkVolumeId}", id: "DeleteNetworkVolume", tag: "network volumes", summary: "Delete a network volume and its files",
			params:    []obj{vid},
			responses: obj{"204": noBody("Deleted."), "404": m("Network volume not found."), "409": m("Attached to an endpoint or pod; the message names them.")}},

		// Registry auths.
		{method: post, path: "/v1/containerregistryauth", id: "CreateContainerRegistryAuth", tag: "container registry auths", summary: "Create a registry credential",
			body: body(ref("ContainerRegistryAuthCreateInput")),
			responses: obj{"200": resp("Created (the password is not returned).", ref("ContainerRegistryAuth")), "400": m("Invalid input."),
				"409": m("A registry auth with this name exists."), "413": m("Body over 1 MB.")}},
		{method: get, path: "/v1/containerregistryauth", id: "ListContainerRegistryAuths", tag: "container registry auths", summary: "List registry credentials",
			responses: obj{"200": resp("Oldest first.", arrayOf(ref("ContainerRegistryAuth")))}},
		{method: get, path: "/v1/containerregistryauth/{containerRegistryAuthId}", id: "GetContainerRegistryAuth", tag: "container registry auths",
			summary: "Find a registry credential by id", params: []obj{rid},
			responses: obj{"200": resp("The credential (no password).", ref("ContainerRegistryAuth")), "404": m("Not found.")}},
		{method: del, path: "/v1/containerregistryauth/{containerRegistryAuthId}", id: "DeleteContainerRegistryAuth", tag: "container registry auths",
			summary: "Delete a registry credential", params: []obj{rid},
			responses: obj{"204": noBody("Deleted."), "404": m("Not found."), "409": m("A template or pod uses it; the message names them.")}},

		// Billing.
		{method: get, path: "/v1/billing/pods", id: "PodBilling", tag: "billing", summary: "Pod billing history",
			params: append(billingParams(), enumQ("grouping", "gpuTypeId", "podId", "gpuTypeId"),
				listQ("gpuTypeId", "Only these GPU types (\"CPU\" for CPU pods)."), queryP("podId", "Only this pod.", obj{"type": "string"})),
			responses: obj{"200": resp("One record per bucket and group, by time.", arrayOf(ref("BillingRecord"))), "400": m("Invalid parameter.")}},
		{method: get, path: "/v1/billing/endpoints", id: "EndpointBilling", tag: "billing", summary: "Serverless billing history",
			params: append(billingParams(), enumQ("grouping", "endpointId", "endpointId", "podId", "gpuTypeId"),
				listQ("dataCenterId", "Only these data centres."), queryP("endpointId", "Only this endpoint.", obj{"type": "string"}),
				listQ("gpuTypeId", "Only these GPU types (\"CPU\" for CPU workers)."), queryP("imageName", "Only workers of this image.", obj{"type": "string"}),
				queryP("templateId", "Only workers of this template.", obj{"type": "string"})),
			responses: obj{"200": resp("One record per bucket and group, by time.", arrayOf(ref("BillingRecord"))), "400": m("Invalid parameter.")}},
		{method: get, path: "/v1/billing/networkvolumes", id: "NetworkVolumeBilling", tag: "billing", summary: "Network volume billing history",
			params:    billingParams(),
			responses: obj{"200": resp("One record per bucket, by time.", arrayOf(ref("NetworkVolumeBillingRecord"))), "400": m("Invalid parameter.")}},

		{method: get, path: "/v1/gpus", id: "ListGPUs", tag: "berth extensions", summary: "This host's GPUs, their types and holders",
			desc:      "The GPUs NVML found (also when Docker is not reachable), each with the worker or pod holding it.",
			responses: obj{"200": resp("By index; [] without GPUs (no NVIDIA driver, or a build without cgo).", arrayOf(ref("GPU")))}},
		{method: get, path: "/v1/backup", id: "Backup", tag: "berth extensions", summary: "A consistent copy of the database file",
			desc:      "The bbolt file as of one read transaction (writes go on meanwhile); Content-Length is its size. `berth backup FILE` saves it.",
			responses: obj{"200": obj{"description": "The database file.", "content": obj{"application/octet-stream": obj{"schema": obj{"type": "string", "format": "binary"}}}}}},
	}
	return append(append(append(ops, jobOperations()...), jobViewOperations()...), openaiOperations()...)
}

func enumQ(name, def string, values ...string) obj {
	return queryP(name, "["+def+"]", obj{"type": "string", "enum": values, "default": def})
}

// logParams are the log routes' query parameters; jobId is for workers.
func logParams(withJob bool) []obj {
	ps := []obj{
		boolQ("follow", "Stream new lines as they come, until the container stops or the client goes away."),
		queryP("tail", "Only the last N lines [0: all].", obj{"type": "integer", "minimum": 0}),
	}
	if withJob {
		ps = append(ps, queryP("jobId", "Only the lines runpod-python logged for this job: its JSON log lines whose requestId is the job id (tail applies first).",
			obj{"type": "string", "minLength": 1}))
	}
	return ps
}

// logResp is a log route's 200: the container's log as text.
func logResp() obj {
	return obj{"description": "Log lines as the container wrote them; with follow=true the body streams.",
		"content": obj{"text/plain; charset=utf-8": obj{"schema": obj{"type": "string"}}}}
}

func billingParams() []obj {
	return []obj{
		enumQ("bucketSize", "day", mgmt.BucketSizes...),
		queryP("startTime", "RFC 3339 [endTime − 30 days].", obj{"type": "string", "format": "date-time"}),
		queryP("endTime", "RFC 3339 [now].", obj{"type": "string", "format": "date-time"}),
	}
}

func templateUpdate(method, path, id string, tid obj) op {
	return op{method: method, path: path, id: id, tag: "templates", summary: "Update a template",
		desc:   "A change to what the containers run (not name, readme or isPublic) bumps the version of every endpoint using the template, rolling its workers.",
		params: []obj{tid}, body: body(ref("TemplateUpdateInput")),
		responses: obj{"200": resp("Updated.", ref("Template")), "400": mErr("Invalid id or input (category and isServerless cannot change)."),
			"404": mErr("Template not found."), "409": mErr("Another template has this name."), "413": mErr("Body over 1 MB.")}}
}

func endpointUpdate(method, path, id string, eid obj) op {
	return op{method: method, path: path, id: id, tag: "endpoints", summary: "Update an endpoint",
		params: []obj{eid}, body: body(ref("EndpointUpdateInput")),
		responses: obj{"200": resp("Updated.", ref("Endpoint")), "400": mErr("Invalid input (computeType cannot change)."),
			"404": mErr("Endpoint not found."), "413": mErr("Body over 1 MB.")}}
}

func podUpdate(method, path, id string, pid obj) op {
	return op{method: method, path: path, id: id, tag: "pods", summary: "Update a pod",
		desc:   "The change is stored; one that needs a new container bumps version and resets a running pod.",
		params: []obj{pid}, body: body(ref("PodUpdateInput")),
		responses: obj{"200": resp("Updated.", ref("Pod")), "400": mErr("Invalid input."), "404": mErr("Pod not found."),
			"409": mErr("The pod is locked and the change needs a reset, or not enough free GPUs for the reset."), "413": mErr("Body over 1 MB."),
			"503": mErr("The change is stored but the reset could not happen; statusMessage says why.")}}
}

func podAction(action, summary string, pid obj) op {
	return op{method: "POST", path: "/v1/pods/{podId}/" + action, id: strings.ToUpper(action[:1]) + action[1:] + "Pod", tag: "pods", summary: summary,
		params: []obj{pid},
		responses: obj{"200": resp("Done; the pod.", ref("Pod")), "400": mErr("The container cannot be made (e.g. no such image)."),
			"404": mErr("Pod not found."), "409": mErr("The pod is locked, or not enough free GPUs."),
			"503": mErr("No container runtime, or it failed; desiredStatus is unchanged and statusMessage says why.")}}
}

func volumeUpdate(method, path, id string, vid obj) op {
	return op{method: method, path: path, id: id, tag: "network volumes", summary: "Rename or grow a network volume",
		params: []obj{vid}, body: body(ref("NetworkVolumeUpdateInput")),
		responses: obj{"200": resp("Updated.", ref("NetworkVolume")), "400": mErr("Invalid input (size may only grow)."),
			"404": mErr("Network volume not found."), "413": mErr("Body over 1 MB.")}}
}

// jobOperations are the /v2/{endpointId} routes: the job API and the
// worker protocol.
func jobOperations() []op {
	const get, post = "GET", "POST"
	eid := pathP("endpointId", "")
	jid := pathP("jobId", "")
	wid := pathP("workerId", "The worker's id; \"$RUNPOD_POD_ID\" or \"$ID\" (left unsubstituted by the SDK) are taken from the worker key.")
	j := jErr
	common := func(rs obj, limited bool) obj {
		rs = maps.Clone(rs)
		rs["404"] = j("Endpoint (or job) not found; a job past its ttl is gone.")
		if limited {
			rs["429"] = j("Rate limit of the endpoint and operation exceeded; Retry-After says when to retry.")
		}
		return rs
	}
	wait := func(def string) obj {
		return queryP("wait", "How long to wait, ms ["+def+"].", obj{"type": "integer"})
	}
	status := func(method, id string) op {
		return op{method: method, path: "/v2/{endpointId}/status/{jobId}", id: id, tag: "job API", summary: "A job's status and result",
			params:    []obj{eid, jid, queryP("ttl", "Set a new ttl for the job, ms (10000-604800000).", obj{"type": "integer"})},
			responses: common(obj{"200": resp("The job.", ref("StatusResponse")), "400": j("Invalid ttl.")}, true)}
	}
	statusSync := func(method, id string) op {
		return op{method: method, path: "/v2/{endpointId}/status-sync/{jobId}", id: id, tag: "job API", summary: "Wait for a job to finish",
			params:    []obj{eid, jid, wait("90000; 1000-300000")},
			responses: common(obj{"200": resp("The job, finished or as it is when the wait ends.", ref("StatusResponse")), "400": j("Invalid wait.")}, true)}
	}
	stream := func(method, id string) op {
		return op{method: method, path: "/v2/{endpointId}/stream/{jobId}", id: id, tag: "job API", summary: "A streaming job's new chunks",
			params:    []obj{eid, jid, wait("10000; 0-300000")},
			responses: common(obj{"200": resp("Chunks since the last call.", ref("StreamResponse")), "400": j("Invalid wait.")}, true)}
	}
	// job-done and job-stream bodies are JSON whatever the content type:
	// the SDK sends them as application/x-www-form-urlencoded.
	resultBody := obj{"required": true, "content": obj{
		"application/json":                  obj{"schema": ref("JobResult")},
		"application/x-www-form-urlencoded": obj{"schema": obj{"type": "string", "description": "The same JSON object as text: runpod-python sends JSON under this content type; it is never parsed as a form."}},
		"text/plain":                        obj{"schema": obj{"type": "string", "description": "The same JSON object as text."}},
	}}
	return []op{
		{method: post, path: "/v2/{endpointId}/run", id: "Run", tag: "job API", summary: "Submit a job", params: []obj{eid},
			body:      body(ref("JobSubmission")),
			responses: common(obj{"200": resp("Queued.", ref("JobRef")), "400": j("Invalid submission."), "413": j("Body over 10 MB.")}, true)},
		{method: post, path: "/v2/{endpointId}/runsync", id: "RunSync", tag: "job API", summary: "Submit a job and wait for its result",
			params: []obj{eid, wait("90000; 1000-300000")}, body: body(ref("JobSubmission")),
			responses: common(obj{"200": resp("The finished job, or its id and status when the wait ends first.", ref("StatusResponse")),
				"400": j("Invalid submission or wait."), "413": j("Body over 20 MB.")}, true)},
		status(get, "Status"), status(post, "StatusPost"),
		statusSync(get, "StatusSync"), statusSync(post, "StatusSyncPost"),
		stream(get, "Stream"), stream(post, "StreamPost"),
		{method: post, path: "/v2/{endpointId}/cancel/{jobId}", id: "Cancel", tag: "job API", summary: "Cancel a queued or running job",
			params: []obj{eid, jid}, responses: common(obj{"200": resp("The job's status (a finished job is left as is).", ref("JobRef"))}, true)},
		{method: post, path: "/v2/{endpointId}/retry/{jobId}", id: "Retry", tag: "job API", summary: "Requeue a FAILED or TIMED_OUT job",
			params:    []obj{eid, jid},
			responses: common(obj{"200": resp("Requeued.", ref("JobRef")), "400": resp("The job is not FAILED or TIMED_OUT.", ref("RetryRefused"))}, true)},
		{method: post, path: "/v2/{endpointId}/purge-queue", id: "PurgeQueue", tag: "job API", summary: "Remove every queued job (running jobs continue)",
			params: []obj{eid}, responses: common(obj{"200": resp("How many were removed.", ref("PurgeResult"))}, true)},
		{method: get, path: "/v2/{endpointId}/health", id: "Health", tag: "job API", summary: "Job and worker counts",
			params: []obj{eid}, responses: common(obj{"200": resp("Counts.", ref("Health"))}, false)},

		{method: get, path: "/v2/{endpointId}/job-take/{workerId}", id: "JobTake", tag: "worker protocol", summary: "Take one job (long poll)",
			params:    []obj{eid, wid, queryP("gpu", "Ignored.", obj{"type": "string"}), queryP("job_in_progress", "0 or 1; ignored.", obj{"type": "string"})},
			responses: common(obj{"200": resp("A job.", ref("TakenJob")), "204": noBody("No job within the hold.")}, false)},
		{method: get, path: "/v2/{endpointId}/job-take-batch/{workerId}", id: "JobTakeBatch", tag: "worker protocol", summary: "Take up to batch_size jobs (long poll)",
			params: []obj{eid, wid, queryP("batch_size", "1-256 [1].", obj{"type": "integer", "minimum": 1, "maximum": maxBatch}),
				queryP("gpu", "Ignored.", obj{"type": "string"}), queryP("job_in_progress", "0 or 1; ignored.", obj{"type": "string"})},
			responses: common(obj{"200": resp("Jobs.", arrayOf(ref("TakenJob"))), "204": noBody("No job within the hold."), "400": j("Invalid batch_size.")}, false)},
		{method: post, path: "/v2/{endpointId}/job-done/{workerId}/{jobId}", id: "JobDone", tag: "worker protocol", summary: "Report a job's result or progress",
			params: []obj{eid, wid, jid, queryP("isStream", "true when the handler was a generator.", obj{"type": "string", "enum": []string{"true", "false"}}),
				queryP("gpu", "Ignored.", obj{"type": "string"})},
			body:      resultBody,
			responses: common(obj{"200": resp("Taken into account (accepted false: no longer this worker's job).", ref("Accepted")), "400": j("Body is not a JSON object."), "413": j("Body over 64 MB.")}, false)},
		{method: post, path: "/v2/{endpointId}/job-stream/{workerId}/{jobId}", id: "JobStream", tag: "worker protocol", summary: "Post a stream chunk",
			params:    []obj{eid, wid, jid, queryP("isStream", "Ignored.", obj{"type": "string"}), queryP("gpu", "Ignored.", obj{"type": "string"})},
			body:      resultBody,
			responses: common(obj{"200": resp("Taken into account.", ref("Accepted")), "400": j("Invalid chunk."), "413": j("Body over 32 MB.")}, false)},
		{method: get, path: "/v2/{endpointId}/job-stop/{workerId}", id: "JobStop", tag: "worker protocol", summary: "Jobs the worker must stop (long poll)",
			params:    []obj{eid, wid, queryP("gpu", "Ignored.", obj{"type": "string"})},
			responses: common(obj{"200": resp("Jobs to stop.", ref("JobsToStop")), "204": noBody("Nothing to stop within the hold.")}, false)},
		{method: get, path: "/v2/{endpointId}/ping/{workerId}", id: "Ping", tag: "worker protocol", summary: "Heartbeat with the jobs in progress",
			params: []obj{eid, wid, queryP("job_id", "Comma-joined ids of the jobs in progress.", obj{"type": "string"}),
				queryP("runpod_version", "", obj{"type": "string"}), queryP("status", "\"unhealthy\" from a failed fitness check.", obj{"type": "string"}),
				queryP("check", "", obj{"type": "string"}), queryP("reason", "", obj{"type": "string"}), queryP("gpu", "Ignored.", obj{"type": "string"})},
			responses: common(obj{"200": resp("Seen.", ref("PingAck"))}, false)},
	}
}
