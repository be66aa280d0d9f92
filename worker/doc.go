// Package worker is a small Go SDK for writing RunPod serverless workers.
//
// It speaks the worker protocol exactly as runpod-python's
// runpod.serverless.start does in platform mode (see
// /work/shared/spec/runpod-wire.md §1), including the SDK's quirks, so that
// Berth's server can be tested against realistic worker traffic:
//
//   - the Authorization header carries the bare API key (no "Bearer");
//   - job-done and job-stream bodies are raw JSON text sent with
//     Content-Type application/x-www-form-urlencoded and a "charset: utf-8"
//     header;
//   - X-Request-ID is written onto a shared header set, so every job-take and
//     job-stop after the first result carries the previous job's id;
//   - bodies are encoded like Python's json.dumps (", " and ": " separators);
//   - query parameters are appended to the URL templates with a bare "&".
//
// # Handlers
//
// A [Handler] returns a value (sent as {"output": v}) or an error. A returned
// map is treated like a Python dict: an "error" key is popped and sent next to
// the output, a truthy "refresh_worker" key is popped and turns into
// "stopPod": true, and an empty map is sent as {}.
//
// Streaming (the SDK's generator handlers) is available in two ways:
//
//   - [Config.StreamHandler]: every job is a streaming job, like a Python
//     worker whose handler is a generator function;
//   - a [Handler] may return a [Stream] value for an individual job. The
//     worker then runs that job exactly like a generator job (chunks on
//     job-stream, final job-done with isStream=true). This lets one worker
//     serve both kinds of jobs, which the Python SDK cannot do, but each job's
//     traffic is identical to what the SDK sends for that kind of handler.
//
// Handlers may send progress updates with [Progress].
//
// # Cancellation
//
// The context passed to a handler is cancelled when the platform lists the
// job on the job-stop channel (runpod-python v1.10+). A handler that then
// returns an error wrapping context.Canceled gets no job-done at all; a handler
// that swallows the cancellation and returns normally gets its result
// reported, as with the Python SDK. Cancelling the context given to [Start]
// does NOT cancel running jobs: it stops fetching, lets running jobs finish and
// report, and then Start returns nil.
//
// # Deviations from runpod-python
//
//   - Local test mode (RUNPOD_WEBHOOK_GET_JOB unset) is not supported; Start
//     returns [ErrLocalMode].
//   - The heartbeat interval is RUNPOD_PING_INTERVAL/1000 whole seconds like
//     the SDK, but an interval of 0 s (values below 1000) becomes 100 ms
//     instead of a busy loop.
//   - When no job slot is free the SDK sleeps 1 s and re-checks; this package
//     waits until a running job completes instead (never busy-loops).
//   - Transport errors on job-take are followed by a 100 ms pause (the SDK
//     loops at once); HTTP error statuses still loop at once like the SDK.
//   - Handler panics are recovered and reported like a Python exception with
//     error_type "<class 'GoPanic'>".
//   - A finished job's result (job-done) is retried on transport errors, 429
//     and 5xx until the platform answers, for up to
//     [Config.ResultRetryWindow] (10 minutes), where the SDK gives up after 3
//     attempts: a result finished while Berth restarts is reported when it is
//     back and the job is not run again. Progress updates and stream chunks
//     keep the SDK's 3 attempts.
//   - The ping (heartbeat) uses the User-Agent "python-requests/berth-go",
//     mirroring the SDK's separate requests session.
package worker
