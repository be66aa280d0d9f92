package kube

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"berth/hfcache"
	"berth/runtime"
)

// The model cache on Kubernetes (docs/models.md, "Kubernetes"): one
// PersistentVolumeClaim, berth-models, holds the hub cache folder; workers
// mount it read-only at runtime.ModelsTarget. Each wanted model is filled
// by a Job, berth-model-<hash>, whose Pod runs Berth's own image
// (`berth models-fetch`: package hfcache, so the same resume, sha256 and
// retries as on Docker) with the claim mounted read-write, and writes its
// progress as lines on its log; Berth reads the last one (pods/log) for
// the endpoint's status. A complete Job is the record that the model is
// on the claim (kept; a deleted one is made again and finds the model
// complete at once). The token goes by a Secret, never in the Job.
//
// The Jobs and their Pods are read from informers (label-selected, as the
// Backend's): a pass asks the API server nothing once every model is
// complete, and their changes kick a pass at once.

const (
	// ModelsClaim is the claim of the model cache.
	ModelsClaim       = "berth-models"
	modelsTokenSecret = "berth-models-token"
	modelsTokenKey    = "HF_TOKEN"
	componentModels   = "model-cache"
	// labelModelDownload marks the download Jobs' Pods (value: the
	// instance). Not berth.managed: they are not workers or pods, and the
	// Pod informer must not take them for some.
	labelModelDownload = "berth.model-download"
	annModelRef        = "berth.model-reference"
	annModelAttempt    = "berth.model-attempt"
	// defaultModelsClaimGB sizes the claim without a cap.
	defaultModelsClaimGB = 100
	// maxJobBackoff bounds the wait before a failed Job is made again.
	maxJobBackoff = 5 * time.Minute
)

// ModelsConfig is the model cache's configuration on Kubernetes.
type ModelsConfig struct {
	// Image runs the download Jobs: Berth's own (its entrypoint berth,
	// the Job's args models-fetch …). "": the image of Berth's own
	// container when it runs in the cluster (Config.SelfPod); else models
	// cannot be downloaded and say why.
	Image string
	// Hub is the Hub's base URL (--hf-endpoint).
	Hub string
	// Token is the Hugging Face token ("": none), kept in the Secret
	// berth-models-token and given to the download Pods by secretKeyRef.
	Token func() string
	// ClaimGB sizes the claim [100]; StorageClass is its class
	// [Config.StorageClass]; AccessMode its access mode [ReadWriteMany].
	ClaimGB      int
	StorageClass string
	AccessMode   corev1.PersistentVolumeAccessMode
	// The download's bounds and first back-off (models-fetch's flags).
	Slots          int
	BytesPerSecond int64
	MinBackoff     time.Duration
	// Interval between passes [1s].
	Interval time.Duration
}

// Models fills the models claim with the wanted models, one Job each: the
// hfcache.Cache of the Kubernetes runtime (Sync, Status).
type Models struct {
	b    *Backend
	cfg  ModelsConfig
	log  *slog.Logger
	kick chan struct{}

	cancel context.CancelFunc
	done   chan struct{}

	// The download Jobs and their Pods (informers); synced says both
	// caches are complete.
	jobs   batchlisters.JobLister
	pods   corelisters.PodLister
	synced []cache.InformerSynced
	// passes counts the passes run (Passes).
	passes atomic.Uint64

	mu sync.Mutex
	// jobEvent is closed at the Job informer's next change (waitJobs).
	jobEvent chan struct{}
	want     []hfcache.Ref
	status   map[hfcache.Ref]hfcache.Progress
	retry    bool
	attempts map[hfcache.Ref]int // Jobs made again after failing
	commits  map[string]string   // a complete Job's UID -> the commit its log said
	image    string
	imageErr string
	token    *string // the token the Secret holds (nil: not yet looked at)
}

