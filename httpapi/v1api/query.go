package v1api

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Query parameters of the v1 routes.

// queryBool reads an optional boolean query parameter.
func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, bad("%s must be true or false, got %q", name, v)
	}
	return b, nil
}

// queryBools reads several boolean query parameters.
func queryBools(r *http.Request, names ...string) (map[string]bool, error) {
	out := make(map[string]bool, len(names))
	for _, n := range names {
		b, err := queryBool(r, n)
		if err != nil {
			return nil, err
		}
		out[n] = b
	}
	return out, nil
}

// queryList reads a repeatable query parameter; each value may also be a
// comma-joined list ("a,b").
func queryList(r *http.Request, name string) []string {
	var out []string
	for _, v := range r.URL.Query()[name] {
		for part := range strings.SplitSeq(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// queryEnum reads an optional query parameter restricted to values.
func queryEnum(r *http.Request, name, def string, values ...string) (string, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	if !slices.Contains(values, v) {
		return "", bad("%s must be one of %s, got %q", name, strings.Join(values, ", "), v)
	}
	return v, nil
}
