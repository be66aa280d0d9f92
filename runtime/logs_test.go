package runtime

import (
	"strings"
	"testing"
)

func TestParseLogLine(t *testing.T) {
	for _, tc := range []struct {
		in        string
		ok        bool
		id, level string
		msg       string
	}{
		{`{"requestId": "abc-123", "message": "Started.", "level": "INFO"}` + "\n", true, "abc-123", "INFO", "Started."},
		{`{"requestId": null, "message": "Worker is ready", "level": "DEBUG"}`, true, "", "DEBUG", "Worker is ready"},
		{`{"message": "[batchId=7] x", "level": "ERROR"}` + "\r\n", true, "", "ERROR", "[batchId=7] x"},
		{`{"requestId": 42, "message": "m", "level": "WARN"}`, true, "42", "WARN", "m"},
		{`INFO   | abc | Started.`, false, "", "", "INFO   | abc | Started."},
		{`{"msg": "other json"}`, false, "", "", `{"msg": "other json"}`},
		{`{"message": "no level"}`, false, "", "", `{"message": "no level"}`},
		{`{not json`, false, "", "", `{not json`},
		{``, false, "", "", ``},
	} {
		ll, ok := ParseLogLine([]byte(tc.in))
		if ok != tc.ok || ll.RequestID != tc.id || ll.Level != tc.level || ll.Message != tc.msg {
			t.Errorf("ParseLogLine(%q) = %+v, %v", tc.in, ll, ok)
		}
		if ll.Raw != strings.TrimRight(tc.in, "\r\n") {
			t.Errorf("raw %q", ll.Raw)
		}
	}
}
