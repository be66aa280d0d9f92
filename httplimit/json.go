package httplimit

import "fmt"

// MaxJSONValues bounds the JSON values of a request body that is decoded
// into Go structures (management and GraphQL bodies; the job API keeps its
// input as raw JSON). A decoded value costs far more than its text: 1 MB of
// `[1,1,…]` decodes into 26 MB of []any (48 MB allocated), of `[{},{},…]`
// into 30 MB, of `{"k":"",…}` into an 8 MB map — so without a count, a few
// dozen concurrent requests under the 1 MB body caps could take gigabytes.
// 10,000 values decode into at most ≈ 1 MB; the tools' largest bodies (a
// template with its env) have a few hundred.
const MaxJSONValues = 10000

// JSONValues counts the values of the JSON text b by their separators: one
// per comma, array and object outside strings, plus one. It does not check
// that b is JSON (the decoder does), and is linear and allocation-free.
func JSONValues(b []byte) int {
	n, inStr, esc := 1, false, false
	for _, c := range b {
		switch {
		case esc:
			esc = false
		case inStr:
			switch c {
			case '\\':
				esc = true
			case '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == ',' || c == '[' || c == '{':
			n++
		}
	}
	return n
}

// CheckJSONValues refuses a body with more than MaxJSONValues values, with
// a message for the client.
func CheckJSONValues(b []byte) error {
	if n := JSONValues(b); n > MaxJSONValues {
		return fmt.Errorf("request body has %d JSON values; the limit is %d (a body is decoded into memory many times its size)", n, MaxJSONValues)
	}
	return nil
}
