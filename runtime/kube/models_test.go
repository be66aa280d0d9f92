package kube

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"berth/hfcache"
	"berth/runtime"
)

// TestModelStep: when a model's download Job is made, made again after
// failing (with its back-off), and what the endpoint is told meanwhile.
func TestModelStep(t *testing.T) {
	ref, err := hfcache.ParseRef("https://huggingface.co/acme/tiny")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	job := func(attempt string, conds ...batchv1.JobCondition) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "berth-model-x", Annotations: map[string]string{annModelAttempt: attempt}},
			Status: batchv1.JobStatus{Conditions: conds}}
	}
	failed := batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded",
		Message: "Job has reached the specified backoff limit", LastTransitionTime: metav1.NewTime(now.Add(-3 * time.Second))}
	pod := func(phase corev1.PodPhase, waiting string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "berth-model-x-abcde"}, Status: corev1.PodStatus{Phase: phase}}
		if waiting != "" {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting, Message: "back-off pulling"}}}}
		}
		return p
	}
	line := hfcache.Progress{Ref: ref, State: hfcache.Downloading, Done: 1_000_000, Total: 3_000_000}
	cases := []struct {
		name    string
		in      modelIn
		act     modelAction
		state   hfcache.State
		message string
	}{
		{"no job: made", modelIn{}, actCreate, hfcache.Pending, "waiting to download acme/tiny"},
		{"no job, no image: says why", modelIn{noImage: "no image for the download Job"}, actNone, hfcache.Pending, "waiting to download acme/tiny: no image"},
		{"complete", modelIn{job: job("0", batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue})}, actNone, hfcache.Ready, "is ready"},
		{"failed, back-off not over", modelIn{job: job("0", failed)}, actNone, hfcache.Failed, "failed (attempt 1, tried again at 08:00:01Z): its download Job failed: BackoffLimitExceeded"},
		{"failed, back-off over: made again", modelIn{job: job("0", failed), backoff: time.Second}, actDelete, hfcache.Failed, "attempt 1"},
		{"failed twice: a longer back-off", modelIn{job: job("1", failed), backoff: 2 * time.Second}, actNone, hfcache.Failed, "attempt 2, tried again at 08:00:01Z"},
		{"failed, the token changed: made again now", modelIn{job: job("3", failed), backoff: time.Minute, retry: true}, actDelete, hfcache.Failed, "attempt 4"},
		{"pod not made yet", modelIn{job: job("0")}, actNone, hfcache.Pending, "its download Job starts a Pod"},
		{"pod cannot pull", modelIn{job: job("0"), pod: pod(corev1.PodPending, "ImagePullBackOff")}, actNone, hfcache.Pending, "pending: ImagePullBackOff: back-off pulling"},
		{"claim not bound", modelIn{job: job("0"), pod: pod(corev1.PodPending, ""), claimWait: "claim berth-models is not bound"}, actNone, hfcache.Pending, "pending: claim berth-models is not bound"},
		{"downloading: the log's line", modelIn{job: job("0"), pod: pod(corev1.PodRunning, ""), line: line, hasLine: true}, actNone, hfcache.Downloading, "downloading acme/tiny: 1 MB of 3 MB"},
		{"ready line, program not exited: not yet", modelIn{job: job("0"), pod: pod(corev1.PodRunning, ""), line: hfcache.Progress{Ref: ref, State: hfcache.Ready}, hasLine: true}, actNone, hfcache.Downloading, "downloading"},
		{"pod failed: another comes", modelIn{job: job("0"), pod: pod(corev1.PodFailed, "")}, actNone, hfcache.Pending, "failed; the Job starts another"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.ref, c.in.now = ref, now
			if c.in.backoff == 0 {
				c.in.backoff = 4 * time.Second
			}
			p, act := modelStep(c.in)
			if act != c.act || p.State != c.state || !strings.Contains(p.String(), c.message) {
				t.Errorf("got %v, %s %q; want %v, %s containing %q", act, p.State, p.String(), c.act, c.state, c.message)
			}
		})
	}
}

// TestModelJob: the download Job runs models-fetch in Berth's image with
// the claim read-write where workers mount it, the token only by
// secretKeyRef, its Pods not labelled as Berth's workers; a worker's
// models mount is the claim read-only.
func TestModelJob(t *testing.T) {
	ref, _ := hfcache.ParseRef("https://huggingface.co/acme/tiny:v1")
	j, err := modelJob(modelJobSpec{name: "berth-model-x", namespace: "ns", image: "berth:1", instance: "inst", ref: ref, attempt: 2,
		labels: map[string]string{runtime.LabelManaged: "true", runtime.LabelDataDir: "inst", labelAppComponent: componentModels},
		cfg:    ModelsConfig{Hub: "http://hub", Slots: 4, MinBackoff: time.Second, BytesPerSecond: 5e6}})
	if err != nil {
		t.Fatal(err)
	}
	if j.Annotations[annModelRef] != ref.String() || j.Annotations[annModelAttempt] != "2" || *j.Spec.BackoffLimit != 3 {
		t.Errorf("job metadata %+v, backoff limit %d", j.Annotations, *j.Spec.BackoffLimit)
	}
	ps := j.Spec.Template.Spec
	if ps.RestartPolicy != corev1.RestartPolicyNever || *ps.AutomountServiceAccountToken {
		t.Errorf("pod spec: restart %s, token automount %v", ps.RestartPolicy, *ps.AutomountServiceAccountToken)
	}
	if l := j.Spec.Template.Labels; l[runtime.LabelManaged] != "" || l[labelModelDownload] != "inst" {
		t.Errorf("pod labels %v: want %s=inst and no %s", l, labelModelDownload, runtime.LabelManaged)
	}
	c := ps.Containers[0]
	want := "models-fetch --dir /runpod-volume/huggingface-cache/hub --hub http://hub --ref https://huggingface.co/acme/tiny:v1 --slots 4 --min-backoff 1s --bandwidth 5"
	if got := strings.Join(c.Args, " "); c.Image != "berth:1" || got != want {
		t.Errorf("container %s args %q, want berth:1 %q", c.Image, got, want)
	}
	if len(c.Env) != 1 || c.Env[0].Value != "" || c.Env[0].ValueFrom.SecretKeyRef.Name != modelsTokenSecret || !*c.Env[0].ValueFrom.SecretKeyRef.Optional {
		t.Errorf("env %+v: want HF_TOKEN from the optional Secret only", c.Env)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].ReadOnly || c.VolumeMounts[0].MountPath != runtime.ModelsTarget ||
		ps.Volumes[0].PersistentVolumeClaim.ClaimName != ModelsClaim {
		t.Errorf("mounts %+v volumes %+v", c.VolumeMounts, ps.Volumes)
	}
}
