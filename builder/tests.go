package builder

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"berth/mgmt"
	"berth/store"
)

// hubFiles reads the Hub files (.runpod/tests.json, .runpod/hub.json) of
// the context tar file, nil when absent; each is bounded by
// mgmt.MaxHubFileBytes.
func hubFiles(file string) (map[string][]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("read the build context: %w", err)
	}
	defer f.Close()
	out := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the build context: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if name != mgmt.TestsFile && name != mgmt.HubFile {
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%s: not a regular file", name)
		}
		b, err := io.ReadAll(io.LimitReader(tr, mgmt.MaxHubFileBytes+1))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if len(b) > mgmt.MaxHubFileBytes {
			return nil, fmt.Errorf("%s: over %d KiB", name, mgmt.MaxHubFileBytes>>10)
		}
		out[name] = b
	}
}

// readHubFiles finds and parses the context's Hub files: hub.json's
// config is recorded on the build (CompleteBuild applies it); the tests
// of tests.json are returned (nil without one). A message (the build
// fails with it) when one is malformed or this Berth cannot run tests.
func (s *Service) readHubFiles(r *run, buildID, file string) (*mgmt.BuildTests, string) {
	files, err := hubFiles(file)
	if err != nil {
		return nil, err.Error()
	}
	if raw, ok := files[mgmt.HubFile]; ok {
		h, err := mgmt.ParseHub(raw)
		if err != nil {
			return nil, err.Error()
		}
		if _, err := s.cfg.Records.HubBuild(buildID, h); err != nil {
			return nil, "record " + mgmt.HubFile + ": " + err.Error()
		}
		r.log.line("berth: " + mgmt.HubFile + ": its config gives the defaults of an endpoint deploy made, at its first release")
	}
	raw, ok := files[mgmt.TestsFile]
	if !ok {
		return nil, ""
	}
	bt, err := mgmt.ParseTests(raw)
	if err != nil {
		return nil, err.Error()
	}
	if s.cfg.Tester == nil {
		why := s.cfg.NoTester
		if why == nil {
			why = errors.New("no worker runtime")
		}
		return nil, fmt.Sprintf("%s: this Berth cannot run test workers: %v", mgmt.TestsFile, why)
	}
	r.log.line(fmt.Sprintf("berth: %s: %d tests run before the release", mgmt.TestsFile, len(bt.Tests)))
	return &bt, ""
}

// runTests runs b's tests on a test worker (TESTING), each as a job, in
// order, stopping at the first that does not complete. All of them,
// the worker's start included, are bounded by StepTimeout (within the
// build's total). It returns the status and error to end the build with
// ("" when every test passed). The test worker is always removed.
func (s *Service) runTests(ctx context.Context, r *run, b store.Build, bt mgmt.BuildTests) (string, string) {
	if _, err := s.cfg.Records.TestingBuild(b.ID); err != nil {
		return store.BuildFailed, "record the tests: " + err.Error()
	}
	tctx, cancel := context.WithTimeoutCause(ctx, s.cfg.StepTimeout,
		fmt.Errorf("the tests exceeded their time limit of %s (the build step's)", s.cfg.StepTimeout))
	defer cancel()
	r.log.line(fmt.Sprintf("berth: testing %s: starting a test worker", b.RunImage()))
	tr, err := s.cfg.Tester.StartTests(tctx, b, bt.Config)
	if err != nil {
		return store.BuildFailed, fmt.Sprintf("start the test worker: %v", err)
	}
	defer func() {
		tr.Close()
		r.log.line("berth: the test worker is removed")
	}()
	for _, t := range bt.Tests {
		r.log.line(fmt.Sprintf("berth: test %q: running (timeout %s)", t.Name, t.Timeout))
		start := time.Now()
		status, errMsg, err := tr.Run(tctx, t)
		if err != nil {
			cause := context.Cause(tctx)
			switch {
			case errors.Is(cause, errCancelled):
				return store.BuildCancelled, fmt.Sprintf("cancelled during test %q", t.Name)
			case errors.Is(cause, errStopping):
				return store.BuildFailed, cause.Error()
			case cause != nil:
				return store.BuildTestFailed, fmt.Sprintf("test %q did not finish: %v", t.Name, cause)
			}
			return store.BuildTestFailed, fmt.Sprintf("test %q could not run: %v", t.Name, err)
		}
		if status != string(store.Completed) {
			msg := mgmt.TestFailure(t.Name, status, errMsg, t.Timeout)
			r.log.line("berth: " + msg)
			return store.BuildTestFailed, msg
		}
		r.log.line(fmt.Sprintf("berth: test %q passed (%s)", t.Name, time.Since(start).Round(time.Millisecond)))
	}
	r.log.line(fmt.Sprintf("berth: all %d tests passed", len(bt.Tests)))
	return "", ""
}
