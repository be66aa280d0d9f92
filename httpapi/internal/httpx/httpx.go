// Package httpx holds what the HTTP surfaces under httpapi share below the
// router: JSON answers and request bodies read within their size and pace
// limits (the server's connection limits, package httplimit, fail a body
// that trickles with httplimit.ErrSlowBody).
package httpx

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"berth/httplimit"
	"berth/store"
)

// WriteJSON answers v as JSON with code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(b)
}

// BodyError is why a body could not be read, with the status to answer.
type BodyError struct {
	Code int
	Msg  string
}

func (e *BodyError) Error() string { return e.Msg }

// ReadBody reads at most limit bytes of r's body: past it the error's
// code is 413, a body sent too slowly 408, any other read failure 400.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *BodyError) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	switch {
	case err == nil:
		return b, nil
	case errors.As(err, &mbe):
		return nil, &BodyError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than the %d MB limit", limit>>20)}
	case errors.Is(err, httplimit.ErrSlowBody):
		return nil, &BodyError{http.StatusRequestTimeout, err.Error()}
	}
	return nil, &BodyError{http.StatusBadRequest, "read request body: " + err.Error()}
}

// FailureCode is the status for a server-side failure err: 503 when the
// database cannot be written (a full disk, too many writes waiting: with
// Retry-After set on w) or its file was found damaged, 500 otherwise.
func FailureCode(w http.ResponseWriter, err error) int {
	unavailable, retry := store.Fault(err)
	if !unavailable {
		return http.StatusInternalServerError
	}
	if retry {
		w.Header().Set("Retry-After", store.RetryAfter)
	}
	return http.StatusServiceUnavailable
}

// FailureMessage prefixes err's text for its status.
func FailureMessage(code int, err error) string {
	if code == http.StatusServiceUnavailable {
		return "service unavailable: " + err.Error()
	}
	return "internal error: " + err.Error()
}