// StartModels starts filling the models claim (before the supervisor:
// Caps.Models follows it). Close stops it.
func (b *Backend) StartModels(cfg ModelsConfig) *Models {
	if cfg.ClaimGB <= 0 {
		cfg.ClaimGB = defaultModelsClaimGB
	}
	if cfg.StorageClass == "" {
		cfg.StorageClass = b.cfg.StorageClass
	}
	if cfg.AccessMode == "" {
		cfg.AccessMode = corev1.ReadWriteMany
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 4
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 2 * time.Second
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Hub == "" {
		cfg.Hub = hfcache.DefaultEndpoint
	}
	if cfg.Token == nil {
		cfg.Token = func() string { return "" }
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Models{b: b, cfg: cfg, log: b.log, kick: make(chan struct{}, 1),
		cancel: cancel, done: make(chan struct{}), status: map[hfcache.Ref]hfcache.Progress{},
		attempts: map[hfcache.Ref]int{}, commits: map[string]string{}, image: cfg.Image, jobEvent: make(chan struct{})}
	stop := m.informers()
	b.mu.Lock()
	b.models = m
	b.mu.Unlock()
	go func() {
		defer close(m.done)
		defer stop()
		m.run(ctx)
	}()
	return m
}

// informers starts the informers of the download Jobs (this instance's,
// by the labels they are made with) and of their Pods (labelled
// labelModelDownload, which the Backend's Pod informer does not select),
// each change kicking a pass; it returns what stops them.
func (m *Models) informers() (stop func()) {
	ns := m.b.cfg.Namespace
	jobSel := labels.SelectorFromSet(m.b.objectLabels(componentModels)).String()
	podSel := labels.SelectorFromSet(labels.Set{labelModelDownload: m.b.cfg.Instance}).String()
	jobsF := informers.NewSharedInformerFactoryWithOptions(m.b.cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = jobSel }))
	podsF := informers.NewSharedInformerFactoryWithOptions(m.b.cs, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = podSel }))
	jobInf := jobsF.Batch().V1().Jobs()
	podInf := podsF.Core().V1().Pods()
	m.jobs, m.pods = jobInf.Lister(), podInf.Lister()
	m.synced = []cache.InformerSynced{jobInf.Informer().HasSynced, podInf.Informer().HasSynced}
	jobChanged := func() {
		m.mu.Lock()
		close(m.jobEvent)
		m.jobEvent = make(chan struct{})
		m.mu.Unlock()
		m.wake()
	}
	// AddEventHandler fails only on a stopped informer: these are new.
	_, _ = jobInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { jobChanged() }, UpdateFunc: func(_, _ any) { jobChanged() }, DeleteFunc: func(any) { jobChanged() },
	})
	_, _ = podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { m.wake() }, UpdateFunc: func(_, _ any) { m.wake() }, DeleteFunc: func(any) { m.wake() },
	})
	ictx, cancel := context.WithCancel(context.Background())
	jobsF.Start(ictx.Done())
	podsF.Start(ictx.Done())
	return func() {
		cancel()
		jobsF.Shutdown()
		podsF.Shutdown()
	}
}

// Passes is how many passes have run (tests count the API requests over
// a known number).
func (m *Models) Passes() uint64 { return m.passes.Load() }

// Close stops the passes (the Jobs keep running).
func (m *Models) Close() {
	m.cancel()
	<-m.done
}

// Sync makes refs the wanted models (hfcache.Cache.Sync's contract).
func (m *Models) Sync(refs []hfcache.Ref) {
	m.mu.Lock()
	changed := !slices.Equal(m.want, refs)
	m.want = slices.Clone(refs)
	m.mu.Unlock()
	if changed {
		m.wake()
	}
}

// Status is ref's progress; ok is false when ref is not wanted.
func (m *Models) Status(ref hfcache.Ref) (hfcache.Progress, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.Contains(m.want, ref) {
		return hfcache.Progress{}, false
	}
	p, ok := m.status[ref]
	if !ok {
		p = hfcache.Progress{Ref: ref, State: hfcache.Pending}
	}
	return p, true
}

