package httpapi

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"berth/store"
)

// Helpers shared by the management handlers.

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

// all decodes every record of bucket.
func all[T any](tx *store.Tx, bucket string) ([]T, error) {
	var out []T
	err := tx.ForEach(bucket, func(key string, raw []byte) error {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("decode %s %q: %w", bucket, key, err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// byCreated sorts records oldest first, ties by id, so lists are stable.
func byCreated[T any](list []T, created func(T) time.Time, id func(T) string) {
	slices.SortFunc(list, func(a, b T) int {
		if c := created(a).Compare(created(b)); c != 0 {
			return c
		}
		return cmp.Compare(id(a), id(b))
	})
}

func noContent(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }

// decodeBody reads and strictly decodes a management request body.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, ok := readBody(w, r, maxMgmtBody)
	if !ok {
		return false
	}
	if err := decodeStrict(body, v); err != nil {
		writeErr(w, r, http.StatusBadRequest, err.Error())
		return false
	}
	return true
}
