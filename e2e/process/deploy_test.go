package process_test

import (
	"berth/internal/proctest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The systemd unit in deploy/ passes `systemd-analyze verify` with no
// warning (warnings such as an unknown Type= do not change its exit code,
// so any output fails the test), with ExecStart pointing at a real build.
func TestSystemdUnitVerifies(t *testing.T) {
	t.Parallel() // a process of its own: overlaps the other binaries' tests
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (.ci/run installs it)")
	}
	unit, err := os.ReadFile("../../deploy/berth.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nType=notify\n", "\nExecStart=/usr/local/bin/berth serve\n", "\nStateDirectory=berth\n"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q", strings.TrimSpace(want))
		}
	}
	bin := proctest.Build(t, "berth", false)
	path := filepath.Join(t.TempDir(), "berth.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/berth", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
