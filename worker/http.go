package worker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Progress sends a progress update for a running job: it POSTs
// {"status": "IN_PROGRESS", "output": v} to the job-done URL with
// isStream=false, like runpod.serverless.progress_update. Unlike the SDK
// (which fires and forgets from a thread) it waits for the reply and returns
// the error, if any. Like the SDK it uses its own header set, so it does not
// change the X-Request-ID later job-takes carry.
func Progress(ctx context.Context, job *Job, v any) error {
	if job == nil || job.r == nil {
		return ErrNotStarted
	}
	r := job.r
	body, err := pyObject(false, kv{"status", "IN_PROGRESS"}, kv{"output", v})
	if err != nil {
		return fmt.Errorf("worker: progress: %w", err)
	}
	if err := r.post(ctx, r.jobURL(r.doneURL, job.ID, false), body, job.ID); err != nil {
		r.log.Error("Failed to send progress update. | "+err.Error(), JobIDKey, job.ID)
		return fmt.Errorf("worker: progress: %w", err)
	}
	r.log.Debug("Progress Update Sent", JobIDKey, job.ID)
	return nil
}

// StatusError is a non-2xx reply from the platform.
type StatusError struct {
	Code int
	URL  string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%d %s for %s", e.Code, http.StatusText(e.Code), e.URL)
}

func (r *runner) jobURL(tmpl, jobID string, isStream bool) string {
	return strings.ReplaceAll(tmpl, "$ID", jobID) + fmt.Sprintf("&isStream=%t", isStream)
}

func (r *runner) setLastRequestID(id string) {
	r.mu.Lock()
	r.lastReqID = id
	r.mu.Unlock()
}

// get sends a GET with the shared session's headers (job-take, job-stop).
func (r *runner) get(ctx context.Context, u string) (status int, ctype string, body []byte, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Authorization", r.apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", r.ua)
	r.mu.Lock()
	if r.lastReqID != "" {
		req.Header.Set("X-Request-ID", r.lastReqID)
	}
	r.mu.Unlock()
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", nil, err
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body, nil
}

// post sends a job-done / job-stream body with the SDK's headers, retrying
// 5xx replies and transport errors with Fibonacci back-off (3 attempts). A
// 4xx is returned at once.
func (r *runner) post(ctx context.Context, u string, body []byte, jobID string) error {
	ctx, cancel := context.WithTimeout(ctx, postTimeout)
	defer cancel()
	return r.postRetrying(ctx, u, body, jobID, maxPostAttempts, nil)
}

// postResult sends a finished job's result. Unlike the SDK, which gives up
// after 3 attempts (about 4 s), it keeps retrying transport errors, 429 and
// 5xx until the platform answers, for at most the result window: a result
// finished while Berth restarts is reported once Berth is back, and the job,
// still listed by the worker's pings meanwhile, is not run again.
func (r *runner) postResult(ctx context.Context, u string, body []byte, jobID string) error {
	ctx, cancel := context.WithTimeout(ctx, r.resultWindow)
	defer cancel()
	return r.postRetrying(ctx, u, body, jobID, 0, func(attempt int, err error) {
		r.log.Warn(fmt.Sprintf("Failed to return job results (attempt %d), retrying | %v", attempt, err), JobIDKey, jobID)
	})
}

// postRetrying POSTs body until a reply below 500 other than 429, for at
// most attempts tries (0: until ctx ends). failed is told of each failed try
// that will be retried.
func (r *runner) postRetrying(ctx context.Context, u string, body []byte, jobID string, attempts int, failed func(int, error)) error {
	var last error
	prev, cur := time.Duration(0), r.retryBase // Fibonacci: 1, 1, 2, 3 ... units
	for attempt := 1; attempts == 0 || attempt <= attempts; attempt++ {
		if attempt > 1 {
			if failed != nil {
				failed(attempt-1, last)
			}
			if !sleepCtx(ctx, min(cur, 3*r.retryBase)) {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			prev, cur = cur, prev+cur
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", r.apiKey)
		req.Header.Set("User-Agent", r.ua)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("charset", "utf-8")
		req.Header.Set("X-Request-ID", jobID)
		resp, err := r.client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			last = err
			continue
		}
		drain(resp)
		switch {
		case resp.StatusCode < 400:
			return nil
		case resp.StatusCode == http.StatusTooManyRequests && attempts == 0:
		case resp.StatusCode < 500:
			return &StatusError{Code: resp.StatusCode, URL: u}
		}
		last = &StatusError{Code: resp.StatusCode, URL: u}
	}
	return last
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
}

// sleepCtx sleeps for d or until ctx is done; it reports whether the full
// duration elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func queryEscape(s string) string { return url.QueryEscape(s) }