// Touch does nothing: the claim is not evicted from (docs/models.md).
func (m *Models) Touch(hfcache.Ref) {}

// RetryNow makes failed Jobs start again now (the token changed).
func (m *Models) RetryNow() {
	m.mu.Lock()
	m.retry = true
	m.mu.Unlock()
	m.wake()
}

func (m *Models) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *Models) run(ctx context.Context) {
	// The first pass sees the Jobs a previous run left.
	if !cache.WaitForCacheSync(ctx.Done(), m.synced...) {
		return
	}
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		m.pass(ctx)
		m.passes.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
		}
	}
}

// jobName is the download Job of ref (one per instance and reference).
func (m *Models) jobName(ref hfcache.Ref) string {
	h := sha256.Sum256([]byte(m.b.cfg.Instance + "\x00" + ref.String()))
	return "berth-model-" + hex.EncodeToString(h[:])[:16]
}

// pass reconciles the Jobs with the wanted models and records each one's
// progress.
func (m *Models) pass(ctx context.Context) {
	m.mu.Lock()
	want, retry := slices.Clone(m.want), m.retry
	m.retry = false
	m.mu.Unlock()
	ns := m.b.cfg.Namespace
	jobsAPI := m.b.cs.BatchV1().Jobs(ns)
	list, err := m.jobs.Jobs(ns).List(labels.SelectorFromSet(m.b.objectLabels(componentModels)))
	if err != nil {
		m.log.Warn("list the model download jobs", "err", err)
		return
	}
	jobs := map[string]*batchv1.Job{}
	for _, j := range list {
		jobs[j.Annotations[annModelRef]] = j
	}
	now := time.Now()
	next := map[hfcache.Ref]hfcache.Progress{}
	setup := ""
	if len(want) > 0 {
		setup = m.setup(ctx, jobs, &retry)
	}
	var pods map[string]*corev1.Pod
	for _, r := range want {
		j := jobs[r.String()]
		if setup != "" {
			next[r] = hfcache.Progress{Ref: r, State: hfcache.Pending, Error: setup}
			continue
		}
		if j != nil && pods == nil && !jobDone(j) {
			pods = m.downloadPods()
		}
		in := modelIn{ref: r, job: j, now: now, noImage: m.imageErr, backoff: m.cfg.MinBackoff, retry: retry}
		if j != nil {
			in.pod = pods[j.Name]
			if in.pod != nil && in.pod.Status.Phase == corev1.PodPending {
				in.claimWait, _ = claimWait(ModelsClaim, m.claim(), m.classes())
			}
			if readLog(j, in.pod) {
				in.line, in.hasLine = m.lastLine(ctx, in.pod.Name, r)
			}
			if jobDone(j) {
				in.line.Commit = m.commitOf(ctx, j, r)
			}
		}
		p, act := modelStep(in)
		switch act {
		case actCreate:
			m.mu.Lock()
			attempt := m.attempts[r]
			m.mu.Unlock()
			job, err := m.job(r, attempt)
			var made *batchv1.Job
			if err == nil {
				made, err = jobsAPI.Create(ctx, job, metav1.CreateOptions{})
			}
			if err != nil && !apierrors.IsAlreadyExists(err) {
				if ctx.Err() != nil {
					return
				}
				p = hfcache.Progress{Ref: r, State: hfcache.Pending, Error: "cannot make its download Job: " + err.Error()}
				m.log.Warn("make a model download job", "model", r.String(), "err", err)
			} else {
				m.log.Info("model download job made", "model", r.String(), "job", m.jobName(r), "attempt", attempt)
				if made != nil {
					m.waitJobs(ctx, func() bool { return m.cached(made.Name, made.UID) })
				}
			}
		case actDelete:
			m.mu.Lock()
			m.attempts[r] = jobAttempt(j) + 1
			m.mu.Unlock()
			m.deleteJob(ctx, j)
		}
		next[r] = p
	}
	// A download no longer wanted stops (its partial files stay on the
	// claim, resumed if it is wanted again); a complete one stays.
	for ref, j := range jobs {
		if jobDone(j) {
			continue
		}
		if !slices.ContainsFunc(want, func(r hfcache.Ref) bool { return r.String() == ref }) {
			m.deleteJob(ctx, j)
		}
	}
	m.mu.Lock()
	m.status = next
	m.mu.Unlock()
}

