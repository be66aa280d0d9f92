package kube_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth/cli"
	"berth/internal/kubetest"
	"berth/mgmt"
)

// volumeView is a network volume as GET /v1/networkvolumes/{id} shows it.
type volumeView struct {
	ID    string
	Claim *mgmt.VolumeClaim
}

// TestNetworkVolumeClaimThatCannotBind: an endpoint's network volume whose
// claim cannot bind (Berth told --storage-class of a class that does not
// exist) says so on the volume (its claim: Pending, and why) and on the
// endpoint (its worker waits throttled, the reason naming the claim, its
// access mode and class); the job waits. Once the class exists, the
// reason follows it; once a volume is made for the claim and it binds,
// the worker runs and the job completes, and the volume says Bound.
func TestNetworkVolumeClaimThatCannotBind(t *testing.T) {
	e := newEnv(t)
	e.c.AddNode(t, kubetest.NodeSpec{GPUs: 1, GPUProduct: rtx4090Label, GPUMemoryMiB: 24564, TestKubelet: true})
	e.class = unboundClass + e.ns.Name
	e.start()

	var vol idOnly
	e.call("POST", "/v1/networkvolumes", map[string]any{"name": "models", "size": 20, "dataCenterId": mgmt.DataCenterID}, 200, &vol)
	var v volumeView
	if e.call("GET", "/v1/networkvolumes/"+vol.ID, nil, 200, &v); v.Claim != nil {
		t.Errorf("a volume never mounted has claim %+v, want none", v.Claim)
	}
	tpl := e.template(map[string]any{"imageName": "registry.example.com/team/echo:1"})
	ep := e.endpoint(map[string]any{"templateId": tpl, "computeType": "GPU", "gpuTypeIds": []string{rtx4090}, "gpuCount": 1,
		"workersMin": 0, "workersMax": 1, "networkVolumeId": vol.ID})
	job := e.run(ep, map[string]any{"echo": "hello"})
	pod := e.newPod(ep, nil, false)
	claim := "berth-vol-" + strings.ToLower(vol.ID)

	// The endpoint and the volume say why.
	wantWhy := []string{"volume claim " + claim + " (ReadWriteMany, storage class " + e.class + ") is not bound",
		`storage class "` + e.class + `" does not exist (berth serve --storage-class)`}
	says := func(s string, want []string) bool {
		for _, w := range want {
			if !strings.Contains(s, w) {
				return false
			}
		}
		return true
	}
	var st epStatus
	e.eventually("the endpoint to say why its worker waits", func() bool {
		st = e.status(ep)
		return st.Workers.Throttled == 1 && says(st.Reason, wantWhy)
	}, func() string { return st.Reason })
	t.Logf("endpoint: %s", st.Reason)
	if st.Unhealthy || st.Workers.Initializing != 0 {
		t.Errorf("a worker waiting for its claim: %+v; want throttled, not initializing or unhealthy", st)
	}
	if h := e.health(ep); !says(h.Reason, wantWhy) {
		t.Errorf("/health reason %q, want %q", h.Reason, wantWhy)
	}
	e.call("GET", "/v1/networkvolumes/"+vol.ID, nil, 200, &v)
	if v.Claim == nil || v.Claim.Name != claim || v.Claim.Status != "Pending" || !says(v.Claim.Reason, wantWhy) {
		t.Errorf("volume claim %+v; want %s Pending saying %q", v.Claim, claim, wantWhy)
	}
	var v2 struct{ Claim *mgmt.VolumeClaim }
	if e.call("GET", "/v2/network-volumes/"+vol.ID, nil, 200, &v2); v2.Claim == nil || v2.Claim.Reason != v.Claim.Reason {
		t.Errorf("v2 volume claim %+v, want v1's %+v", v2.Claim, v.Claim)
	}
	// berth volume list: the claim's status and reason in the table.
	var out, errb bytes.Buffer
	env := map[string]string{"BERTH_URL": e.base, "BERTH_API_KEY": apiKey}
	if code := cli.Main([]string{"volume", "list", "-o", "table"}, cli.Options{Version: "test", Stdout: &out, Stderr: &errb,
		Stdin: strings.NewReader(""), Getenv: func(k string) string { return env[k] }, IsTerminal: func(io.Writer) bool { return false }}); code != 0 {
		t.Errorf("berth volume list: exit %d: %s", code, errb.String())
	} else if table := out.String(); !strings.Contains(table, "CLAIM_REASON") || !strings.Contains(table, "Pending") || !says(table, wantWhy) {
		t.Errorf("berth volume list:\n%s\nwant the claim Pending and %q", table, wantWhy)
	}
	if j := e.job(ep, job); j.Status != "IN_QUEUE" {
		t.Errorf("job %s while its worker waits: %+v", job, j)
	}

	// The class appears (one no provisioner serves): the reason follows.
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: e.class}, Provisioner: "berth.test/none"}
	if _, err := e.c.AdminClient.StorageV1().StorageClasses().Create(e.ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.c.AdminClient.StorageV1().StorageClasses().Delete(e.ctx, sc.Name, metav1.DeleteOptions{})
	})
	e.eventually("the volume to say it waits for the provisioner", func() bool {
		v = volumeView{}
		e.call("GET", "/v1/networkvolumes/"+vol.ID, nil, 200, &v)
		return v.Claim != nil && strings.Contains(v.Claim.Reason, "waiting for storage class "+e.class+"'s provisioner berth.test/none")
	}, func() string { return v.Claim.Reason })

	// A volume is made for the claim: it binds, the worker runs the job.
	c, err := e.c.AdminClient.CoreV1().PersistentVolumeClaims(e.ns.Name).Get(e.ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + string(c.UID)},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")},
			AccessModes:                   c.Spec.AccessModes,
			StorageClassName:              e.class,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: e.ns.Name, Name: claim, UID: c.UID},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent/" + claim}},
		},
	}
	if _, err := e.c.AdminClient.CoreV1().PersistentVolumes().Create(e.ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.c.AdminClient.CoreV1().PersistentVolumes().Delete(e.ctx, pv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete volume %s: %v", pv.Name, err)
		}
	})
	e.runPod(pod.Name)
	if got := e.waitJob(ep, job); got.Status != "COMPLETED" || string(got.Output) != `"hello"` {
		t.Errorf("job once the claim is bound: %+v", got)
	}
	v = volumeView{} // reason is omitted when empty: decode afresh
	e.call("GET", "/v1/networkvolumes/"+vol.ID, nil, 200, &v)
	if v.Claim == nil || v.Claim.Status != "Bound" || v.Claim.Reason != "" {
		t.Errorf("volume claim once bound: %+v; want Bound, no reason", v.Claim)
	}
	if st := e.status(ep); strings.Contains(st.Reason, claim) {
		t.Errorf("endpoint still says %q once its claim is bound", st.Reason)
	}
}

