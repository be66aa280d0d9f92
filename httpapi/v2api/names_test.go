package v2api

import (
	"testing"

	"berth/mgmt"
)

func TestV2Names(t *testing.T) {
	for _, tc := range []struct {
		field, msg         string
		wantField, wantMsg string
	}{
		{"workersMin", "workersMin (3) must not exceed workersMax (1)", "workers.min", "workers.min (3) must not exceed workers.max (1)"},
		{"dataCenterId", `dataCenterId "eu ro 1" is not a data-centre id`, "dataCenter", `dataCenter "eu ro 1" is not a data-centre id`},
		{"networkVolumeIds", "networkVolumeIds: x does not exist", "networkVolumes", "networkVolumes: x does not exist"},
		{"dataCenterIds", "dataCenterIds: bad", "dataCenterIds", "dataCenterIds: bad"}, // v2's name too: untouched
		{"", "imageName is required (or a templateId whose image to run)", "", "image is required (or a templateId whose image to run)"},
	} {
		got := v2Names(&mgmt.Error{Kind: mgmt.Invalid, Field: tc.field, Msg: tc.msg}, v2Fields)
		if got.Field != tc.wantField || got.Msg != tc.wantMsg {
			t.Errorf("%q %q → %q %q, want %q %q", tc.field, tc.msg, got.Field, got.Msg, tc.wantField, tc.wantMsg)
		}
	}
}
