package worker

import "strconv"

// EnvAPIKey is the variable holding the worker's API key.
const EnvAPIKey = "RUNPOD_AI_API_KEY"

// PlatformEnv is the environment a platform gives one worker: the URL
// templates exactly as runpod-python substitutes them ($ID is the job id;
// each template already holds a '?', since the SDK appends '&…'), the
// worker's own id and key, and the heartbeat period. Berth's worker-env
// route and its worker containers both use it; Start reads it.
func PlatformEnv(base, endpointID, workerID, key string, pingMs int64) map[string]string {
	ep := base + "/v2/" + endpointID
	return map[string]string{
		"RUNPOD_WEBHOOK_GET_JOB":         ep + "/job-take/" + workerID + "?gpu=",
		"RUNPOD_WEBHOOK_POST_OUTPUT":     ep + "/job-done/" + workerID + "/$ID?gpu=",
		"RUNPOD_WEBHOOK_POST_STREAM":     ep + "/job-stream/" + workerID + "/$ID?gpu=",
		"RUNPOD_WEBHOOK_PING":            ep + "/ping/" + workerID,
		EnvAPIKey:                        key,
		"RUNPOD_POD_ID":                  workerID,
		"RUNPOD_ENDPOINT_ID":             endpointID,
		"RUNPOD_PING_INTERVAL":           strconv.FormatInt(pingMs, 10),
		"RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
	}
}