// setup makes the claim and the token's Secret, and finds the image; ""
// when done, else why the models wait. A token that changed restarts the
// downloads under way (their Pods read it at start).
func (m *Models) setup(ctx context.Context, jobs map[string]*batchv1.Job, retry *bool) string {
	if err := m.ensureClaim(ctx); err != nil {
		return err.Error()
	}
	changed, err := m.ensureToken(ctx)
	if err != nil {
		return err.Error()
	}
	if changed {
		*retry = true
		for _, j := range jobs {
			if !jobDone(j) {
				m.deleteJob(ctx, j)
				delete(jobs, j.Annotations[annModelRef])
			}
		}
	}
	if m.image == "" && m.imageErr == "" {
		m.image, m.imageErr = m.b.selfImage(ctx)
	}
	return ""
}

// selfImage is the image of Berth's own container when it runs in the
// cluster, else why there is no image for the download Jobs.
func (b *Backend) selfImage(ctx context.Context) (string, string) {
	if b.cfg.SelfPod == "" {
		return "", "no image for the download Job: run berth serve with --models-image (Berth's own image)"
	}
	ns := b.cfg.SelfNamespace
	if ns == "" {
		ns = b.cfg.Namespace
	}
	p, err := b.cs.CoreV1().Pods(ns).Get(ctx, b.cfg.SelfPod, metav1.GetOptions{})
	if err != nil || len(p.Spec.Containers) == 0 {
		return "", fmt.Sprintf("no image for the download Job (Berth's own Pod %s: %v): run berth serve with --models-image", b.cfg.SelfPod, err)
	}
	return p.Spec.Containers[0].Image, ""
}

// modelsClaimSpec is the models claim.
func (m *Models) modelsClaimSpec() *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: ModelsClaim, Namespace: m.b.cfg.Namespace, Labels: m.b.objectLabels(componentModels)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{m.cfg.AccessMode},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(int64(m.cfg.ClaimGB)<<30, resource.BinarySI)}},
		},
	}
	if m.cfg.StorageClass != "" {
		pvc.Spec.StorageClassName = ptr(m.cfg.StorageClass)
	}
	return pvc
}

// ensureClaim makes the models claim if it is missing.
func (m *Models) ensureClaim(ctx context.Context) error {
	if m.claim() != nil {
		return nil
	}
	claims := m.b.cs.CoreV1().PersistentVolumeClaims(m.b.cfg.Namespace)
	if _, err := claims.Get(ctx, ModelsClaim, metav1.GetOptions{}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("the models claim %s: %w", ModelsClaim, err)
	}
	if _, err := claims.Create(ctx, m.modelsClaimSpec(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("make the models claim %s: %w", ModelsClaim, err)
	}
	return nil
}

// claim is the models claim from the informer (nil: not there).
func (m *Models) claim() *corev1.PersistentVolumeClaim {
	if m.b.claims == nil {
		return nil
	}
	c, err := m.b.claims.PersistentVolumeClaims(m.b.cfg.Namespace).Get(ModelsClaim)
	if err != nil {
		return nil
	}
	return c
}

func (m *Models) classes() []*storagev1.StorageClass {
	if m.b.classes == nil {
		return nil
	}
	l, _ := m.b.classes.List(labels.Everything())
	return l
}

// ensureToken makes the Secret hold the current token (none: no Secret);
// changed says it was written.
func (m *Models) ensureToken(ctx context.Context) (changed bool, err error) {
	tok := m.cfg.Token()
	if m.token != nil && *m.token == tok {
		return false, nil
	}
	secrets := m.b.cs.CoreV1().Secrets(m.b.cfg.Namespace)
	cur, err := secrets.Get(ctx, modelsTokenSecret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cur = nil
	case err != nil:
		return false, fmt.Errorf("the token's Secret %s: %w", modelsTokenSecret, err)
	}
	switch {
	case tok == "" && cur != nil:
		err = secrets.Delete(ctx, modelsTokenSecret, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		changed = true
	case tok != "" && cur == nil:
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: modelsTokenSecret, Namespace: m.b.cfg.Namespace, Labels: m.b.objectLabels(componentModels)},
			Type:       corev1.SecretTypeOpaque, Data: map[string][]byte{modelsTokenKey: []byte(tok)},
		}, metav1.CreateOptions{})
		changed = true
	case tok != "" && !bytes.Equal(cur.Data[modelsTokenKey], []byte(tok)):
		cur.Data = map[string][]byte{modelsTokenKey: []byte(tok)}
		_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
		changed = true
	}
	if err != nil {
		return false, fmt.Errorf("write the token's Secret %s: %w", modelsTokenSecret, err)
	}
	m.token = &tok
	return changed, nil
}

