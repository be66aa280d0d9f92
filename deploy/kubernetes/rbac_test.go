package kubernetes_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// grant is one permission: a verb on a resource of an API group, in
// Berth's namespace (the Role) or cluster-wide (the ClusterRole).
type grant struct {
	Cluster  bool
	Group    string
	Resource string // with its subresource: pods/log
	Verb     string
}

func (g grant) String() string {
	scope := "namespace"
	if g.Cluster {
		scope = "cluster"
	}
	group := g.Group
	if group == "" {
		group = "core"
	}
	return fmt.Sprintf("%s %s %s/%s", scope, g.Verb, group, g.Resource)
}

// The kubernetes runtime's API calls are derived from its source, type
// checked: every method of a typed client (CoreV1().Secrets(ns).Get …) and
// every informer (list and watch, in the scope of its factory). The
// manifests must grant each of them and nothing else. Derived from the
// code rather than from the e2e suite's audit log because a call on a rare
// path (a pull Secret updated when its login changes, a Service of an
// earlier Pod replaced) counts as much as a common one, and a test run of a
// few tests must not find the rest "unused". The e2e suite runs Berth as
// the manifests' ServiceAccount too: what it exercises is checked against
// the real API server's RBAC.
func TestRBACGrantsExactlyTheVerbsUsed(t *testing.T) {
	used := kubeRuntimeCalls(t, "berth/runtime/kube")
	if !slices.Contains(used, grant{Resource: "pods", Verb: "create"}) {
		t.Fatalf("the analysis found no pod create in runtime/kube (found %v): it no longer reads the code", used)
	}
	var granted []grant
	for _, o := range render(t) {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		var role rbacv1.ClusterRole // a Role's rules have the same shape
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		for _, r := range role.Rules {
			if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
				t.Errorf("%s %s: resourceNames or nonResourceURLs: this test does not read them", o.GetKind(), o.GetName())
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						granted = append(granted, grant{Cluster: o.GetKind() == "ClusterRole", Group: g, Resource: res, Verb: v})
					}
				}
			}
		}
	}
	for _, u := range used {
		ok := slices.Contains(granted, grant{Cluster: true, Group: u.Group, Resource: u.Resource, Verb: u.Verb})
		if !u.Cluster {
			ok = ok || slices.Contains(granted, u)
		}
		if !ok {
			t.Errorf("runtime/kube uses %v; deploy/kubernetes/rbac.yaml does not grant it", u)
		}
	}
	for _, g := range granted {
		if !slices.Contains(used, g) {
			t.Errorf("deploy/kubernetes/rbac.yaml grants %v; runtime/kube never uses it", g)
		}
	}
}

