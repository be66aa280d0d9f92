package gpu

// Usage is one GPU's live memory and utilisation, for /metrics.
type Usage struct {
	Index            int
	UUID, Name       string
	MemoryUsedBytes  uint64
	MemoryTotalBytes uint64
	Utilization      float64 // busy fraction of the last sample period, 0–1
}
