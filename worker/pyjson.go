package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"unicode/utf8"
)

// kv is one key of a JSON object whose key order matters (Python dicts keep
// insertion order; Go maps do not).
type kv struct {
	k string
	v any
}

// compactJSON marshals v without HTML escaping and without a trailing newline.
func compactJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// pyDumps encodes v like Python's json.dumps: ", " between items and ": "
// after keys. With ensureASCII every non-ASCII character inside strings is
// written as a \uXXXX escape (json.dumps' default); without it UTF-8 is kept
// (ensure_ascii=False, as used for job-done bodies).
func pyDumps(v any, ensureASCII bool) ([]byte, error) {
	b, err := compactJSON(v)
	if err != nil {
		return nil, err
	}
	return pySpace(b, ensureASCII), nil
}

// pyObject encodes an ordered object like pyDumps.
func pyObject(ensureASCII bool, pairs ...kv) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, p := range pairs {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := compactJSON(p.k)
		buf.Write(k)
		buf.WriteByte(':')
		v, err := compactJSON(p.v)
		if err != nil {
			return nil, fmt.Errorf("encoding %q: %w", p.k, err)
		}
		buf.Write(v)
	}
	buf.WriteByte('}')
	return pySpace(buf.Bytes(), ensureASCII), nil
}

// pySpace rewrites compact JSON with Python's default separators.
func pySpace(b []byte, ensureASCII bool) []byte {
	out := make([]byte, 0, len(b)+len(b)/8)
	inStr, esc := false, false
	for i := 0; i < len(b); {
		c := b[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			case c >= utf8.RuneSelf && ensureASCII:
				r, n := utf8.DecodeRune(b[i:])
				if r >= 0x10000 {
					r -= 0x10000
					out = fmt.Appendf(out, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
				} else {
					out = fmt.Appendf(out, `\u%04x`, r)
				}
				i += n
				continue
			}
			out = append(out, c)
			i++
			continue
		}
		out = append(out, c)
		switch c {
		case '"':
			inStr = true
		case ',', ':':
			out = append(out, ' ')
		}
		i++
	}
	return out
}

// asDict reports whether v is a map with string keys (a Python dict) and
// returns a shallow copy of it.
func asDict(v any) (map[string]any, bool) {
	if m, ok := v.(map[string]any); ok {
		cp := make(map[string]any, len(m))
		for k, x := range m {
			cp[k] = x
		}
		return cp, true
	}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() != reflect.Map || rv.Type().Key().Kind() != reflect.String {
		return nil, false
	}
	cp := make(map[string]any, rv.Len())
	it := rv.MapRange()
	for it.Next() {
		cp[it.Key().String()] = it.Value().Interface()
	}
	return cp, true
}

// truthy mirrors Python truthiness for decoded JSON-ish values.
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != ""
	case json.Number:
		f, err := x.Float64()
		return err != nil || f != 0
	case json.RawMessage:
		var d any
		if json.Unmarshal(x, &d) != nil {
			return len(x) > 0
		}
		return truthy(d)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int() != 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return rv.Uint() != 0
	case reflect.Float32, reflect.Float64:
		return rv.Float() != 0
	case reflect.Slice, reflect.Map, reflect.Array, reflect.String:
		return rv.Len() != 0
	case reflect.Pointer, reflect.Interface:
		return !rv.IsNil()
	}
	return true
}

// pyStr approximates Python's str(x): strings as-is, None/True/False, and
// anything else as JSON.
func pyStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	}
	b, err := pyDumps(v, false)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
