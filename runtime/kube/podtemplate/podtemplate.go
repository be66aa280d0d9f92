// Package podtemplate is the operator's Pod template of the Kubernetes
// runtime (berth serve --kube-pod-template FILE): a core/v1
// PodTemplateSpec in YAML or JSON whose few allowed fields are merged into
// every Pod Berth makes (docs/kubernetes.md, "Operator Pod template").
//
// It is pure (no client, no cluster) and apart from runtime/kube so that
// deploy/kubernetes' tests can check the example they ship without
// linking the GPU library.
package podtemplate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	strictjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Container is the name of the one container of Berth's Pods, the only
// one a template may name.
const Container = "main"

// FieldError is a template refused: the field (its path in the file, e.g.
// spec.containers[0].image) and why.
type FieldError struct {
	Field, Msg string
}

func (e *FieldError) Error() string { return "pod template: " + e.Field + ": " + e.Msg }

func refuse(field, format string, a ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// Template is a checked operator's template. The zero Template (and a nil
// one) adds nothing but the defaults.
type Template struct {
	spec corev1.PodTemplateSpec
}

// allowed is what a template may set, by path; true marks a field taken
// whole (its content is checked by the typed decoding and Parse's rules),
// a map the fields allowed inside.
var allowed = map[string]any{
	"metadata": map[string]any{"labels": true, "annotations": true},
	"spec": map[string]any{
		"runtimeClassName": true, "priorityClassName": true, "tolerations": true, "nodeSelector": true,
		"affinity": true, "securityContext": true, "volumes": true, "imagePullSecrets": true,
		"containers": map[string]any{"name": true, "securityContext": true, "imagePullPolicy": true, "volumeMounts": true,
			"resources": map[string]any{"requests": true, "limits": true}},
	},
}

// AllowedFields lists the fields a template may set, for messages and docs.
const AllowedFields = "metadata.labels, metadata.annotations, spec.runtimeClassName, spec.priorityClassName, " +
	"spec.tolerations, spec.nodeSelector, spec.affinity, spec.securityContext, spec.volumes, spec.imagePullSecrets, " +
	"and of spec.containers[0] (named main): securityContext, imagePullPolicy, volumeMounts, resources (cpu and memory)"

// Berth's own labels and annotations: adoption and accounting read them.
var ownLabels = []string{
	"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component", "app.kubernetes.io/managed-by",
}

func berthKey(k string) bool { return strings.HasPrefix(k, "berth.") || slices.Contains(ownLabels, k) }

// Berth's volumes: dshm (/dev/shm) and vol-N (volume claims).
var berthVolume = regexp.MustCompile(`^(dshm|vol-[0-9]+)$`)

// reservedPaths are where Berth mounts its volumes (a pod's volume path
// is its own and is checked when its Pod is made).
var reservedPaths = []string{"/dev/shm", "/runpod-volume", "/workspace"}

// Load reads and parses the template file.
func Load(file string) (*Template, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("pod template: %w", err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return t, nil
}

// Parse checks a template: YAML or JSON, strictly (a field Kubernetes
// does not know, or one given twice, is refused), only the allowed fields,
// and none of what Berth sets itself. Errors are *FieldError naming the
// field (a YAML syntax error excepted).
func Parse(data []byte) (*Template, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("pod template: %w", err)
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || string(js) == "null" {
		return &Template{}, nil
	}
	// Typed first: a misspelt field is unknown rather than not allowed.
	var t Template
	strict, err := strictjson.UnmarshalStrict(js, &t.spec, strictjson.DisallowDuplicateFields, strictjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("pod template: %w", err)
	}
	if len(strict) > 0 {
		return nil, strictError(strict[0])
	}
	var raw map[string]any
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("pod template: %w", err)
	}
	if err := walk("", raw, allowed); err != nil {
		return nil, err
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return &t, nil
}

// strictError names the field of sigs.k8s.io/json's `unknown field "a.b"`.
func strictError(err error) error {
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return &FieldError{Field: strings.Trim(f, `"`), Msg: "not a field of a Pod template (spelling and case matter)"}
	}
	if f, ok := strings.CutPrefix(msg, "duplicate field "); ok {
		return &FieldError{Field: strings.Trim(f, `"`), Msg: "given twice"}
	}
	return fmt.Errorf("pod template: %w", err)
}

// walk refuses the keys of v not in allow (recursing into lists).
func walk(at string, v any, allow map[string]any) error {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			field := k
			if at != "" {
				field = at + "." + k
			}
			switch a := allow[k].(type) {
			case bool:
			case map[string]any:
				if err := walk(field, v[k], a); err != nil {
					return err
				}
			default:
				return refuse(field, "not allowed in the pod template: Berth or the cluster sets it (a template may set %s)", AllowedFields)
			}
		}
	case []any:
		for i, e := range v {
			if err := walk(fmt.Sprintf("%s[%d]", at, i), e, allow); err != nil {
				return err
			}
		}
	case nil:
	default:
		return refuse(at, "must be an object")
	}
	return nil
}

