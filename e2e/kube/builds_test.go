package kube_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/moby/moby/client"

	"berth/internal/dockertest"
	"berth/internal/kubetest"
)

// TestBuildPushedToRegistryOnKubernetes: on the Kubernetes runtime with
// --registry and --registry-auth, a build made through the API is pushed
// to the registry (a local docker-registry with htpasswd auth); the worker
// Pod of the release names the pushed image by digest and pulls it with
// the registry auth's Secret, whose login is the one the push used; the
// job completes on that Pod. Without --registry a build is refused saying
// why (the nodes could not see the image).
func TestBuildPushedToRegistryOnKubernetes(t *testing.T) {
	dockertest.Require(t)
	host, user, pass := dockertest.Registry(t)
	prefix := host + "/berth-kube"

	// Without a registry: refused, nothing recorded.
	e := newEnv(t)
	e.c.AddNode(t, kubetest.NodeSpec{TestKubelet: true})
	e.start()
	tpl := e.template(map[string]any{"imageName": "registry.example.com/team/echo:1"})
	ep := e.endpoint(map[string]any{"name": dockertest.Unique("kb-"), "templateId": tpl, "computeType": "CPU", "workersMax": 1, "idleTimeout": 5})
	code, body := e.postTar("/v2/serverless/"+ep+"/builds", scratchContext(t, "v1"))
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "--registry") {
		t.Errorf("a build on Kubernetes without a registry: %d %s, want 503 naming --registry", code, body)
	}
	e.stop()

	// With a registry and its stored login.
	e.registry, e.regAuth = prefix, "kube-registry"
	e.start()
	var auth struct{ ID string }
	e.call("POST", "/v1/containerregistryauth", map[string]any{"name": "kube-registry", "username": user, "password": pass}, 200, &auth)
	var epv struct{ Name string }
	e.call("GET", "/v1/endpoints/"+ep, nil, 200, &epv)
	t.Cleanup(func() { removeImages(t, "berth/"+epv.Name, prefix+"/"+epv.Name) })

	code, body = e.postTar("/v2/serverless/"+ep+"/builds", scratchContext(t, "v2"))
	if code != http.StatusAccepted {
		t.Fatalf("POST builds: %d %s", code, body)
	}
	var bd struct {
		ID, Status, ImageName string
		PushedImage           *string
		ImageDigest           *string
		Error                 *string
		ReleaseVersion        *int
	}
	if err := json.Unmarshal(body, &bd); err != nil {
		t.Fatal(err)
	}
	e.eventually("the build to finish", func() bool {
		e.call("GET", "/v2/serverless/"+ep+"/builds/"+bd.ID, nil, 200, &bd)
		return bd.Status == "COMPLETED" || bd.Status == "FAILED" || bd.Status == "CANCELLED"
	}, func() string { return fmt.Sprintf("%+v", bd) })
	if bd.Status != "COMPLETED" || bd.PushedImage == nil || bd.ImageDigest == nil || !strings.HasPrefix(*bd.ImageDigest, "sha256:") ||
		*bd.PushedImage != prefix+"/"+epv.Name+"@"+*bd.ImageDigest || bd.ReleaseVersion == nil {
		t.Fatalf("the build: %+v (error %v)", bd, deref(bd.Error))
	}

	job := e.run(ep, map[string]any{"echo": "built"})
	pod := e.newPod(ep, nil, true)
	c := pod.Spec.Containers[0]
	if c.Image != *bd.PushedImage {
		t.Errorf("the worker Pod's image is %q, want the pushed digest %q", c.Image, *bd.PushedImage)
	}
	secret := "berth-registry-" + strings.ToLower(auth.ID)
	if !slices.ContainsFunc(pod.Spec.ImagePullSecrets, func(r corev1.LocalObjectReference) bool { return r.Name == secret }) {
		t.Errorf("the worker Pod's pull Secrets are %v, want %s", pod.Spec.ImagePullSecrets, secret)
	}
	s, err := e.c.AdminClient.CoreV1().Secrets(e.ns.Name).Get(e.ctx, secret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the pull Secret: %v", err)
	}
	var cfg struct {
		Auths map[string]struct{ Auth string }
	}
	if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg); err != nil || s.Type != corev1.SecretTypeDockerConfigJson {
		t.Fatalf("the pull Secret is %s: %v", s.Type, err)
	}
	if got := cfg.Auths[host].Auth; got != base64.StdEncoding.EncodeToString([]byte(user+":"+pass)) {
		t.Errorf("the pull Secret's login for %s is %q, want the registry auth's (auths: %v)", host, got, keys(cfg.Auths))
	}
	// What a node would pull is in the registry, under that digest.
	if code := registryManifest(t, host, user, pass, strings.TrimPrefix(prefix, host+"/")+"/"+epv.Name, *bd.ImageDigest); code != 200 {
		t.Errorf("the registry answers %d for the pushed manifest, want 200", code)
	}
	e.runPod(pod.Name)
	if got := e.waitJob(ep, job); got.Status != "COMPLETED" || string(got.Output) != `"built"` {
		t.Errorf("job: %+v", got)
	}
}

// postTar posts an uncompressed tar as a build context.
func (e *kenv) postTar(path string, body []byte) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, "POST", e.base+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// scratchContext is a build context whose image is a file on scratch:
// nothing to pull. (The test's kubelet runs echoworker whatever the
// image; what is checked is what the Pod names.)
func scratchContext(t *testing.T, version string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range map[string]string{
		"Dockerfile":  "FROM scratch\nCOPY version.txt /version.txt\nCMD [\"/worker\"]\n",
		"version.txt": version + " " + dockertest.Unique("") + "\n",
	} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// registryManifest asks the registry (v2 API, basic auth) for repo's
// manifest by digest and returns the status.
func registryManifest(t *testing.T, host, user, pass, repo, digest string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "HEAD", "http://"+host+"/v2/"+repo+"/manifests/"+digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(user, pass)
	req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// removeImages removes every local tag of the given repositories (the
// builds' images and the tags their pushes added).
func removeImages(t *testing.T, repos ...string) {
	cli := dockertest.Require(t)
	for _, repo := range repos {
		l, err := cli.ImageList(context.Background(), client.ImageListOptions{Filters: client.Filters{}.Add("reference", repo)})
		if err != nil {
			t.Errorf("list images of %s: %v", repo, err)
			continue
		}
		for _, im := range l.Items {
			for _, ref := range im.RepoTags {
				if err := dockertest.RemoveImage(ref); err != nil {
					t.Errorf("remove %s: %v", ref, err)
				}
			}
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
