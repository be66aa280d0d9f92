package runtime

import (
	"bytes"
	"encoding/json"
)

// LogLine is one worker log line. runpod-python with RUNPOD_ENDPOINT_ID set
// prints {"requestId": <job id|null>, "message": "...", "level": "INFO"}.
type LogLine struct {
	RequestID string // job id; "" when null or absent
	Level     string
	// Message is the JSON "message", or the whole raw line when the line
	// is not runpod JSON.
	Message string
	Raw     string // the line without its trailing newline
}

// ParseLogLine parses a runpod-python JSON log line. ok is false when the
// line is not such JSON; the returned LogLine still carries the raw text.
func ParseLogLine(line []byte) (LogLine, bool) {
	raw := string(bytes.TrimRight(line, "\r\n"))
	ll := LogLine{Raw: raw, Message: raw}
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return ll, false
	}
	var v struct {
		RequestID json.RawMessage `json:"requestId"`
		Message   *string         `json:"message"`
		Level     *string         `json:"level"`
	}
	if err := json.Unmarshal(trimmed, &v); err != nil || v.Message == nil || v.Level == nil {
		return ll, false
	}
	ll.Message = *v.Message
	ll.Level = *v.Level
	switch {
	case len(v.RequestID) == 0 || string(v.RequestID) == "null":
	case v.RequestID[0] == '"':
		_ = json.Unmarshal(v.RequestID, &ll.RequestID)
	default:
		ll.RequestID = string(v.RequestID) // a number, kept verbatim
	}
	return ll, true
}