// job is the download Job of ref.
func (m *Models) job(ref hfcache.Ref, attempt int) (*batchv1.Job, error) {
	if m.image == "" {
		return nil, fmt.Errorf("%s", m.imageErr)
	}
	return modelJob(modelJobSpec{
		name: m.jobName(ref), namespace: m.b.cfg.Namespace, image: m.image, ref: ref, attempt: attempt,
		labels: m.b.objectLabels(componentModels), instance: m.b.cfg.Instance, cfg: m.cfg, template: m.b.cfg.PodTemplate.Apply,
	})
}

// modelJobSpec is what modelJob builds from.
type modelJobSpec struct {
	name, namespace, image, instance string
	ref                              hfcache.Ref
	attempt                          int
	labels                           map[string]string
	cfg                              ModelsConfig
	template                         func(*corev1.Pod) error // the operator's Pod template
}

// modelJob is the download Job of one model: its Pod runs `berth
// models-fetch` in Berth's image with the models claim mounted read-write
// where workers mount it read-only, HF_TOKEN from the token's Secret
// (optional: none without a token). The Job retries a Pod that fails
// (evicted, OOM-killed) 3 times; download errors are retried by the
// program itself with back-off, so they never fail the Pod.
func modelJob(s modelJobSpec) (*batchv1.Job, error) {
	args := []string{"models-fetch", "--dir", runtime.ModelsTarget, "--hub", s.cfg.Hub, "--ref", s.ref.String(),
		"--slots", strconv.Itoa(s.cfg.Slots), "--min-backoff", s.cfg.MinBackoff.String()}
	if s.cfg.BytesPerSecond > 0 {
		args = append(args, "--bandwidth", strconv.FormatFloat(float64(s.cfg.BytesPerSecond)/1e6, 'f', -1, 64))
	}
	podLabels := map[string]string{labelModelDownload: s.instance}
	for k, v := range s.labels {
		if k != runtime.LabelManaged && k != runtime.LabelDataDir {
			podLabels[k] = v
		}
	}
	c := corev1.Container{
		Name: container, Image: s.image, Args: args,
		Env: []corev1.EnvVar{{Name: modelsTokenKey, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: modelsTokenSecret}, Key: modelsTokenKey, Optional: ptr(true)}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "models", MountPath: runtime.ModelsTarget}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			EnableServiceLinks:           ptr(false),
			AutomountServiceAccountToken: ptr(false),
			// Berth's image runs as 65532: the claim's files are its
			// group's where the volume type allows.
			SecurityContext: &corev1.PodSecurityContext{FSGroup: ptr(int64(65532))},
			Containers:      []corev1.Container{c},
			Volumes: []corev1.Volume{{Name: "models", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ModelsClaim}}}},
		},
	}
	if s.template != nil {
		// Its node selector, tolerations and affinity place the download
		// where the workers run (a ReadWriteOnce claim: one node).
		if err := s.template(pod); err != nil {
			return nil, fmt.Errorf("the download Job's Pod: %w", err)
		}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace, Labels: s.labels,
			Annotations: map[string]string{annModelRef: s.ref.String(), annModelAttempt: strconv.Itoa(s.attempt)}},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr(int32(3)),
			Template:     corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec},
		},
	}, nil
}