// TestWorkerListenerServesOnlyTheWorkerProtocol: with --worker-addr the
// address workers are given (the Service berth-worker) serves the worker
// protocol alone — every test of this package runs its workers through it
// — and answers 404 to the API, management and the dashboard, key or not.
func TestWorkerListenerServesOnlyTheWorkerProtocol(t *testing.T) {
	e := newEnv(t)
	e.start()
	if got := e.app.WorkerAddr(); got != e.workAddr {
		t.Fatalf("worker listener %q, want %q", got, e.workAddr)
	}
	tpl := e.template(map[string]any{"imageName": "registry.example.com/team/echo:1"})
	ep := e.endpoint(map[string]any{"templateId": tpl, "computeType": "CPU", "workersMin": 0, "workersMax": 0})
	worker := "http://" + e.workAddr
	for _, path := range []string{"/", "/v1/endpoints", "/v1/networkvolumes", "/v2/" + ep + "/health", "/v2/" + ep + "/status/x",
		"/graphql", "/metrics", "/v1/openapi.json"} {
		req, err := http.NewRequestWithContext(e.ctx, "GET", worker+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s on the worker listener: %d, want 404", path, res.StatusCode)
		}
		// The same on the API's listener is answered.
		req, _ = http.NewRequestWithContext(e.ctx, "GET", e.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		if res, err := http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		} else if res.Body.Close(); res.StatusCode == http.StatusNotFound && path != "/v2/"+ep+"/status/x" {
			t.Errorf("GET %s on the API's listener: 404", path)
		}
	}
	// A worker route is served there (the operator's key opens it, as a
	// worker's own does; the workers of the other tests use it).
	req, _ := http.NewRequestWithContext(e.ctx, "GET", worker+"/v2/"+ep+"/ping/w1", nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		t.Errorf("GET /v2/%s/ping/w1 on the worker listener: 404, want the worker protocol's answer", ep)
	}
}
