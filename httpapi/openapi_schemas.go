package httpapi

import (
	"maps"

	"berth/mgmt"
)

// schemas are the OpenAPI document's components.schemas: the records, the
// inputs (refusing unknown fields, as decodeStrict does) and the job API's
// shapes.
func schemas() obj {
	warningsS := strArr("Berth: ids accepted but unknown to Berth (GPU types, pools, data centres), and what they match.")
	template := object(obj{
		"id":                      strS("Template id: 10 lowercase letters or digits."),
		"name":                    strS("Unique name."),
		"imageName":               strS("Image the containers run."),
		"category":                enumS("", "NVIDIA", "AMD", "CPU"),
		"containerDiskInGb":       intS("Container disk, GB; wiped on restart."),
		"volumeInGb":              intS("Pod volume, GB; kept across restarts."),
		"volumeMountPath":         strS("Where the volume is mounted."),
		"dockerEntrypoint":        strArr("Overrides the image's ENTRYPOINT; [] keeps it."),
		"dockerStartCmd":          strArr("Overrides the image's CMD; [] keeps it."),
		"env":                     envS(),
		"ports":                   strArr("\"<port>/<http|tcp>\" entries."),
		"readme":                  strS("Markdown."),
		"isPublic":                boolS(""),
		"isRunpod":                boolS("Always false on Berth."),
		"isServerless":            boolS(""),
		"containerRegistryAuthId": strS("Registry auth used to pull the image; absent when none."),
		"portLabels": obj{"type": "object", "additionalProperties": obj{"type": "string"},
			"description": "Berth: port number → label, set through GraphQL's portsConfig; absent when none."},
		"earned":       numS("Always 0 on Berth."),
		"runtimeInMin": intS("Always 0 on Berth."),
		"createdAt":    timeS(""),
	}, "id", "name", "imageName", "category", "containerDiskInGb", "volumeInGb", "volumeMountPath",
		"dockerEntrypoint", "dockerStartCmd", "env", "ports", "readme", "isPublic", "isRunpod", "isServerless", "createdAt")

	portsIn := obj{"description": "An array of \"<port>/<http|tcp>\" or the same joined with commas (\"8888/http,22/tcp\").",
		"oneOf": []obj{strArr(""), obj{"type": "string"}}}
	templateFields := obj{
		"name":                    strS("Unique name."),
		"imageName":               strS(""),
		"containerDiskInGb":       withMin(intS("[50]"), 0),
		"volumeInGb":              withMin(intS("[20]"), 0),
		"volumeMountPath":         strS("Absolute path [\"/workspace\"]."),
		"dockerEntrypoint":        strArr("[[]]"),
		"dockerStartCmd":          strArr("[[]]"),
		"env":                     envS(),
		"ports":                   portsIn,
		"readme":                  strS(""),
		"isPublic":                boolS("[false]"),
		"containerRegistryAuthId": strS("Must name an existing registry auth; \"\" clears it."),
	}
	templateCreate := maps.Clone(templateFields)
	templateCreate["category"] = enumS("[NVIDIA]", "NVIDIA", "AMD", "CPU")
	templateCreate["isServerless"] = boolS("[false]")

	endpoint := object(obj{
		"id":                  strS("14 lowercase letters or digits."),
		"name":                strS(""),
		"userId":              strS("Always \"berth\"."),
		"templateId":          strS(""),
		"version":             intS("Bumped when the template's container settings, templateId, env, GPUs, CPUs or volumes change; workers of an older version are rolled."),
		"type":                enumS("QUEUE: jobs through the queue; LOAD_BALANCER: requests proxied to the workers' own HTTP servers.", "QUEUE", "LOAD_BALANCER"),
		"computeType":         enumS("", "GPU", "CPU"),
		"gpuTypeIds":          strArr("In order of preference."),
		"gpuCount":            intS(""),
		"cpuFlavorIds":        strArr(""),
		"vcpuCount":           intS(""),
		"instanceIds":         strArr(""),
		"allowedCudaVersions": strArr(""),
		"minCudaVersion":      strS(""),
		"dataCenterIds":       strArr("As given; every id is this host (\"" + DataCenterID + "\" by default)."),
		"warnings":            warningsS,
		"networkVolumeId":     strS(""),
		"networkVolumeIds":    strArr(""),
		"idleTimeout":         intS("Seconds."),
		"scalerType":          enumS("", "QUEUE_DELAY", "REQUEST_COUNT"),
		"scalerValue":         intS(""),
		"workersMin":          intS(""),
		"workersMax":          intS(""),
		"flashboot":           boolS(""),
		"executionTimeoutMs":  intS(""),
		"env":                 envS(),
		"createdAt":           timeS(""),
		"template":            ref("Template"),
		"workers":             obj{"type": "array", "items": ref("Worker"), "description": "With includeWorkers=true."},
		"status":              ref("EndpointStatus"),
	}, "id", "name", "userId", "templateId", "version", "type", "computeType", "gpuTypeIds", "gpuCount", "vcpuCount",
		"allowedCudaVersions", "dataCenterIds", "idleTimeout", "scalerType", "scalerValue", "workersMin", "workersMax",
		"flashboot", "executionTimeoutMs", "env", "createdAt")

	endpointFields := obj{
		"name":                strS(""),
		"templateId":          strS("Must name an existing template."),
		"type":                enumS("[QUEUE]; set on create only (an update may repeat it). LOAD_BALANCER implies scalerType REQUEST_COUNT.", "QUEUE", "LOAD_BALANCER"),
		"gpuTypeIds":          strArr("RunPod GPU type ids in order of preference."),
		"gpuCount":            withMin(intS("[1]"), 1),
		"cpuFlavorIds":        strArr(""),
		"vcpuCount":           withMin(intS("[2]"), 1),
		"instanceIds":         strArr(""),
		"allowedCudaVersions": strArr(""),
		"minCudaVersion":      strS(""),
		"dataCenterIds":       obj{"type": "array", "items": obj{"type": "string", "pattern": mgmt.DataCenterPattern}, "description": "Any RunPod data-centre id; all are this host."},
		"networkVolumeId":     strS("Must name an existing network volume; \"\" for none."),
		"networkVolumeIds":    strArr("Each must name an existing network volume."),
		"idleTimeout":         withRange(intS("Seconds [5]."), 1, 3600),
		"scalerType":          enumS("[QUEUE_DELAY]", "QUEUE_DELAY", "REQUEST_COUNT"),
		"scalerValue":         withMin(intS("[4]"), 1),
		"workersMin":          withMin(intS("[0]; at most workersMax."), 0),
		"workersMax":          withMin(intS("[3]"), 0),
		"flashboot":           boolS(""),
		"executionTimeoutMs":  withRange(intS("[600000]"), 5000, 604800000),
		"env":                 envS(),
	}
	endpointCreate := maps.Clone(endpointFields)
	endpointCreate["computeType"] = enumS("[GPU]", "GPU", "CPU")

	podGPU := object(obj{
		"id": strS("gpuTypeId."), "count": intS(""), "displayName": strS(""),
		"uuids": strArr("Berth: the pinned devices."),
	}, "id", "count", "displayName")
	portMappings := obj{"type": "object", "nullable": true, "additionalProperties": obj{"type": "integer"},
		"description": "Container port to host port; null while not running."}

	pod := object(obj{
		"id":                      strS("14 lowercase letters or digits."),
		"name":                    strS(""),
		"desiredStatus":           enumS("Changes only when the runtime carried an action out.", "RUNNING", "EXITED", "TERMINATED"),
		"version":                 intS("Berth: bumped when a change needs a new container."),
		"image":                   strS("Same as imageName."),
		"imageName":               strS(""),
		"templateId":              strS("Template the pod was created from (its settings were copied)."),
		"containerRegistryAuthId": strS(""),
		"dockerEntrypoint":        strArr(""),
		"dockerStartCmd":          strArr(""),
		"env":                     envS(),
		"ports":                   strArr(""),
		"containerDiskInGb":       intS(""),
		"volumeInGb":              intS(""),
		"volumeMountPath":         strS(""),
		"volumeEncrypted":         boolS("Always false."),
		"networkVolumeId":         strS(""),
		"computeType":             enumS("", "GPU", "CPU"),
		"cloudType":               enumS("", "SECURE", "COMMUNITY"),
		"gpuTypeIds":              strArr("Requested GPU types."),
		"gpuTypePriority":         strS(""),
		"gpuCount":                intS(""),
		"minRAMPerGPU":            intS(""),
		"minVCPUPerGPU":           intS(""),
		"cpuFlavorIds":            strArr(""),
		"cpuFlavorPriority":       strS(""),
		"vcpuCount":               intS(""),
		"allowedCudaVersions":     strArr(""),
		"dataCenterIds":           strArr(""),
		"dataCenterPriority":      strS(""),
		"countryCodes":            strArr(""),
		"minDownloadMbps":         numS(""),
		"minUploadMbps":           numS(""),
		"minDiskBandwidthMBps":    numS(""),
		"supportPublicIp":         boolS(""),
		"globalNetworking":        boolS(""),
		"interruptible":           boolS(""),
		"locked":                  boolS("A locked pod cannot be stopped, reset, restarted or deleted."),
		"gpu":                     podGPU,
		"memoryInGb":              numS(""),
		"portMappings":            portMappings,
		"publicIp":                strS(""),
		"machineId":               strS("The host's name."),
		"lastStartedAt":           timeS(""),
		"lastStatusChange":        strS("The last lifecycle event, e.g. \"Started by user: 2026-01-02T03:04:05Z\"."),
		"statusMessage":           strS("Berth: why the last action did not take effect; absent when it did."),
		"warnings":                warningsS,
		"createdAt":               timeS(""),
		"consumerUserId":          strS("Always \"berth\"."),
		"costPerHr":               numS("From the price table (prices.json)."),
		"adjustedCostPerHr":       numS("Same as costPerHr."),
		"machine":                 ref("Machine"),
		"networkVolume":           ref("NetworkVolumeRecord"),
		"savingsPlans":            obj{"type": "array", "items": obj{"type": "object"}, "description": "Always []."},
		"template":                ref("Template"),
	}, "id", "name", "desiredStatus", "version", "image", "imageName", "dockerEntrypoint", "dockerStartCmd", "env", "ports",
		"containerDiskInGb", "volumeInGb", "volumeMountPath", "computeType", "gpuCount", "vcpuCount", "dataCenterIds",
		"locked", "portMappings", "publicIp", "machineId", "lastStatusChange", "createdAt", "costPerHr")

	podFields := obj{
		"name":                    obj{"type": "string", "maxLength": 191, "description": "[\"my pod\"]"},
		"imageName":               strS("Required unless templateId gives one."),
		"dockerEntrypoint":        strArr("[[]]"),
		"dockerStartCmd":          strArr("[[]]"),
		"env":                     envS(),
		"ports":                   portsIn,
		"containerDiskInGb":       withMin(intS("[50]"), 0),
		"volumeInGb":              withMin(intS("[20]"), 0),
		"volumeMountPath":         strS("Absolute path [\"/workspace\"]."),
		"containerRegistryAuthId": strS("Must name an existing registry auth."),
		"globalNetworking":        boolS("[false]; stored, no effect on Berth."),
		"locked":                  boolS("[false]"),
	}
	podCreate := maps.Clone(podFields)
	maps.Copy(podCreate, obj{
		"templateId":           strS("Its image, command, env, ports, disks and registry auth are copied; the request's fields win (env is merged)."),
		"volumeEncrypted":      obj{"type": "boolean", "enum": []bool{false}, "description": "Berth does not encrypt volumes."},
		"networkVolumeId":      strS("Must name an existing network volume."),
		"computeType":          enumS("[GPU]", "GPU", "CPU"),
		"cloudType":            enumS("[SECURE]; stored, no effect.", "SECURE", "COMMUNITY"),
		"dataCenterIds":        obj{"type": "array", "items": obj{"type": "string", "pattern": mgmt.DataCenterPattern}},
		"dataCenterPriority":   enumS("", "availability", "custom"),
		"countryCodes":         strArr("Stored, no effect."),
		"allowedCudaVersions":  obj{"type": "array", "items": obj{"type": "string", "pattern": `^[0-9]{1,2}\.[0-9]$`}},
		"gpuTypeIds":           strArr("In order of preference."),
		"gpuTypePriority":      enumS("", "availability", "custom"),
		"gpuCount":             withMin(intS("[1]"), 1),
		"minRAMPerGPU":         withMin(intS("[8]"), 0),
		"minVCPUPerGPU":        withMin(intS("[2]"), 0),
		"cpuFlavorIds":         obj{"type": "array", "items": enumS("", "cpu3c", "cpu3g", "cpu3m", "cpu5c", "cpu5g", "cpu5m")},
		"cpuFlavorPriority":    enumS("", "availability", "custom"),
		"vcpuCount":            withMin(intS("[2]"), 1),
		"minDownloadMbps":      obj{"type": "number", "minimum": 0},
		"minUploadMbps":        obj{"type": "number", "minimum": 0},
		"minDiskBandwidthMBps": obj{"type": "number", "minimum": 0},
		"supportPublicIp":      boolS(""),
		"interruptible":        boolS("[false]; stored, no effect."),
	})

	worker := object(obj{
		"id":             strS("Worker id (its RUNPOD_POD_ID)."),
		"name":           strS(""),
		"desiredStatus":  enumS("", "RUNNING", "EXITED"),
		"endpointId":     strS(""),
		"aiApiId":        strS("Same as endpointId."),
		"slsVersion":     intS("Endpoint version the worker runs."),
		"image":          strS(""),
		"imageName":      strS(""),
		"gpu":            podGPU,
		"gpuCount":       intS(""),
		"vcpuCount":      intS(""),
		"lastStartedAt":  timeS(""),
		"state":          enumS("Berth. frozen: a FlashBoot worker whose container is paused.", "initializing", "idle", "running", "throttled", "unhealthy", "exited", "lost", "frozen"),
		"statusMessage":  strS(""),
		"jobsInProgress": intS(""),
		"lastSeenAt":     timeS("Last request from the worker."),
		"external":       boolS("Registered through worker-env, running outside Docker."),
		"portMappings":   portMappings,
	}, "id", "desiredStatus", "endpointId", "slsVersion", "state", "jobsInProgress", "external")

	volumeRecord := object(obj{
		"id": strS("10 lowercase letters or digits."), "name": strS(""), "size": intS("GB."),
		"dataCenterId": strS("As given at creation; every id is this host."), "createdAt": timeS(""),
		"warnings": warningsS,
	}, "id", "name", "size", "dataCenterId")
	volume := maps.Clone(volumeRecord)
	volProps := maps.Clone(volumeRecord["properties"].(obj))
	volProps["usedBytes"] = intS("Berth: bytes held by the volume's files (measured at most every 30 s). The size is not enforced.")
	volProps["path"] = strS("Berth: the host directory.")
	volume["properties"] = volProps
	volume["required"] = []string{"id", "name", "size", "dataCenterId", "usedBytes", "path"}

	billing := object(obj{
		"amount":            numS("USD, from the price table."),
		"time":              timeS("Start of the bucket (UTC; weeks start on Monday)."),
		"timeBilledMs":      intS(""),
		"diskSpaceBilledGb": intS("Always 0 for compute."),
		"podId":             strS("With grouping=podId (a worker id on /billing/endpoints)."),
		"endpointId":        strS("With grouping=endpointId."),
		"gpuTypeId":         strS("With grouping=gpuTypeId; CPU work is \"CPU\"."),
	}, "amount", "time", "timeBilledMs", "diskSpaceBilledGb")

	status := enumS("", "IN_QUEUE", "IN_PROGRESS", "COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT")
	return obj{
		"Error":    object(obj{"message": strS("")}, "message"),
		"JobError": object(obj{"error": strS("")}, "error"),
		"GraphQLRequest": object(obj{"query": strS("The GraphQL document."), "variables": obj{"type": "object", "nullable": true},
			"operationName": obj{"type": "string", "nullable": true}}, "query"),
		"GraphQLResponse": object(obj{"data": obj{"type": "object", "nullable": true, "description": "Always present; null when nothing ran."},
			"errors": arrayOf(object(obj{"message": strS(""), "path": arrayOf(obj{}), "locations": arrayOf(obj{"type": "object"}),
				"extensions": obj{"type": "object", "description": "code (BAD_USER_INPUT, NOT_FOUND, CONFLICT, UNAVAILABLE, UNSUPPORTED) and field."}}, "message"))}, "data"),

		"Template":            template,
		"TemplateCreateInput": input(templateCreate, "name", "imageName"),
		"TemplateUpdateInput": input(templateFields),

		"Endpoint":            endpoint,
		"EndpointCreateInput": input(endpointCreate, "templateId"),
		"EndpointUpdateInput": input(endpointFields),
		"Worker":              worker,
		"EndpointStatus": object(obj{
			"workers": object(obj{
				"initializing": intS("Starting, or not yet in contact with Berth."), "idle": intS(""), "running": intS(""),
				"throttled": intS("Wanted but waiting for GPUs held by other workers or pods."),
				"unhealthy": intS("Cannot be kept running (an image that does not start, a crash loop)."),
				"draining":  intS("Finishing their jobs before they stop."),
				"frozen":    intS("FlashBoot: paused containers, thawed by the next job."),
			}, "initializing", "idle", "running", "throttled", "unhealthy", "draining"),
			"desired":     intS("Workers the autoscaler wants, within workersMin and workersMax."),
			"unhealthy":   boolS(""),
			"reason":      strS("Why jobs are held back or failing (workersMax reached, waiting for free GPUs, an unhealthy image, a pull…); absent when nothing is. /health repeats it."),
			"warning":     strS("A standing condition that does not stop work, e.g. a GPU endpoint running on CPU."),
			"lastError":   strS(""),
			"failures":    intS("Failed starts in a row."),
			"crashes":     intS("Recent crashes."),
			"attempts":    intS("Worker containers launched since Berth started."),
			"nextAttempt": timeS("When a start held back by back-off may happen."),
		}, "workers", "desired", "unhealthy", "failures", "crashes", "attempts"),
		"WorkerEnv": obj{"type": "object", "additionalProperties": obj{"type": "string"},
			"description": "RUNPOD_* variables for one newly registered worker, e.g. RUNPOD_WEBHOOK_GET_JOB, RUNPOD_AI_API_KEY, RUNPOD_POD_ID."},

		"Pod":            pod,
		"PodCreateInput": input(podCreate),
		"PodUpdateInput": input(podFields),
		"Machine": object(obj{
			"dataCenterId": strS(""), "location": strS(""), "gpuTypeId": strS(""), "gpuDisplayName": strS(""),
			"cpuCount": intS(""), "secureCloud": boolS(""), "supportPublicIp": boolS(""),
		}, "dataCenterId", "cpuCount"),

		"NetworkVolumeRecord": volumeRecord,
		"NetworkVolume":       volume,
		"NetworkVolumeCreateInput": input(obj{
			"name":         strS("Need not be unique."),
			"size":         withRange(intS("GB."), 1, mgmt.MaxVolumeGB),
			"dataCenterId": obj{"type": "string", "pattern": mgmt.DataCenterPattern, "description": "Any RunPod data-centre id; all are this host."},
		}, "name", "size", "dataCenterId"),
		"NetworkVolumeUpdateInput": input(obj{
			"name": strS(""),
			"size": withRange(intS("GB; may only grow."), 1, mgmt.MaxVolumeGB),
		}),

		"ContainerRegistryAuth": object(obj{
			"id": strS(""), "name": strS("Unique."), "username": strS(""), "createdAt": timeS(""),
		}, "id", "name", "username"),
		"ContainerRegistryAuthCreateInput": input(obj{
			"name": strS("Unique."), "username": strS(""), "password": strS("Stored in the database file (mode 0600); never returned."),
		}, "name", "username", "password"),

		"BillingRecord": billing,
		"NetworkVolumeBillingRecord": object(obj{
			"amount":                       numS("USD: GB × months (730 h) × volumeGbMonthly."),
			"time":                         timeS("Start of the bucket."),
			"diskSpaceBilledGb":            intS("Sum over volumes of each one's largest size in the bucket."),
			"highPerformanceStorageAmount": numS("Always 0."),
			"highPerformanceStorageDiskSpaceBilledGb": intS("Always 0."),
		}, "amount", "time", "diskSpaceBilledGb"),

		"GPU": object(obj{
			"index": intS("NVML index."), "uuid": strS("GPU-…; what containers are given."), "name": strS("NVML name."),
			"gpuTypeId": strS("RunPod GPU type id."), "memoryInMiB": intS(""), "pciBusId": strS(""),
			"holder": strS("Id of the worker or pod holding it; \"\" when free."),
		}, "index", "uuid", "name", "gpuTypeId", "memoryInMiB", "pciBusId", "holder"),

		"JobStatus": status,
		"JobSubmission": object(obj{
			"input":   obj{"type": "object", "description": "Handler input."},
			"webhook": strS("http(s) URL called with the final status."),
			"policy": object(obj{
				"executionTimeout": withRange(intS("ms [endpoint's executionTimeoutMs]."), 5000, 604800000),
				"ttl":              withRange(intS("ms [86400000]."), 10000, 604800000),
				"lowPriority":      boolS("[false]"),
			}),
			"s3Config": obj{"type": "object", "additionalProperties": obj{"type": "string"},
				"description": "accessId, accessSecret, bucketName, endpointUrl: handed to the worker."},
		}, "input"),
		"JobRef": object(obj{"id": strS(""), "status": ref("JobStatus")}, "id", "status"),
		"StatusResponse": object(obj{
			"id":            strS(""),
			"status":        ref("JobStatus"),
			"delayTime":     intS("ms in the queue."),
			"executionTime": intS("ms running."),
			"input":         anyS("The job's input (status routes)."),
			"output":        anyS("Handler output."),
			"error":         strS(""),
			"workerId":      strS(""),
			"retries":       intS(""),
		}, "id", "status"),
		"StreamResponse": object(obj{
			"id": strS(""), "status": ref("JobStatus"),
			"stream": obj{"type": "array", "items": anyS("A chunk: {\"output\": …}.")},
			"error":  strS(""),
		}, "id", "status", "stream"),
		"RetryRefused": object(obj{"id": strS(""), "status": ref("JobStatus"), "error": strS("")}, "id", "status", "error"),
		"PurgeResult":  object(obj{"removed": intS(""), "status": enumS("", "completed")}, "removed", "status"),
		"Health": object(obj{
			"jobs": object(obj{"completed": intS(""), "failed": intS(""), "inProgress": intS(""), "inQueue": intS(""), "retried": intS("")},
				"completed", "failed", "inProgress", "inQueue", "retried"),
			"workers": object(obj{"idle": intS(""), "running": intS(""), "initializing": intS(""), "ready": intS(""), "throttled": intS(""), "unhealthy": intS(""),
				"frozen": intS("Berth: FlashBoot workers whose container is paused (not counted as idle or ready); the next job thaws one.")},
				"idle", "running"),
			"reason": strS("Berth: why jobs are held back (e.g. workersMax reached, waiting for free GPUs, an unhealthy image); absent when nothing is."),
		}, "jobs", "workers"),
		"TakenJob": object(obj{
			"id":       strS(""),
			"input":    anyS(""),
			"webhook":  obj{"type": "string", "nullable": true},
			"s3Config": obj{"type": "object"},
			"policy":   obj{"type": "object"},
		}, "id", "input"),
		"JobResult": obj{"type": "object", "description": "What the SDK posts: {\"output\": …}, {\"error\": …}, {\"status\": \"IN_PROGRESS\", \"output\": …} (a progress update), optionally \"stopPod\": true.",
			"properties": obj{"output": anyS(""), "error": anyS("A string, or any JSON (kept as its text)."), "status": strS(""), "stopPod": boolS("")}},
		"Accepted":   object(obj{"accepted": boolS("false: the job is no longer this worker's (cancelled, timed out); nothing changed.")}, "accepted"),
		"JobsToStop": object(obj{"jobsToStop": strArr("")}, "jobsToStop"),
		"PingAck":    object(obj{"ok": boolS("")}, "ok"),
	}
}