// deleteJob deletes j and waits until the informer shows it gone, so the
// next pass does not take it for one still there.
func (m *Models) deleteJob(ctx context.Context, j *batchv1.Job) {
	err := m.b.cs.BatchV1().Jobs(m.b.cfg.Namespace).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)})
	if err != nil && !apierrors.IsNotFound(err) {
		if ctx.Err() == nil {
			m.log.Warn("delete a model download job", "job", j.Name, "err", err)
		}
		return
	}
	m.waitJobs(ctx, func() bool { return !m.cached(j.Name, j.UID) })
}

// cached says the Job informer holds Job name with that UID.
func (m *Models) cached(name string, uid types.UID) bool {
	j, err := m.jobs.Jobs(m.b.cfg.Namespace).Get(name)
	return err == nil && j.UID == uid
}

// jobCacheWait bounds how long a pass waits for the Job informer to show
// its own write (a broken watch: the pass goes on, as List would).
const jobCacheWait = 10 * time.Second

// waitJobs waits, on the Job informer's changes, until cond holds (the
// cache shows a Job the pass made or deleted), jobCacheWait passes or ctx
// ends.
func (m *Models) waitJobs(ctx context.Context, cond func() bool) {
	t := time.NewTimer(jobCacheWait)
	defer t.Stop()
	for {
		m.mu.Lock()
		ch := m.jobEvent
		m.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-t.C:
			m.log.Warn("the model download jobs' informer did not show a change in time")
			return
		case <-ctx.Done():
			return
		}
	}
}

// downloadPods are the download Jobs' Pods by Job, the newest of each
// (from the informer).
func (m *Models) downloadPods() map[string]*corev1.Pod {
	out := map[string]*corev1.Pod{}
	l, err := m.pods.Pods(m.b.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return out
	}
	for _, p := range l {
		job := p.Labels[batchv1.JobNameLabel]
		if cur := out[job]; job != "" && (cur == nil || cur.CreationTimestamp.Before(&p.CreationTimestamp)) {
			out[job] = p
		}
	}
	return out
}

// readLog: the Pod's log is read while it runs and once it ended (the
// Job not yet marked complete).
func readLog(j *batchv1.Job, p *corev1.Pod) bool {
	return p != nil && !jobDone(j) && p.Status.Phase != corev1.PodPending
}

// lastLine is the last progress line of the download Pod's log.
func (m *Models) lastLine(ctx context.Context, pod string, ref hfcache.Ref) (hfcache.Progress, bool) {
	rc, err := m.b.cs.CoreV1().Pods(m.b.cfg.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, TailLines: ptr(int64(5))}).Stream(ctx)
	if err != nil {
		return hfcache.Progress{}, false
	}
	defer rc.Close()
	return hfcache.LastLine(io.LimitReader(rc, 1<<20), ref)
}

// commitOf is the commit a complete Job's log said (read once; "" when
// its Pod is gone).
func (m *Models) commitOf(ctx context.Context, j *batchv1.Job, ref hfcache.Ref) string {
	if jobFailed(j) {
		return ""
	}
	m.mu.Lock()
	c, ok := m.commits[string(j.UID)]
	m.mu.Unlock()
	if ok {
		return c
	}
	pods := m.downloadPods()
	if p := pods[j.Name]; p != nil {
		if l, ok := m.lastLine(ctx, p.Name, ref); ok {
			c = l.Commit
		}
	}
	m.mu.Lock()
	m.commits[string(j.UID)] = c
	m.mu.Unlock()
	return c
}

