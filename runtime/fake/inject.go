package fake

import (
	"context"

	"berth/runtime"
)

// Idle is a Program that runs until it is stopped: an image whose only
// behaviour a test needs is to be up (a pod seen through the API).
func Idle(ctx context.Context, _ Process) int {
	<-ctx.Done()
	return 0
}

// Op names a Backend call FailNext can make fail.
type Op string

// The calls FailNext can make fail.
const (
	OpCreate Op = "create"
	OpStart  Op = "start"
	OpStop   Op = "stop"
	OpRemove Op = "remove"
	OpLogs   Op = "logs"
)

// FailNext makes the next call of op answer err before it changes
// anything, as a daemon that went away or a full disk would: a test sees
// how Berth surfaces a runtime's failure.
func (b *Backend) FailNext(op Op, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failNext == nil {
		b.failNext = map[Op]error{}
	}
	b.failNext[op] = err
}

// failLocked is the error FailNext left for op, once.
func (b *Backend) failLocked(op Op) error {
	err := b.failNext[op]
	delete(b.failNext, op)
	return err
}

// Pod is the instance of Berth's pod id (runtime.LabelPod), if one exists.
func (b *Backend) Pod(id string) (runtime.Instance, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, in := range b.byID {
		if in.spec.Labels[runtime.LabelPod] == id {
			return in.view(), true
		}
	}
	return runtime.Instance{}, false
}

// Readers is how many followed logs of instance id are still being read:
// a test sees that Berth stopped reading a log once its client went away.
func (b *Backend) Readers(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if in := b.byID[id]; in != nil {
		return in.readers
	}
	return 0
}
