package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Client calls Berth's HTTP API with the operator's key.
type Client struct {
	Base string // http://host:port, no trailing slash
	Key  string
	HTTP *http.Client // default http.DefaultClient
}

// APIError is a non-2xx answer, with the server's message.
type APIError struct {
	Method, Path string
	Status       int
	Message      string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), e.Message)
}

// unreachableError: the request got no HTTP answer at all.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string {
	return fmt.Sprintf("%v (is Berth running there? set --url or BERTH_URL)", e.err)
}
func (e *unreachableError) Unwrap() error { return e.err }

// Send makes a request and returns the response for the caller to read
// (non-2xx answers are returned as *APIError, with the body read).
func (c *Client) Send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		if raw, ok := body.(json.RawMessage); ok {
			rd = bytes.NewReader(raw)
		} else {
			b, err := json.Marshal(body)
			if err != nil {
				return nil, err
			}
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.do(ctx, req, method, path)
}

func (c *Client) do(ctx context.Context, req *http.Request, method, path string) (*http.Response, error) {
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &unreachableError{err}
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, &APIError{Method: method, Path: path, Status: resp.StatusCode, Message: errorMessage(b)}
	}
	return resp, nil
}

// SendBody sends body (size bytes of contentType) and returns the
// response as Send does.
func (c *Client) SendBody(ctx context.Context, method, path, contentType string, body io.Reader, size int64, hdr ...http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = size
	for _, h := range hdr {
		for k, vs := range h {
			req.Header[k] = append(req.Header[k], vs...)
		}
	}
	req.Header.Set("Content-Type", contentType)
	return c.do(ctx, req, method, path)
}

// Do makes a request and decodes the JSON answer into out (nil: discard).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.Send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if err := dec.Decode(out); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// errorMessage extracts {"message"} (/v1) or {"error"} (job API).
func errorMessage(b []byte) string {
	var m struct {
		Message string `json:"message"`
		Error   string `json:"error"`
		Detail  string `json:"detail"` // REST v2's problem
	}
	if json.Unmarshal(b, &m) == nil {
		if m.Message != "" {
			return m.Message
		}
		if m.Detail != "" {
			return m.Detail
		}
		if m.Error != "" {
			return m.Error
		}
	}
	return strings.TrimSpace(string(b))
}
