package mgmt

import "time"

// WorkerInfo is one worker container of an endpoint as the runtime reports
// it; every surface shows an endpoint's workers from these (v1
// includeWorkers, v2 …/workers, GraphQL's pods of an endpoint).
type WorkerInfo struct {
	ID            string    // worker id (its RUNPOD_POD_ID)
	State         string    // initializing, idle, running, throttled, unhealthy, frozen or exited
	ImageName     string    // image the container runs
	Version       int       // endpoint version the container runs
	GPUTypeID     string    // "" for CPU workers
	GPUCount      int       //
	GPUUUIDs      []string  // pinned devices
	VCPUCount     int       //
	LastStartedAt time.Time // container start; zero while it is created
	Message       string    // why it is initializing, throttled or unhealthy
}
