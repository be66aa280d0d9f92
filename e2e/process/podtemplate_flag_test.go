package process_test

import (
	"berth/internal/proctest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeRefusesABadPodTemplate: the operator's Pod template reaches
// the kubernetes runtime from --kube-pod-template and from
// BERTH_KUBE_POD_TEMPLATE; a template that sets a field Berth owns stops
// 'berth serve' (exit 1) with the file and the field named, before any
// cluster is asked (none is configured here).
func TestServeRefusesABadPodTemplate(t *testing.T) {
	tpl := filepath.Join(t.TempDir(), "pod-template.yaml")
	if err := os.WriteFile(tpl, []byte("spec:\n  nodeName: gpu-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"serve", "--runtime", "kubernetes", "--advertise-url", "http://berth.test:8080", "--addr", "127.0.0.1:0"}
	for _, c := range []struct {
		name string
		args []string
		env  []string
	}{
		{"flag", []string{"--kube-pod-template", tpl}, nil},
		{"environment", nil, []string{"BERTH_KUBE_POD_TEMPLATE=" + tpl}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, code := proctest.Run(t, append(c.env, "BERTH_API_KEY=k", "KUBECONFIG="+filepath.Join(t.TempDir(), "none")),
				append(append(base, "--data", t.TempDir()), c.args...)...)
			want := tpl + ": pod template: spec.nodeName: not allowed"
			if code != 1 || !strings.Contains(out, want) {
				t.Errorf("exit %d, output:\n%s\nwant exit 1 and %q", code, out, want)
			}
		})
	}
}
