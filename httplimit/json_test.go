package httplimit_test

import (
	"strings"
	"testing"

	"berth/httplimit"
)

func TestJSONValues(t *testing.T) {
	for doc, want := range map[string]int{
		`1`:                           1,
		`[]`:                          2,
		`[1,2,3]`:                     4,
		`{"a":{"b":[1,2]}}`:           5,
		`{"a":"x,y[{","b":"\"],{"}`:   3,
		`{"a":"\\","b":1}`:            3,
		`{"env":{"A":"1","B":"2"}}`:   4,
		strings.Repeat("[", 100):      101,
		`"` + strings.Repeat(",", 50): 1, // an unterminated string counts nothing inside
	} {
		if got := httplimit.JSONValues([]byte(doc)); got != want {
			t.Errorf("JSONValues(%q) = %d, want %d", doc, got, want)
		}
	}
	big := "[" + strings.Repeat("1,", httplimit.MaxJSONValues) + "1]"
	if err := httplimit.CheckJSONValues([]byte(big)); err == nil || !strings.Contains(err.Error(), "JSON values") {
		t.Errorf("%d values: %v", httplimit.MaxJSONValues+2, err)
	}
	if err := httplimit.CheckJSONValues([]byte(`{"name":"t","env":{"A":"1"}}`)); err != nil {
		t.Error(err)
	}
}
