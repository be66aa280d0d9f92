//go:build !(cgo && linux)

package gpu

import (
	"errors"
	"testing"
)

func TestStubUnavailable(t *testing.T) {
	if _, err := DiscoverSystem(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("DiscoverSystem: err = %v, want ErrUnavailable", err)
	}
	if _, err := SystemDriverVersion(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("SystemDriverVersion: err = %v, want ErrUnavailable", err)
	}
}
