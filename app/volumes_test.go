package app_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"berth/app"
	"berth/internal/apptest"
	"berth/mgmt"
	"berth/runtime/fake"
	"berth/store"
)

// TestVolumeDeletionKeepsWhatIsNotDeleted: Berth without a runtime still
// keeps network volumes as directories; a deletion the runtime cannot
// set aside stores nothing — the record, its billing and its files stay —
// and one that succeeds leaves no directory behind.
func TestVolumeDeletionKeepsWhatIsNotDeleted(t *testing.T) {
	ctx := context.Background()
	cfg := apptest.Config(t, "k")
	b := apptest.Start(t, cfg)
	mg := b.Mgmt()
	v, err := mg.CreateVolume(ctx, mgmt.VolumeInput{Name: ptr("data"), Size: ptr(10), DataCenterID: ptr(mgmt.DataCenterID)})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(cfg.DataDir, "volumes")
	if v.Path != filepath.Join(root, v.ID) {
		t.Fatalf("volume path %q, want under %s", v.Path, root)
	}
	file := filepath.Join(v.Path, "weights.bin")
	if err := os.WriteFile(file, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}

	// Something at the set-aside path: the rename fails inside the
	// transaction.
	block := filepath.Join(root, ".deleting-"+v.ID, "x")
	if err := os.MkdirAll(block, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mg.DeleteVolume(ctx, v.ID); err == nil {
		t.Fatal("the deletion succeeded though its directory could not be set aside")
	}
	got, err := mg.GetVolume(ctx, v.ID)
	if err != nil || got.UsedBytes != 4096 {
		t.Fatalf("after the failed deletion: %+v, %v; want the volume with its 4096 bytes", got, err)
	}
	if open, err := store.OpenUsage(b.Store()); err != nil || len(open) != 1 || open[0].ID != v.ID {
		t.Errorf("open billing intervals after the failed deletion: %+v, %v", open, err)
	}

	if err := os.RemoveAll(filepath.Dir(block)); err != nil {
		t.Fatal(err)
	}
	if err := mg.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if es, _ := os.ReadDir(root); len(es) != 0 {
		t.Errorf("the volumes directory after the deletion holds %d entries", len(es))
	}
	if _, err := mg.GetVolume(ctx, v.ID); err == nil {
		t.Error("the deleted volume is still there")
	}
}

// TestVolumesAreTheBackends: on a backend given whole, a network volume's
// data are the backend's — made with the record, grown before the larger
// size is stored, gone with the record — and Berth makes no directory of
// its own.
func TestVolumesAreTheBackends(t *testing.T) {
	ctx := context.Background()
	fb := fake.New(fake.Config{})
	cfg := apptest.Config(t, "k")
	cfg.Backend = app.OnBackend(fb)
	mg := apptest.Start(t, cfg).Mgmt()
	v, err := mg.CreateVolume(ctx, mgmt.VolumeInput{Name: ptr("data"), Size: ptr(10), DataCenterID: ptr(mgmt.DataCenterID)})
	if err != nil {
		t.Fatal(err)
	}
	if got := fb.Volumes(); !maps.Equal(got, map[string]int{v.ID: 10}) || v.Path != "" {
		t.Fatalf("after the creation the backend keeps %v (path %q), want %s of 10 GB", got, v.Path, v.ID)
	}
	if _, err := mg.UpdateVolume(ctx, v.ID, mgmt.VolumeInput{Size: ptr(30)}); err != nil {
		t.Fatal(err)
	}
	if got := fb.Volumes(); !maps.Equal(got, map[string]int{v.ID: 30}) {
		t.Errorf("after growing to 30 GB the backend keeps %v", got)
	}
	if err := mg.DeleteVolume(ctx, v.ID); err != nil {
		t.Fatal(err)
	}
	if got := fb.Volumes(); len(got) != 0 {
		t.Errorf("after the deletion the backend keeps %v", got)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "volumes")); !os.IsNotExist(err) {
		t.Errorf("Berth made a volumes directory of its own on the backend's runtime: %v", err)
	}
}

// TestDeletedRegistryLoginLeavesTheBackend: the backend keeps a registry
// login a pod pulled with; deleting the login (once no pod uses it) has
// the backend remove it.
func TestDeletedRegistryLoginLeavesTheBackend(t *testing.T) {
	ctx := context.Background()
	fb := fake.New(fake.Config{})
	fb.Image("pod-image", func(ctx context.Context, _ fake.Process) int { <-ctx.Done(); return 0 })
	cfg := apptest.Config(t, "k")
	cfg.Backend, cfg.RemoveContainersOnStop = app.OnBackend(fb), true
	mg := apptest.Start(t, cfg).Mgmt()
	auth, err := mg.CreateRegistryAuth(ctx, mgmt.RegistryAuthInput{Name: ptr("robot"), Username: ptr("robot"), Password: ptr("s3cret")})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := mg.CreatePod(ctx, mgmt.PodInput{PodFields: mgmt.PodFields{ImageName: ptr("pod-image"), ContainerRegistryAuthID: ptr(auth.ID)},
		ComputeType: ptr("CPU")})
	if err != nil {
		t.Fatal(err)
	}
	if got := fb.RegistryAuths(); !slices.Equal(got, []string{auth.ID}) {
		t.Fatalf("the backend keeps logins %v after the pod's creation, want %s", got, auth.ID)
	}
	if err := mg.DeletePod(ctx, pod.ID); err != nil {
		t.Fatal(err)
	}
	if err := mg.DeleteRegistryAuth(ctx, auth.ID); err != nil {
		t.Fatal(err)
	}
	if got := fb.RegistryAuths(); len(got) != 0 {
		t.Errorf("the backend keeps logins %v after the login's deletion", got)
	}
}
