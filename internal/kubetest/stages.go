package kubetest

import (
	"fmt"
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

const (
	// KubeletAnnotation on a Pod (any value) tells kwok to leave it alone:
	// the test is its kubelet and writes its status (see Kubelet).
	KubeletAnnotation = "kubetest.berth.dev/kubelet"
	// TestKubeletPrefix names the nodes whose kubelet is the test
	// (NodeSpec.TestKubelet): kwok keeps the node Ready and its lease
	// renewed, but does not touch the pods bound to it.
	TestKubeletPrefix = "testkubelet-"
)

// testKubeletSelector excludes from a pod stage the pods whose kubelet is
// the test. Keys are jq expressions on the Pod; a null nodeName (not yet
// bound) is read as "".
var testKubeletSelector = fmt.Sprintf(`    - key: '.metadata.annotations["%s"]'
      operator: 'DoesNotExist'
    - key: '(.spec.nodeName // "") | startswith("%s")'
      operator: 'In'
      values:
      - 'false'
`, KubeletAnnotation, TestKubeletPrefix)

// kwokStages returns kwok's configuration: its own "fast" stages (nodes
// become Ready at once; pods run as soon as they are bound and vanish when
// deleted), the pod stages narrowed by testKubeletSelector. The Job-only
// pod-complete stage is left out: Berth runs no Jobs.
func kwokStages() (string, error) {
	ready, err := excludeTestKubelet(podfast.DefaultPodReady)
	if err != nil {
		return "", err
	}
	del, err := excludeTestKubelet(podfast.DefaultPodDelete)
	if err != nil {
		return "", err
	}
	return strings.Join([]string{nodefast.DefaultNodeInit, ready, del}, "\n---\n"), nil
}

func excludeTestKubelet(stage string) (string, error) {
	const anchor = "    matchExpressions:\n"
	i := strings.Index(stage, anchor)
	if i < 0 || strings.Count(stage, anchor) != 1 {
		return "", fmt.Errorf("kwok stage without one %q: cannot narrow it:\n%s", strings.TrimSpace(anchor), stage)
	}
	i += len(anchor)
	return stage[:i] + testKubeletSelector + stage[i:], nil
}