// modelIn is what modelStep decides from.
type modelIn struct {
	ref       hfcache.Ref
	job       *batchv1.Job // nil: none
	pod       *corev1.Pod  // the Job's newest Pod, nil: none
	line      hfcache.Progress
	hasLine   bool
	claimWait string // why the models claim keeps a Pending Pod
	noImage   string // why there is no image for the Job ("": there is)
	now       time.Time
	backoff   time.Duration // the first wait before a failed Job is made again
	retry     bool          // make failed Jobs again now
}

type modelAction int

const (
	actNone   modelAction = iota
	actCreate             // make the Job
	actDelete             // delete the failed Job (made again next pass)
)

// modelStep decides one wanted model's progress and what to do about its
// Job:
//
//   - no Job: make one (none without an image: pending, saying why);
//   - complete: ready;
//   - failed (its Pods failed 4 times: crashed, evicted, OOM-killed — a
//     download error does not fail the Pod, the program retries it):
//     failed with the Job's reason, deleted once its back-off passed
//     (doubling with each Job made again, at most 5 minutes) so a new
//     one starts;
//   - its Pod pending: why (the claim, the scheduler, the image pull);
//   - running: the program's last progress line.
func modelStep(in modelIn) (hfcache.Progress, modelAction) {
	p := hfcache.Progress{Ref: in.ref, State: hfcache.Pending}
	j := in.job
	switch {
	case j == nil && in.noImage != "":
		p.Error = in.noImage
		return p, actNone
	case j == nil:
		return p, actCreate
	case jobComplete(j):
		p.State, p.Commit = hfcache.Ready, in.line.Commit
		return p, actNone
	case jobFailed(j):
		attempt := jobAttempt(j)
		wait := in.backoff << min(attempt, 10)
		wait = min(wait, maxJobBackoff)
		since := in.now
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				since = c.LastTransitionTime.Time
				p.Error = "its download Job failed: " + c.Reason + ": " + c.Message
			}
		}
		p.State, p.Attempts, p.RetryAt = hfcache.Failed, attempt+1, since.Add(wait)
		if in.retry || !in.now.Before(p.RetryAt) {
			return p, actDelete
		}
		return p, actNone
	}
	if in.hasLine {
		p = in.line
		if p.State == hfcache.Ready && (in.pod == nil || in.pod.Status.Phase != corev1.PodSucceeded) {
			p.State = hfcache.Downloading // complete once the program exited 0
		}
		return p, actNone
	}
	pod := in.pod
	switch {
	case pod == nil:
		p.Error = "its download Job starts a Pod"
	case pod.Status.Phase == corev1.PodPending:
		p.Error = "its download Pod " + pod.Name + " is pending" + podWaitReason(pod, in.claimWait)
	case pod.Status.Phase == corev1.PodFailed:
		p.Error = "its download Pod " + pod.Name + " failed" + exitReason(pod) + "; the Job starts another"
	default:
		p.State = hfcache.Downloading
	}
	return p, actNone
}

// podWaitReason says why a Pending Pod waits: ": REASON" or "".
func podWaitReason(p *corev1.Pod, claim string) string {
	if claim != "" {
		return ": " + claim
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
			return ": " + w.Reason + ": " + w.Message
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			return ": not scheduled: " + c.Message
		}
	}
	return ""
}

// exitReason is " (exit N: REASON)" of a Pod's ended container.
func exitReason(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf(" (exit %d: %s)", t.ExitCode, t.Reason)
		}
	}
	return ""
}

func jobCondition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func jobComplete(j *batchv1.Job) bool { return jobCondition(j, batchv1.JobComplete) }
func jobFailed(j *batchv1.Job) bool   { return jobCondition(j, batchv1.JobFailed) }
func jobDone(j *batchv1.Job) bool     { return jobComplete(j) || jobFailed(j) }

func jobAttempt(j *batchv1.Job) int {
	n, _ := strconv.Atoi(j.Annotations[annModelAttempt])
	return n
}
