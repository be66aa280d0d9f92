// Command echoworker is the test worker used by Berth's end-to-end tests. It
// speaks RunPod's worker protocol through package berth/worker, exactly like a
// runpod-python worker, and its behaviour is chosen per job by the job input
// (a JSON object; every key is optional):
//
//	{"exit": N}                 os.Exit(N) at once (a crash mid-job)
//	{"progress": [p1, p2]}      send each value as a progress update first
//	{"sleep_ms": N}             sleep N ms; returns the context error if the
//	                            job is stopped, unless "ignore_stop" is true
//	{"ignore_stop": true}       keep sleeping through a stop and report normally
//	{"fail": "msg"}             return an error (reported like a Python exception);
//	                            with "stream", the stream fails after its chunks
//	{"error_key": "msg"}        return {"error": msg, "detail": 1} (the SDK's
//	                            error-key path); with "stream", yield
//	                            {"error": msg} after the chunks
//	{"stream": [c1, c2, ...]}   make the job a streaming job yielding each element
//	{"stream_delay_ms": N}      pause N ms before each chunk (stop-aware)
//	{"echo": X}                 output X (default: the whole input)
//	{"big_output_bytes": N}     output a string of N bytes ("xxx...")
//	{"env": "NAME"}             output the value of env var NAME (null if unset)
//	{"read_file": "/path"}      output the file's contents as a string
//	{"write_file": "/path"}     write "x" to the file (creating it) and output "written"
//	{"shm_write_bytes": N}      output {"shmBytes": size of /dev/shm,
//	                            "wroteBytes": N} after writing N bytes to a
//	                            file mapped from /dev/shm as PyTorch's shared
//	                            tensors are (a too small /dev/shm is a SIGBUS:
//	                            the worker dies, as PyTorch's DataLoader does)
//	{"stop_pod": true}          add "refresh_worker": true to the returned map so
//	                            the result carries "stopPod": true; a non-object
//	                            output X is wrapped as {"value": X}
//
// Keys are applied in the order listed. A non-object input is echoed back.
//
// Environment: ECHOWORKER_CONCURRENCY (default 1), ECHOWORKER_NO_STOP_CHANNEL=1
// (emulate runpod-python before 1.10: never poll job-stop),
// ECHOWORKER_AGGREGATE_STREAM=0 (final stream result {"output": []} instead of
// all chunks), ECHOWORKER_RETRY_BASE (a duration: package worker's
// RetryBaseDelay, the unit of its job-done back-off; default 1s), plus the
// RUNPOD_* variables read by package worker. With
// RUNPOD_ENDPOINT_ID set, logs are JSON lines on stdout like runpod-python's.
//
// SIGTERM or SIGINT stops fetching, lets running jobs finish and report, and
// exits 0.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"berth/worker"

	"berth/internal/shm"
)

type input struct {
	Exit           *int              `json:"exit"`
	Progress       []json.RawMessage `json:"progress"`
	SleepMS        int64             `json:"sleep_ms"`
	IgnoreStop     bool              `json:"ignore_stop"`
	Fail           *string           `json:"fail"`
	ErrorKey       *string           `json:"error_key"`
	Stream         []json.RawMessage `json:"stream"`
	StreamDelayMS  int64             `json:"stream_delay_ms"`
	Echo           json.RawMessage   `json:"echo"`
	BigOutputBytes *int              `json:"big_output_bytes"`
	Env            *string           `json:"env"`
	ReadFile       *string           `json:"read_file"`
	WriteFile      *string           `json:"write_file"`
	ShmWriteBytes  *int64            `json:"shm_write_bytes"`
	StopPod        bool              `json:"stop_pod"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	conc, _ := strconv.Atoi(os.Getenv("ECHOWORKER_CONCURRENCY"))
	retry, _ := time.ParseDuration(os.Getenv("ECHOWORKER_RETRY_BASE"))
	cfg := worker.Config{
		RetryBaseDelay:        retry,
		Handler:               handle,
		Concurrency:           max(conc, 1),
		DisableStopChannel:    os.Getenv("ECHOWORKER_NO_STOP_CHANNEL") == "1",
		ReturnAggregateStream: os.Getenv("ECHOWORKER_AGGREGATE_STREAM") != "0",
	}
	if err := worker.Start(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "echoworker:", err)
		os.Exit(1)
	}
}

// decode parses JSON keeping numbers exact, so echoed values round-trip.
func decode(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// sleep waits d; it returns ctx's error when the job is stopped, unless
// ignore is set.
func sleep(ctx context.Context, d time.Duration, ignore bool) error {
	if d <= 0 {
		return nil
	}
	if ignore {
		time.Sleep(d)
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func handle(ctx context.Context, job *worker.Job) (any, error) {
	whole, err := decode(job.Input)
	if err != nil {
		return nil, fmt.Errorf("bad input: %w", err)
	}
	trimmed := bytes.TrimSpace(job.Input)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return whole, nil
	}
	var in input
	if err := json.Unmarshal(job.Input, &in); err != nil {
		return nil, fmt.Errorf("bad input: %w", err)
	}

	if in.Exit != nil {
		os.Exit(*in.Exit)
	}
	for _, p := range in.Progress {
		v, err := decode(p)
		if err != nil {
			return nil, err
		}
		if err := worker.Progress(ctx, job, v); err != nil {
			return nil, err
		}
	}
	if err := sleep(ctx, time.Duration(in.SleepMS)*time.Millisecond, in.IgnoreStop); err != nil {
		return nil, err
	}
	if in.Stream != nil {
		return streamJob(ctx, in), nil
	}
	if in.Fail != nil {
		return nil, errors.New(*in.Fail)
	}
	if in.ErrorKey != nil {
		return map[string]any{"error": *in.ErrorKey, "detail": 1}, nil
	}

	out := whole
	switch {
	case in.Echo != nil:
		if out, err = decode(in.Echo); err != nil {
			return nil, err
		}
	case in.BigOutputBytes != nil:
		out = strings.Repeat("x", max(*in.BigOutputBytes, 0))
	case in.Env != nil:
		if v, ok := os.LookupEnv(*in.Env); ok {
			out = v
		} else {
			out = nil
		}
	case in.ReadFile != nil:
		b, err := os.ReadFile(*in.ReadFile)
		if err != nil {
			return nil, err
		}
		out = string(b)
	case in.WriteFile != nil:
		if err := os.WriteFile(*in.WriteFile, []byte("x"), 0o644); err != nil {
			return nil, err
		}
		out = "written"
	case in.ShmWriteBytes != nil:
		size, err := shm.Write(*in.ShmWriteBytes)
		if err != nil {
			return nil, err
		}
		out = map[string]any{"shmBytes": size, "wroteBytes": *in.ShmWriteBytes}
	}
	if in.StopPod {
		m, ok := out.(map[string]any)
		if !ok {
			m = map[string]any{"value": out}
		}
		m["refresh_worker"] = true
		out = m
	}
	return out, nil
}

func streamJob(ctx context.Context, in input) worker.Stream {
	return func(yield func(any) error) error {
		for _, c := range in.Stream {
			if err := sleep(ctx, time.Duration(in.StreamDelayMS)*time.Millisecond, in.IgnoreStop); err != nil {
				return err
			}
			v, err := decode(c)
			if err != nil {
				return err
			}
			if err := yield(v); err != nil {
				return err
			}
		}
		if in.ErrorKey != nil {
			// A yielded {"error": ...} ends the stream (the SDK's path).
			_ = yield(map[string]any{"error": *in.ErrorKey})
			return nil
		}
		if in.Fail != nil {
			return errors.New(*in.Fail)
		}
		return nil
	}
}
