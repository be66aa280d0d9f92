package kubetest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// auditPolicy records, at the Metadata level, the requests of the admin
// identity — the tests' own set-up and every client that impersonates a
// ServiceAccount (code under test) — and nothing of kwok, the scheduler,
// the controller-manager, the API server's loopback client or health
// probes, so the log stays small. It is the outside instrument for what a
// client sends the API server (Cluster.Requests).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: [kwok, system:kube-scheduler, system:kube-controller-manager, system:apiserver]
- level: None
  userGroups: [system:serviceaccounts:kube-system, system:nodes]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
- level: Metadata
`

// auditFlags configures the API server's audit log in dir.
func auditFlags(dir string) ([]string, error) {
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, err
	}
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + filepath.Join(dir, "audit.log"),
		"--audit-log-format=json", "--audit-log-mode=blocking"}, nil
}

// Request is one request the API server received, from its audit log.
type Request struct {
	Time time.Time // received
	// User is who the request acted as: the impersonated identity when
	// there was one (e.g. system:serviceaccount:NS:berth), else the
	// authenticated user.
	User      string
	UserAgent string
	// Verb is the API verb: get, list, watch, create, update, patch,
	// delete, deletecollection (a non-resource request: the HTTP method,
	// lower case).
	Verb        string
	Resource    string // pods, services, nodes … ("" for a non-resource URL)
	Subresource string // log, status …
	Namespace   string
	Name        string
	URI         string
	Code        int // the response's status (0 for a watch: counted as it starts)
}

type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	URI       string `json:"requestURI"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	Impersonated *struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received time.Time `json:"requestReceivedTimestamp"`
}

// Requests reads the API server's audit log: every request of the admin
// identity and of the clients impersonating through it (code under test
// with Namespace.Config), in the order they completed — a watch as it
// starts. A request appears once the API server has answered it (a
// request just answered may be missing for a few milliseconds).
func (c *Cluster) Requests() ([]Request, error) {
	f, err := os.Open(filepath.Join(c.dir, "audit.log"))
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	var out []Request
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // a line being written
		}
		// A watch is logged as it starts (ResponseStarted) and as it
		// ends; other requests once, as they complete.
		if (ev.Verb == "watch") != (ev.Stage == "ResponseStarted") {
			continue
		}
		r := Request{Time: ev.Received, User: ev.User.Username, UserAgent: ev.UserAgent, Verb: ev.Verb, URI: ev.URI}
		if ev.Impersonated != nil && ev.Impersonated.Username != "" {
			r.User = ev.Impersonated.Username
		}
		if o := ev.ObjectRef; o != nil {
			r.Resource, r.Subresource, r.Namespace, r.Name = o.Resource, o.Subresource, o.Namespace, o.Name
		}
		if ev.ResponseStatus != nil && ev.Verb != "watch" {
			r.Code = ev.ResponseStatus.Code
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// By is the requests of reqs made as user (a Namespace's
// ServiceAccountUser: the code under test), in order.
func By(reqs []Request, user string) []Request {
	var out []Request
	for _, r := range reqs {
		if r.User == user {
			out = append(out, r)
		}
	}
	return out
}

// Kind is the request's verb and resource, "list pods" or "get pods/log".
func (r Request) Kind() string {
	if r.Subresource != "" {
		return r.Verb + " " + r.Resource + "/" + r.Subresource
	}
	return r.Verb + " " + r.Resource
}

// ServiceAccountUser is the user name of a ServiceAccount, as Requests
// reports it.
func (n *Namespace) ServiceAccountUser() string {
	return fmt.Sprintf("system:serviceaccount:%s:%s", n.Name, n.ServiceAccount)
}
