package mgmt_test

import (
	"math"
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
