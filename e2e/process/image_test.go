package process_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"berth/internal/clientkit"
	"berth/internal/dockertest"
	"berth/internal/proctest"
)

// TestBerthImage builds the repository's Dockerfile — on a local Debian 12
// root file system standing in for debian:bookworm-slim (nothing can be
// pulled here) — with the binary `go build` makes, starts it as
// deploy/kubernetes would (a key from the environment, the data volume),
// and reads what a user needs of it: Berth answers on its port with the key
// (the cgo binary runs on the base), it runs as uid 65532, not root, and the
// CA bundle https webhooks need is there.
func TestBerthImage(t *testing.T) {
	cli := dockertest.Require(t)
	bin := proctest.Build(t, "berth", false)
	// The python root file system's package set: its tarball is cached for
	// the worker images already (ca-certificates come with python3-requests).
	base := dockertest.BuildDebianImage(t, dockertest.DebianImage{Packages: clientkit.DebianPackages})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	buildCtx, err := imageContext(bin)
	if err != nil {
		t.Fatal(err)
	}
	ref := "berth-test/berth:" + dockertest.Unique("")
	res, err := cli.ImageBuild(ctx, buildCtx, client.ImageBuildOptions{
		Tags: []string{ref}, Remove: true, ForceRemove: true, BuildArgs: map[string]*string{"BASE": &base}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(res.Body)
	res.Body.Close()
	t.Cleanup(func() {
		if err := dockertest.RemoveImage(ref); err != nil {
			t.Errorf("remove %s: %v", ref, err)
		}
	})
	if !bytes.Contains(out, []byte("Successfully tagged")) || bytes.Contains(out, []byte(`"errorDetail"`)) {
		t.Fatalf("docker build of the Dockerfile failed:\n%s", out)
	}

	port, _ := network.ParsePort("8080/tcp")
	const key = "berth_image_test_key"
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:   dockertest.Unique("berth-image-"),
		Config: &container.Config{Image: ref, Env: []string{"BERTH_API_KEY=" + key}, ExposedPorts: network.PortSet{port: {}}},
		HostConfig: &container.HostConfig{PortBindings: network.PortMap{
			port: {{HostIP: netip.MustParseAddr("127.0.0.1")}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cli.ContainerRemove(ctx, created.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	})
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	in, err := cli.ContainerInspect(ctx, created.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var hostPort string
	for _, b := range in.Container.NetworkSettings.Ports[port] {
		hostPort = b.HostPort
	}
	if hostPort == "" {
		t.Fatalf("port 8080 not published: %+v", in.Container.NetworkSettings.Ports)
	}
	base8080 := "http://127.0.0.1:" + hostPort

	// Berth answers once it serves: the page shell without a key, the API
	// with the key from the environment (and not without it).
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(base8080 + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("berth in its image does not answer on %s: %v; its output:\n%s", base8080, err, containerOutput(ctx, cli, created.ID))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, tc := range []struct {
		key  string
		want int
	}{{key, 200}, {"", 401}} {
		req, _ := http.NewRequestWithContext(ctx, "GET", base8080+"/v1/endpoints", nil)
		if tc.key != "" {
			req.Header.Set("Authorization", "Bearer "+tc.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET /v1/endpoints with key %q: %d, want %d", tc.key, resp.StatusCode, tc.want)
		}
	}

	top, err := cli.ContainerTop(ctx, created.ID, client.ContainerTopOptions{Arguments: []string{"-o", "pid,uid,args"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Processes) != 1 || len(top.Processes[0]) != 3 || top.Processes[0][1] != "65532" || !strings.Contains(top.Processes[0][2], "berth serve") {
		t.Errorf("processes in the container (pid, uid, args): %v, want berth serve as uid 65532", top.Processes)
	}
	st, err := cli.ContainerStatPath(ctx, created.ID, client.ContainerStatPathOptions{Path: "/etc/ssl/certs/ca-certificates.crt"})
	if err != nil || st.Stat.Size == 0 {
		t.Errorf("the CA bundle in the image: %+v, %v", st.Stat, err)
	}
	if st, err := cli.ContainerStatPath(ctx, created.ID, client.ContainerStatPathOptions{Path: "/var/lib/berth/berth.db"}); err != nil || st.Stat.Size == 0 {
		t.Errorf("the database in the data volume: %+v, %v", st.Stat, err)
	}
}

// imageContext is the build context the Dockerfile expects: the
// Dockerfile, .dockerignore and the binary as ./berth.
func imageContext(bin string) (io.Reader, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct{ name, path string }{{"Dockerfile", "../../Dockerfile"}, {".dockerignore", "../../.dockerignore"}, {"berth", bin}} {
		data, err := os.ReadFile(f.path)
		if err != nil {
			return nil, err
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o755, Size: int64(len(data))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	return &buf, tw.Close()
}

// containerOutput is what a container printed, for a failure message.
func containerOutput(ctx context.Context, cli *client.Client, id string) string {
	rc, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return fmt.Sprint(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 64<<10))
	return string(b)
}
