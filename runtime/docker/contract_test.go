package docker

import (
	"testing"

	"berth/gpu"
	"berth/internal/dockertest"
	"berth/runtime/backendtest"
	"berth/runtime/voldirs"
)

// The Docker backend keeps runtime.Backend's contract (the suite the fake
// and Kubernetes are held to), with the behaviours of
// backendtest/testdata/behave in a one-file image.
func TestContract(t *testing.T) {
	d := newDocker(t)
	img := dockertest.BuildGoImage(t, "berth/runtime/backendtest/testdata/behave")
	b, err := NewBackend(d, Config{Instance: dockertest.Unique("inst-"), Devices: func() ([]gpu.Device, error) { return nil, nil },
		Volumes: voldirs.New(t.TempDir(), nil)})
	if err != nil {
		t.Fatal(err)
	}
	prog := func(mode string) backendtest.Program { return backendtest.Program{Image: img, Cmd: []string{mode}} }
	backendtest.Run(t, backendtest.Harness{Backend: b, Exit: prog("exit"), Trap: prog("trap"), Ignore: prog("ignore"),
		MissingImage: "127.0.0.1:1/berth-missing/none:" + dockertest.Unique("t")})
}
