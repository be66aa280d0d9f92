package process_test

import (
	"os"
	"testing"

	"berth/internal/proctest"
)

// The binaries are proctest's: built once for the package's tests, and
// removed after them.
func TestMain(m *testing.M) {
	code := m.Run()
	proctest.RemoveBuilds()
	os.Exit(code)
}