// check applies the rules the typed decoding cannot.
func (t *Template) check() error {
	for _, k := range slices.Sorted(maps.Keys(t.spec.Labels)) {
		f := "metadata.labels." + k
		if berthKey(k) {
			return refuse(f, "Berth sets this label (its adoption and selectors read it)")
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return refuse(f, "not a label key: %s", strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(t.spec.Labels[k]); len(errs) > 0 {
			return refuse(f, "not a label value: %s", strings.Join(errs, "; "))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(t.spec.Annotations)) {
		f := "metadata.annotations." + k
		if berthKey(k) {
			return refuse(f, "Berth sets this annotation")
		}
		if errs := validation.IsQualifiedName(strings.ToLower(k)); len(errs) > 0 {
			return refuse(f, "not an annotation key: %s", strings.Join(errs, "; "))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(t.spec.Spec.NodeSelector)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return refuse("spec.nodeSelector."+k, "not a label key: %s", strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(t.spec.Spec.NodeSelector[k]); len(errs) > 0 {
			return refuse("spec.nodeSelector."+k, "not a label value: %s", strings.Join(errs, "; "))
		}
	}
	for _, n := range []struct{ field, v string }{{"spec.runtimeClassName", deref(t.spec.Spec.RuntimeClassName)}, {"spec.priorityClassName", t.spec.Spec.PriorityClassName}} {
		if n.v == "" {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(n.v); len(errs) > 0 {
			return refuse(n.field, "not an object name: %s", strings.Join(errs, "; "))
		}
	}
	vols := map[string]bool{}
	for i, v := range t.spec.Spec.Volumes {
		f := fmt.Sprintf("spec.volumes[%d].name", i)
		switch {
		case berthVolume.MatchString(v.Name):
			return refuse(f, "%q is the name of a volume Berth makes (dshm, vol-N)", v.Name)
		case vols[v.Name]:
			return refuse(f, "%q is given twice", v.Name)
		}
		if errs := validation.IsDNS1123Label(v.Name); len(errs) > 0 {
			return refuse(f, "not a volume name: %s", strings.Join(errs, "; "))
		}
		vols[v.Name] = true
	}
	switch n := len(t.spec.Spec.Containers); {
	case n > 1:
		return refuse("spec.containers", "Berth's Pods have one container, %q: the template may describe only it", Container)
	case n == 1:
		c := &t.spec.Spec.Containers[0]
		if c.Name != "" && c.Name != Container {
			return refuse("spec.containers[0].name", "Berth's container is %q, not %q", Container, c.Name)
		}
		switch c.ImagePullPolicy {
		case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		default:
			return refuse("spec.containers[0].imagePullPolicy", "must be Always, IfNotPresent or Never, not %q", c.ImagePullPolicy)
		}
		for _, rl := range []struct {
			field string
			list  corev1.ResourceList
		}{{"requests", c.Resources.Requests}, {"limits", c.Resources.Limits}} {
			for _, name := range slices.Sorted(maps.Keys(rl.list)) {
				if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
					return refuse("spec.containers[0].resources."+rl.field+"."+string(name), "only cpu and memory: Berth sets the GPUs and ephemeral storage from the endpoint")
				}
				if q := rl.list[name]; q.Sign() <= 0 {
					return refuse("spec.containers[0].resources."+rl.field+"."+string(name), "must be more than 0, not %s", q.String())
				}
			}
		}
		for name, req := range c.Resources.Requests {
			if lim, ok := c.Resources.Limits[name]; ok && req.Cmp(lim) > 0 {
				return refuse("spec.containers[0].resources.requests."+string(name), "%s is more than its limit %s", req.String(), lim.String())
			}
		}
		var paths []string
		for i, m := range c.VolumeMounts {
			f := fmt.Sprintf("spec.containers[0].volumeMounts[%d]", i)
			if !vols[m.Name] {
				return refuse(f+".name", "%q is not one of the template's volumes", m.Name)
			}
			if !path.IsAbs(m.MountPath) {
				return refuse(f+".mountPath", "%q is not an absolute path", m.MountPath)
			}
			if p := overlap(m.MountPath, reservedPaths); p != "" {
				return refuse(f+".mountPath", "%q would hide or sit in %s, where Berth mounts its own volume", m.MountPath, p)
			}
			if p := overlap(m.MountPath, paths); p != "" {
				return refuse(f+".mountPath", "%q overlaps the template's mount at %s", m.MountPath, p)
			}
			paths = append(paths, m.MountPath)
		}
	}
	return nil
}

// overlap is the first of paths that p equals, contains or is inside, "".
func overlap(p string, paths []string) string {
	p = path.Clean(p)
	for _, q := range paths {
		q = path.Clean(q)
		if p == q || p == "/" || q == "/" || strings.HasPrefix(p, q+"/") || strings.HasPrefix(q, p+"/") {
			return q
		}
	}
	return ""
}

// Apply merges the template into pod, Berth's Pod (one or more containers,
// each getting the container settings), and sets the defaults where
// neither says otherwise:
//
//   - labels, annotations, nodeSelector: added; a key Berth set to another
//     value is an error;
//   - runtimeClassName, priorityClassName: set (an error if Berth set
//     another);
//   - tolerations, imagePullSecrets, volumes and the container's
//     volumeMounts: added to Berth's (a volume name or mount path of
//     Berth's is an error);
//   - affinity: the template's required node terms are each combined
//     (AND) with Berth's (the GPU product), preferred terms and pod
//     (anti-)affinity added;
//   - securityContext (Pod and container), imagePullPolicy: the
//     template's; then the defaults fill what is unset: the Pod's
//     seccompProfile RuntimeDefault and the container's
//     allowPrivilegeEscalation false (not for a privileged container or
//     one adding CAP_SYS_ADMIN, which the API server would refuse).
//
// The template is not changed; pod is changed even on error.
func (t *Template) Apply(pod *corev1.Pod) error {
	var s corev1.PodTemplateSpec
	if t != nil {
		s = t.spec
	}
	var err error
	if pod.Labels, err = addKeys("metadata.labels", pod.Labels, s.Labels); err != nil {
		return err
	}
	if pod.Annotations, err = addKeys("metadata.annotations", pod.Annotations, s.Annotations); err != nil {
		return err
	}
	if pod.Spec.NodeSelector, err = addKeys("spec.nodeSelector", pod.Spec.NodeSelector, s.Spec.NodeSelector); err != nil {
		return err
	}
	if v := deref(s.Spec.RuntimeClassName); v != "" {
		if got := pod.Spec.RuntimeClassName; got != nil && *got != v {
			return refuse("spec.runtimeClassName", "Berth set %q", *got)
		}
		pod.Spec.RuntimeClassName = &v
	}
	if v := s.Spec.PriorityClassName; v != "" {
		if got := pod.Spec.PriorityClassName; got != "" && got != v {
			return refuse("spec.priorityClassName", "Berth set %q", got)
		}
		pod.Spec.PriorityClassName = v
	}
	for _, tol := range s.Spec.Tolerations {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(x corev1.Toleration) bool { return x.MatchToleration(&tol) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, *tol.DeepCopy())
		}
	}
	for _, r := range s.Spec.ImagePullSecrets {
		if !slices.Contains(pod.Spec.ImagePullSecrets, r) {
			pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, r)
		}
	}
	pod.Spec.Affinity = mergeAffinity(pod.Spec.Affinity, s.Spec.Affinity)
	for i, v := range s.Spec.Volumes {
		if slices.ContainsFunc(pod.Spec.Volumes, func(x corev1.Volume) bool { return x.Name == v.Name }) {
			return refuse(fmt.Sprintf("spec.volumes[%d].name", i), "%q is a volume of Berth's Pod", v.Name)
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes, *v.DeepCopy())
	}
	if s.Spec.SecurityContext != nil {
		pod.Spec.SecurityContext = s.Spec.SecurityContext.DeepCopy()
	}
	if pod.Spec.SecurityContext == nil {
		pod.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if pod.Spec.SecurityContext.SeccompProfile == nil {
		pod.Spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	var tc corev1.Container
	if len(s.Spec.Containers) > 0 {
		tc = s.Spec.Containers[0]
	}
	for ci := range pod.Spec.Containers {
		c := &pod.Spec.Containers[ci]
		if tc.ImagePullPolicy != "" {
			c.ImagePullPolicy = tc.ImagePullPolicy
		}
		applyResources(c, tc.Resources)
		for i, m := range tc.VolumeMounts {
			var berth []string
			for _, x := range c.VolumeMounts {
				berth = append(berth, x.MountPath)
			}
			if p := overlap(m.MountPath, berth); p != "" {
				return refuse(fmt.Sprintf("spec.containers[0].volumeMounts[%d].mountPath", i), "%q overlaps %s, where Berth mounts a volume of this Pod", m.MountPath, p)
			}
			c.VolumeMounts = append(c.VolumeMounts, *m.DeepCopy())
		}
		if tc.SecurityContext != nil {
			c.SecurityContext = tc.SecurityContext.DeepCopy()
		}
		if c.SecurityContext == nil {
			c.SecurityContext = &corev1.SecurityContext{}
		}
		if sc := c.SecurityContext; sc.AllowPrivilegeEscalation == nil && !mayEscalate(sc) {
			no := false
			sc.AllowPrivilegeEscalation = &no
		}
	}
	return nil
}

// applyResources puts the template's cpu and memory on c: a request
// replaces Berth's (its rule per GPU or CPU shape); a limit is set, and
// lowers Berth's request to it when the template gives no request (a
// request above its limit is refused by the API server).
func applyResources(c *corev1.Container, tr corev1.ResourceRequirements) {
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := tr.Requests[name]; ok {
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			c.Resources.Requests[name] = q.DeepCopy()
		}
		lim, ok := tr.Limits[name]
		if !ok {
			continue
		}
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		c.Resources.Limits[name] = lim.DeepCopy()
		if req, ok := c.Resources.Requests[name]; ok && req.Cmp(lim) > 0 {
			c.Resources.Requests[name] = lim.DeepCopy()
		}
	}
}

// mayEscalate: the API server refuses allowPrivilegeEscalation false with
// these.
func mayEscalate(sc *corev1.SecurityContext) bool {
	if sc.Privileged != nil && *sc.Privileged {
		return true
	}
	return sc.Capabilities != nil && slices.ContainsFunc(sc.Capabilities.Add, func(c corev1.Capability) bool {
		return strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_") == "SYS_ADMIN"
	})
}

// addKeys adds add to to (a key to holds with another value is an error).
func addKeys(field string, to, add map[string]string) (map[string]string, error) {
	if len(add) == 0 {
		return to, nil
	}
	if to == nil {
		to = map[string]string{}
	}
	keys := slices.Collect(maps.Keys(add))
	sort.Strings(keys)
	for _, k := range keys {
		if got, ok := to[k]; ok && got != add[k] {
			return nil, refuse(field+"."+k, "Berth sets %q here, the template %q", got, add[k])
		}
		to[k] = add[k]
	}
	return to, nil
}

// mergeAffinity is Berth's affinity with the template's added (see Apply).
func mergeAffinity(berth, tpl *corev1.Affinity) *corev1.Affinity {
	if tpl == nil {
		return berth
	}
	if berth == nil {
		return tpl.DeepCopy()
	}
	out := berth.DeepCopy()
	if tn := tpl.NodeAffinity; tn != nil {
		if out.NodeAffinity == nil {
			out.NodeAffinity = &corev1.NodeAffinity{}
		}
		na := out.NodeAffinity
		if req := tn.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
			if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
				na.RequiredDuringSchedulingIgnoredDuringExecution = req.DeepCopy()
			} else {
				// Terms are ORed, a term's requirements ANDed: (B1 or B2)
				// and (T1 or T2) is each Bi and Tj.
				var terms []corev1.NodeSelectorTerm
				for _, b := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
					for _, t := range req.NodeSelectorTerms {
						x := b.DeepCopy()
						x.MatchExpressions = append(x.MatchExpressions, t.DeepCopy().MatchExpressions...)
						x.MatchFields = append(x.MatchFields, t.DeepCopy().MatchFields...)
						terms = append(terms, *x)
					}
				}
				na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = terms
			}
		}
		for _, p := range tn.PreferredDuringSchedulingIgnoredDuringExecution {
			na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, *p.DeepCopy())
		}
	}
	if pa := tpl.PodAffinity; pa != nil {
		if out.PodAffinity == nil {
			out.PodAffinity = &corev1.PodAffinity{}
		}
		out.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(out.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, pa.DeepCopy().RequiredDuringSchedulingIgnoredDuringExecution...)
		out.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(out.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution, pa.DeepCopy().PreferredDuringSchedulingIgnoredDuringExecution...)
	}
	if pa := tpl.PodAntiAffinity; pa != nil {
		if out.PodAntiAffinity == nil {
			out.PodAntiAffinity = &corev1.PodAntiAffinity{}
		}
		out.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(out.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, pa.DeepCopy().RequiredDuringSchedulingIgnoredDuringExecution...)
		out.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(out.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, pa.DeepCopy().PreferredDuringSchedulingIgnoredDuringExecution...)
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Admits says whether the template lets a Pod onto node: its nodeSelector
// and required node affinity, as the scheduler reads them. Berth gives no
// GPU of a node it does not admit (its slots are unschedulable, as a
// cordoned node's). Taints are left to the scheduler: a Pod they keep out
// waits Unschedulable with the scheduler's words.
func (t *Template) Admits(node *corev1.Node) bool {
	if t == nil {
		return true
	}
	for k, v := range t.spec.Spec.NodeSelector {
		if got, ok := node.Labels[k]; !ok || got != v {
			return false
		}
	}
	a := t.spec.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	// Terms are ORed; a term with no requirement matches nothing.
	return slices.ContainsFunc(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, func(term corev1.NodeSelectorTerm) bool {
		if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
			return false
		}
		for _, r := range term.MatchExpressions {
			if !requirementHolds(r, node.Labels) {
				return false
			}
		}
		for _, r := range term.MatchFields {
			if r.Key != "metadata.name" || !requirementHolds(r, map[string]string{r.Key: node.Name}) {
				return false
			}
		}
		return true
	})
}

// requirementHolds is one node selector requirement against labels.
func requirementHolds(r corev1.NodeSelectorRequirement, lbls map[string]string) bool {
	v, ok := lbls[r.Key]
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return ok && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !ok || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return ok
	case corev1.NodeSelectorOpDoesNotExist:
		return !ok
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !ok || len(r.Values) != 1 {
			return false
		}
		have, err1 := strconv.ParseInt(v, 10, 64)
		want, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == corev1.NodeSelectorOpGt {
			return have > want
		}
		return have < want
	}
	return false
}
