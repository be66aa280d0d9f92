package mgmt

import "errors"

// Errors a container log source (the runtime, as the composition wires it)
// wraps when there is no such container; every surface answers them 404.
var (
	ErrNoSuchWorker = errors.New("no container for this worker")
	ErrNoSuchPod    = errors.New("no container for this pod")
)
