package fake_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"berth/runtime/backendtest"
	"berth/runtime/fake"
)

// newFake is a fake with the suite's three behaviours as Go functions.
func newFake(t *testing.T, cfg fake.Config) *fake.Backend {
	b := fake.New(cfg)
	b.Image("exit", func(_ context.Context, p fake.Process) int {
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(p.Out, "line %d\n", i)
		}
		code, _ := strconv.Atoi(p.Getenv("EXIT"))
		return code
	})
	b.Image("trap", func(ctx context.Context, p fake.Process) int {
		fmt.Fprintln(p.Out, "ready")
		<-ctx.Done()
		fmt.Fprintln(p.Out, "got SIGTERM")
		return 0
	})
	over := make(chan struct{})
	t.Cleanup(func() { close(over) })
	b.Image("ignore", func(_ context.Context, p fake.Process) int {
		fmt.Fprintln(p.Out, "ready")
		<-over // deaf to the stop: killed after the grace
		return 0
	})
	return b
}

func harness(b *fake.Backend) backendtest.Harness {
	return backendtest.Harness{Backend: b, Exit: backendtest.Program{Image: "exit"},
		Trap: backendtest.Program{Image: "trap"}, Ignore: backendtest.Program{Image: "ignore"},
		MissingImage: "no-such-image"}
}

// The fake keeps the backend contract as Docker does (pause, restart,
// Start runs at once).
func TestContract(t *testing.T) { backendtest.Run(t, harness(newFake(t, fake.Config{}))) }

// Configured as a cluster (no pause, no restart, Start only accepts), it
// keeps the contract the way Kubernetes does.
func TestContractLikeACluster(t *testing.T) {
	backendtest.Run(t, harness(newFake(t, fake.Config{NoPause: true, NoRestart: true, PendingStart: true})))
}
