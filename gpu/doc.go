// Package gpu finds the machine's NVIDIA GPUs and hands them out exclusively
// to workers.
//
// Discovery goes through NVML, which needs a cgo build on Linux and the
// NVIDIA driver's libnvidia-ml.so.1 at run time. Without either, discovery
// reports [ErrUnavailable] and Berth runs CPU work only. The [Allocator] is
// pure Go so it builds and tests everywhere.
package gpu
