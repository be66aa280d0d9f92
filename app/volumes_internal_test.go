package app

import (
	"context"
	"errors"
	"strings"
	"testing"

	"berth/mgmt"
	"berth/runtime/fake"
)

// The runtime's refusal to grow a volume is the request's (a 400 on size
// with the runtime's words); a growth it accepts is no error.
func TestVolumeGrowthRefusalIsTheRequests(t *testing.T) {
	ctx := context.Background()
	v := mgmtVolumes{fake.New(fake.Config{})}
	if _, err := v.Create(ctx, "v1", 20); err != nil {
		t.Fatal(err)
	}
	if err := v.Grow(ctx, "v1", 30); err != nil {
		t.Errorf("growing to 30 GB: %v", err)
	}
	err := v.Grow(ctx, "v1", 10) // the fake refuses to shrink, as a cluster does
	var me *mgmt.Error
	if !errors.As(err, &me) || me.Kind != mgmt.Invalid || me.Field != "size" || !strings.Contains(me.Msg, "cannot shrink") {
		t.Errorf("a refused size: %v (%T), want Invalid on size with the runtime's words", err, err)
	}
}