// kubeRuntimeCalls type-checks the non-test files of pkg (its imports
// read from the build's export data) and returns the API requests its
// client-go calls can make.
func kubeRuntimeCalls(t *testing.T, pkg string) []grant {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}\t{{.Dir}}\t{{join .GoFiles \" \"}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	exports := map[string]string{}
	var dir string
	var files []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 4)
		exports[f[0]] = f[1]
		if f[0] == pkg {
			dir, files = f[2], strings.Fields(f[3])
		}
	}
	fset := token.NewFileSet()
	var syntax []*ast.File
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		syntax = append(syntax, f)
	}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}, Uses: map[*ast.Ident]types.Object{},
		Defs: map[*ast.Ident]types.Object{}, Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})}
	if _, err := conf.Check(pkg, fset, syntax, info); err != nil {
		t.Fatalf("type-check %s: %v", pkg, err)
	}

	// Which informer factories watch one namespace.
	namespaced := map[types.Object]bool{}
	for _, f := range syntax {
		ast.Inspect(f, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok || len(as.Lhs) != len(as.Rhs) {
				return true
			}
			for i, rhs := range as.Rhs {
				call, ok := rhs.(*ast.CallExpr)
				if !ok || !isFunc(info, call.Fun, "k8s.io/client-go/informers", "NewSharedInformerFactory", "NewSharedInformerFactoryWithOptions") {
					continue
				}
				id, _ := as.Lhs[i].(*ast.Ident)
				obj := info.Defs[id]
				if obj == nil {
					obj = info.Uses[id]
				}
				ns := false
				for _, a := range call.Args {
					if c, ok := a.(*ast.CallExpr); ok && isFunc(info, c.Fun, "k8s.io/client-go/informers", "WithNamespace") {
						ns = true
					}
				}
				namespaced[obj] = ns
			}
			return true
		})
	}

	var used []grant
	add := func(g grant) {
		if !slices.Contains(used, g) {
			used = append(used, g)
		}
	}
	for _, f := range syntax {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			s := info.Selections[sel]
			if s == nil {
				return true
			}
			recv := s.Recv()
			if p, ok := recv.(*types.Pointer); ok {
				recv = p.Elem()
			}
			named, ok := recv.(*types.Named)
			if !ok || named.Obj().Pkg() == nil {
				return true
			}
			path, typ, method := named.Obj().Pkg().Path(), named.Obj().Name(), sel.Sel.Name
			pos := fset.Position(call.Pos())
			switch {
			case strings.HasPrefix(path, "k8s.io/client-go/kubernetes/typed/") && strings.HasSuffix(typ, "Interface") && !strings.HasSuffix(typ, "Getter"):
				kind := strings.TrimSuffix(typ, "Interface")
				group := apiGroup(t, strings.TrimPrefix(path, "k8s.io/client-go/kubernetes/typed/"))
				if strings.HasSuffix(kind, "V1") || strings.HasSuffix(kind, "V1beta1") {
					// A group's client (CoreV1Interface): its methods pick a
					// resource; RESTClient would bypass this analysis.
					if method == "RESTClient" {
						t.Errorf("%s: a raw REST client: this test cannot tell its requests", pos)
					}
					return true
				}
				// A resource's client: the namespace is an argument of the
				// getter (Pods(ns)); cluster-scoped kinds have none.
				g := grant{Cluster: !namespacedKind(kind), Group: group, Resource: plural(kind), Verb: typedVerb(method)}
				switch {
				case method == "GetLogs":
					g.Resource, g.Verb = g.Resource+"/log", "get"
				case strings.HasSuffix(method, "Status"):
					g.Resource += "/status"
				case g.Verb == "":
					t.Errorf("%s: %s.%s: this test does not know its verb", pos, typ, method)
					return true
				}
				add(g)
			case strings.HasPrefix(path, "k8s.io/client-go/informers/") && typ == "Interface" && len(call.Args) == 0 && strings.Count(path, "/") == 4:
				// factory.Core().V1().Pods(): an informer, listing and
				// watching in its factory's scope.
				root := chainRoot(sel.X)
				obj := info.Uses[root]
				ns, known := namespaced[obj]
				if !known {
					t.Errorf("%s: an informer of a factory this test cannot trace", pos)
					return true
				}
				kind := strings.TrimSuffix(method, "s")
				if method == "Endpoints" {
					kind = method
				}
				group := apiGroup(t, strings.TrimPrefix(path, "k8s.io/client-go/informers/"))
				for _, v := range []string{"list", "watch"} {
					add(grant{Cluster: !ns || !namespacedKind(kind), Group: group, Resource: plural(kind), Verb: v})
				}
			}
			return true
		})
	}
	return used
}

func isFunc(info *types.Info, fun ast.Expr, pkg string, names ...string) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	f, ok := info.Uses[sel.Sel].(*types.Func)
	return ok && f.Pkg() != nil && f.Pkg().Path() == pkg && slices.Contains(names, f.Name())
}

// chainRoot is the identifier a chain of calls starts from: own in
// own.Core().V1().
func chainRoot(e ast.Expr) *ast.Ident {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			return x
		case *ast.CallExpr:
			e = x.Fun
		case *ast.SelectorExpr:
			e = x.X
		default:
			return nil
		}
	}
}

// apiGroup is the API group of a client-go package's group/version.
func apiGroup(t *testing.T, groupVersion string) string {
	group, _, _ := strings.Cut(groupVersion, "/")
	switch group {
	case "core":
		return ""
	case "apps", "batch", "autoscaling", "policy":
		return group
	case "events", "storage", "networking", "rbac", "scheduling", "node", "discovery", "coordination":
		return group + ".k8s.io"
	}
	t.Errorf("client-go group %q: add its API group", group)
	return group
}

func typedVerb(method string) string {
	switch method {
	case "Get", "List", "Watch", "Create", "Update", "Delete", "Patch":
		return strings.ToLower(method)
	case "UpdateStatus":
		return "update"
	case "ApplyStatus", "Apply":
		return "patch"
	case "DeleteCollection":
		return "deletecollection"
	case "GetLogs":
		return "get"
	}
	return ""
}

func namespacedKind(kind string) bool {
	switch kind {
	case "Node", "Namespace", "PersistentVolume", "StorageClass", "ClusterRole", "ClusterRoleBinding", "PriorityClass", "RuntimeClass":
		return false
	}
	return true
}

func plural(kind string) string {
	k := strings.ToLower(kind)
	switch {
	case k == "endpoints":
		return k
	case strings.HasSuffix(k, "s"):
		return k + "es"
	}
	return k + "s"
}
