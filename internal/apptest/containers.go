package apptest

import (
	"context"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"berth/app"
	"berth/internal/dockertest"
	"berth/runtime"
)

// RemoveContainers removes every container, running or not, of the Berth
// whose data folder is data (its instance label, app.Instance): what a
// Berth leaves for its next start to adopt, gone at a test's end.
func RemoveContainers(tb testing.TB, data string) {
	tb.Helper()
	docker := dockertest.Require(tb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := docker.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: client.Filters{}.Add("label", runtime.LabelDataDir+"="+app.Instance(data))})
	if err != nil {
		tb.Errorf("list containers: %v", err)
		return
	}
	for _, c := range list.Items {
		if _, err := docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			tb.Errorf("remove container %s: %v", c.ID, err)
		}
	}
}
