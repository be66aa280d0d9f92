package mgmt_test

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"berth/mgmt"
)

// TestLimitTable: every limit accepts its bounds and refuses one past
// them with a message naming the field and the range; every range fits
// GraphQL's 32-bit Int, so no surface reads a value another stored.
func TestLimitTable(t *testing.T) {
	for _, l := range mgmt.AllLimits {
		if l.Min > l.Max || l.Max > math.MaxInt32 || l.Min < 0 {
			t.Errorf("%s: range %d-%d does not fit a 32-bit Int", l.Field, l.Min, l.Max)
		}
		for _, v := range []int64{l.Min, l.Max} {
			if err := l.Check(v); err != nil {
				t.Errorf("%s: %d refused: %v", l.Field, v, err)
			}
		}
		for _, v := range []int64{l.Min - 1, l.Max + 1, math.MaxInt64, math.MinInt64} {
			err := l.Check(v)
			if mgmt.KindOf(err) != mgmt.Invalid || !strings.Contains(err.Error(), l.Field) || !strings.Contains(err.Error(), l.Range()) {
				t.Errorf("%s: %d: %v", l.Field, v, err)
			}
		}
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e308, 0.5} {
		err := mgmt.LimitQueueDelay.CheckFloat("scaling.queueDelay", v)
		if err == nil || !strings.Contains(err.Error(), "scaling.queueDelay must be 1-3600 seconds") {
			t.Errorf("queueDelay %v: %v", v, err)
		}
	}
	if err := mgmt.OutOfRange("workersMax", "1e20"); err == nil || err.Error() != "workersMax must be 0-1000 workers, got 1e20" {
		t.Errorf("OutOfRange: %v", err)
	}
	if l, ok := mgmt.LimitOf("name"); ok {
		t.Errorf("LimitOf(name) is a length, not a number: %+v", l)
	}
}

func TestShortIDAndClip(t *testing.T) {
	if got := mgmt.ShortID("abc"); got != "abc" {
		t.Errorf("short id changed: %q", got)
	}
	long := strings.Repeat("é", 30000) // 60 KB of two-byte runes
	got := mgmt.ShortID(long)
	if len(got) > 64 || !strings.HasSuffix(got, "…(60000 bytes)") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…(60000 bytes)")) {
		t.Errorf("ShortID of 60 KB: %q", got)
	}
	msg := mgmt.ClipMessage(strings.Repeat("x", 1<<20))
	if len(msg) > 2100 || !strings.HasSuffix(msg, "bytes)") {
		t.Errorf("ClipMessage: %d bytes", len(msg))
	}
}

// TestLimitsDocumented: docs/management.md's Limits table lists every
// entry of the table with its range.
func TestLimitsDocumented(t *testing.T) {
	raw, err := os.ReadFile("../docs/management.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, "\n## Limits\n")
	if i < 0 {
		t.Fatal("docs/management.md has no Limits section")
	}
	section := doc[i:]
	section = section[:strings.Index(section[1:], "\n## ")+1]
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| ") {
			rows = append(rows, line)
		}
	}
	names := map[string]string{"name": "every name", "size": "network volume `size`", "username": "registry `username`",
		"password": "registry `password`", "keys": "SSH keys", "id": "any id"}
	for _, l := range mgmt.AllLimits {
		name, ok := names[l.Field]
		if !ok {
			name = "`" + l.Field + "`"
		}
		want := fmt.Sprintf("%d–%d", l.Min, l.Max)
		if l.Min == 0 && (l.Unit == "entries" || l.Unit == "characters" || l.Unit == "words") {
			want = fmt.Sprintf("≤ %d", l.Max)
		}
		found := false
		for _, r := range rows {
			found = found || strings.Contains(r, name) && strings.Contains(r, want)
		}
		if !found {
			t.Errorf("the Limits table has no row naming %s with %q", name, want)
		}
	}
}
