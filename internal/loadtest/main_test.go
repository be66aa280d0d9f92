package loadtest

import (
	"os"
	"testing"

	"berth/internal/proctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	proctest.RemoveBuilds()
	os.Exit(code)
}
