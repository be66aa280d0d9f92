package store

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// MarshalJSON encodes a job record with the field names and omissions its
// struct tags give, without reflection: the record is written three times
// per job (submitted, taken, finished). Its raw fields (input, output,
// policy, s3Config) always hold JSON that was decoded before, so they are
// copied as they are.
func (j Job) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 256+len(j.Input)+len(j.Output)+len(j.Policy)+len(j.S3Config))
	b = append(b, `{"id":`...)
	b = appendString(b, j.ID)
	b = append(b, `,"endpointId":`...)
	b = appendString(b, j.EndpointID)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, j.Seq, 10)
	b = append(b, `,"status":`...)
	b = appendString(b, string(j.Status))
	if j.Sync {
		b = append(b, `,"sync":true`...)
	}
	if j.Webhook != "" {
		b = append(b, `,"webhook":`...)
		b = appendString(b, j.Webhook)
	}
	b = appendRaw(b, `,"s3Config":`, j.S3Config)
	b = appendRaw(b, `,"policy":`, j.Policy)
	b = append(b, `,"executionTimeoutMs":`...)
	b = strconv.AppendInt(b, j.ExecutionTimeoutMs, 10)
	if j.LowPriority {
		b = append(b, `,"lowPriority":true`...)
	}
	b = appendTime(b, `,"createdAt":`, j.CreatedAt, false)
	b = appendTime(b, `,"expiresAt":`, j.ExpiresAt, false)
	b = appendTime(b, `,"queuedAt":`, j.QueuedAt, false)
	b = appendTime(b, `,"startedAt":`, j.StartedAt, true)
	b = appendTime(b, `,"completedAt":`, j.CompletedAt, true)
	b = appendTime(b, `,"retainUntil":`, j.RetainUntil, true)
	if j.WorkerID != "" {
		b = append(b, `,"workerId":`...)
		b = appendString(b, j.WorkerID)
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(j.Attempts), 10)
	b = append(b, `,"retries":`...)
	b = strconv.AppendInt(b, int64(j.Retries), 10)
	b = appendRaw(b, `,"output":`, j.Output)
	if j.Error != "" {
		b = append(b, `,"error":`...)
		b = appendString(b, j.Error)
	}
	b = appendRaw(b, `,"input":`, j.Input)
	return append(b, '}'), nil
}

func appendRaw(b []byte, key string, raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return b
	}
	return append(append(b, key...), raw...)
}

func appendTime(b []byte, key string, t time.Time, omitZero bool) []byte {
	if omitZero && t.IsZero() {
		return b
	}
	b = append(append(b, key...), '"')
	return append(t.AppendFormat(b, time.RFC3339Nano), '"')
}

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json does.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
