package httpx

import (
	"encoding/json"
	"math"
	"strconv"
)

// maxExact is the largest whole number a float64 holds exactly (2^53).
const maxExact = 1 << 53

// WholeNumbers rewrites each JSON number written with a fraction or an
// exponent whose value is a whole number (3.0, 3e0, 30e-1) as an integer
// (3), so it decodes into an integer field: JSON does not tell 3.0 from 3,
// and JSON Schema 2020-12 (RunPod's v2 document) counts both as integers.
// A number outside ±2^53 is left as it is (an integer field refuses it
// naming its range), and so is a body with nothing to rewrite or that is
// not JSON (its decoder reports that).
func WholeNumbers(body []byte) []byte {
	if !json.Valid(body) {
		return body
	}
	var out []byte // nil until the first rewrite
	last := 0      // body[:last] is in out
	inString, escaped := false, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
			continue
		}
		if c != '-' && (c < '0' || c > '9') {
			continue
		}
		j, plain := i, true
		for j < len(body) && isNumberByte(body[j]) {
			plain = plain && body[j] != '.' && body[j] != 'e' && body[j] != 'E'
			j++
		}
		if !plain {
			if f, err := strconv.ParseFloat(string(body[i:j]), 64); err == nil && f == math.Trunc(f) && math.Abs(f) <= maxExact {
				out = append(out, body[last:i]...)
				out = strconv.AppendInt(out, int64(f), 10)
				last = j
			}
		}
		i = j - 1
	}
	if out == nil {
		return body
	}
	return append(out, body[last:]...)
}

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}
