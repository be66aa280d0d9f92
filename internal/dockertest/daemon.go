package dockertest

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

// daemon is a helper process a test starts (registry, buildkitd): its
// output goes to logPath, and the wait for it to answer ends early when
// it exits.
type daemon struct {
	cmd     *exec.Cmd
	name    string
	logPath string
	exited  chan struct{}
	err     error // cmd.Wait's, once exited is closed
}

// startDaemon starts cmd with its output in logPath.
func startDaemon(cmd *exec.Cmd, name, logPath string) (*daemon, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child keeps its own descriptor
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	d := &daemon{cmd: cmd, name: name, logPath: logPath, exited: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.exited) }()
	return d, nil
}

// stop interrupts the process, killing it if it is not gone within grace.
func (d *daemon) stop(grace time.Duration) {
	_ = d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.exited:
	case <-time.After(grace):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// logTail is the end of the process's output.
func (d *daemon) logTail() string {
	b, _ := os.ReadFile(d.logPath)
	return lastBytes(b, 4000)
}

// waitReady asks ready every interval until it says so, it fails, the
// process exits or within has passed. ready's error ends the wait; a
// wait that is not ready yet reports what kept it (notYet) at the end.
func (d *daemon) waitReady(within, interval time.Duration, ready func() (ok bool, notYet, err error)) error {
	deadline := time.After(within)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, notYet, err := ready()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("%s exited before answering: %v\n%s", d.name, d.err, d.logTail())
		case <-deadline:
			return fmt.Errorf("%s did not answer within %s: %v\n%s", d.name, within, notYet, d.logTail())
		case <-tick.C:
		}
	}
}
