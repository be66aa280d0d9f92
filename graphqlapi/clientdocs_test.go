package graphqlapi_test

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth/graphqlapi"
	"berth/internal/clientkit"
)

// The documents the real clients send, taken from their sources in
// ../shared/thirdparty (not from Berth's fixtures): every one must pass the
// schema's validation, so that what Berth refuses gets its own refusal
// from a resolver instead of "Unknown type" or "Cannot query field".

// runpodctlDocuments returns every GraphQL document in runpodctl's Go
// sources, by "file:line": backquoted literals that start with query or
// mutation, fmt.Sprintf'd ones with their package's string constants
// substituted.
func runpodctlDocuments(t *testing.T, src string) map[string]string {
	t.Helper()
	docs := map[string]string{}
	start := regexp.MustCompile(`^\s*(query|mutation)\b[^{]*\{`)
	pkgs := map[string][]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, files := range pkgs {
		consts := map[string]string{}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				vs, ok := n.(*ast.ValueSpec)
				if !ok {
					return true
				}
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if v, err := strconv.Unquote(lit.Value); err == nil {
								consts[name.Name] = v
							}
						}
					}
				}
				return true
			})
		}
		for _, f := range files {
			sprintfArgs := map[*ast.BasicLit][]ast.Expr{}
			ast.Inspect(f, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sprintf" && len(call.Args) > 1 {
						if lit, ok := call.Args[0].(*ast.BasicLit); ok {
							sprintfArgs[lit] = call.Args[1:]
						}
					}
				}
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				v, err := strconv.Unquote(lit.Value)
				if err != nil || !start.MatchString(v) {
					return true
				}
				if args, ok := sprintfArgs[lit]; ok {
					for _, a := range args {
						id, ok := a.(*ast.Ident)
						c, known := consts[id.Name]
						if !ok || !known {
							t.Errorf("%s: a Sprintf'd document with an argument that is not a string constant", fset.Position(lit.Pos()))
							return true
						}
						v = strings.Replace(v, "%s", c, 1)
					}
				}
				pos := fset.Position(lit.Pos())
				rel, _ := filepath.Rel(src, pos.Filename)
				docs[rel+":"+strconv.Itoa(pos.Line)] = v
				return true
			})
		}
	}
	return docs
}

// pythonDocuments runs testdata/runpod_python_docs.py: the documents
// runpod-python's generator modules make, by name.
func pythonDocuments(t *testing.T) map[string]string {
	t.Helper()
	sdk := clientkit.PythonSDK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := sdk.Command(ctx, map[string]string{"HOME": t.TempDir()}, "testdata/runpod_python_docs.py").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(interface{ Stderr() []byte }); ok {
			stderr = ee.Stderr()
		}
		t.Fatalf("runpod_python_docs.py: %v\n%s%s", err, out, stderr)
	}
	var docs map[string]string
	if err := json.Unmarshal(out, &docs); err != nil {
		t.Fatalf("runpod_python_docs.py output: %v\n%s", err, out)
	}
	return docs
}

var (
	placeholderRe = regexp.MustCompile(`\{\{[A-Za-z]+\}\}`)
	// graphql-go's Validate checks variable values too; the documents
	// come without them.
	noValueRe = regexp.MustCompile(`^graphql: Variable "[A-Za-z]+" has invalid value null\.`)
)

// validate is the schema's complaints about doc (its fixtures'
// placeholders filled in), less those about absent variable values.
func validate(h *graphqlapi.Handler, doc string) []string {
	doc = placeholderRe.ReplaceAllStringFunc(doc, func(p string) string {
		switch p {
		case "{{gpuCount}}":
			return "1"
		case "{{cloudType}}":
			return "ALL"
		}
		return "x"
	})
	var out []string
	for _, e := range h.Validate(doc) {
		if !noValueRe.MatchString(e.Error()) {
			out = append(out, e.Error())
		}
	}
	return out
}

func validator(t *testing.T) *graphqlapi.Handler {
	t.Helper()
	h, err := graphqlapi.New(graphqlapi.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestRunpodctlDocumentsValidate(t *testing.T) {
	src := filepath.Join(clientkit.Dir(t), clientkit.RunpodctlDir)
	docs := runpodctlDocuments(t, src)
	if len(docs) < 30 {
		t.Fatalf("found only %d documents in runpodctl's sources: the extraction is broken", len(docs))
	}
	h := validator(t)
	for _, at := range slices.Sorted(func(yield func(string) bool) {
		for k := range docs {
			if !yield(k) {
				return
			}
		}
	}) {
		if errs := validate(h, docs[at]); len(errs) > 0 {
			t.Errorf("runpodctl %s: %v\n%s", at, errs, docs[at])
		}
	}
	t.Logf("%d runpodctl documents validate", len(docs))
}

func TestRunpodPythonDocumentsValidate(t *testing.T) {
	docs := pythonDocuments(t)
	h := validator(t)
	for name, doc := range docs {
		if errs := validate(h, doc); len(errs) > 0 {
			t.Errorf("runpod-python %s: %v\n%s", name, errs, doc)
		}
	}
	t.Logf("%d runpod-python documents validate", len(docs))
}

// fixtureSources records where graphqlapi's fixtures come from.
type fixtureSources struct {
	RunpodPython struct {
		Version   string `json:"version"`
		Commit    string `json:"commit"`
		Documents []struct {
			File string `json:"file"`
			Doc  string `json:"doc"` // the name runpod_python_docs.py gives it
		} `json:"documents"`
	} `json:"runpod-python"`
	Runpodctl struct {
		Commit    string `json:"commit"`
		Documents []struct {
			File   string `json:"file"`
			Source string `json:"source"` // file in runpodctl's tree holding it verbatim
		} `json:"documents"`
	} `json:"runpodctl"`
}

func readSources(t *testing.T) fixtureSources {
	t.Helper()
	b, err := os.ReadFile("testdata/clients.json")
	if err != nil {
		t.Fatal(err)
	}
	var s fixtureSources
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFixturesMatchClients regenerates runpod-python's documents from its
// own generator modules and compares them with the fixtures the GraphQL
// tests replay, and finds each runpodctl fixture verbatim in its source:
// a client upgrade that changes what it sends fails here.
func TestFixturesMatchClients(t *testing.T) {
	src := readSources(t)
	dir := clientkit.Dir(t)
	if src.RunpodPython.Version != clientkit.PythonSDKVersion || src.Runpodctl.Commit != clientkit.RunpodctlCommit {
		t.Fatalf("testdata/clients.json records runpod-python %s and runpodctl %s; thirdparty has %s and %s: regenerate the fixtures",
			src.RunpodPython.Version, src.Runpodctl.Commit, clientkit.PythonSDKVersion, clientkit.RunpodctlCommit)
	}
	listed := map[string]bool{}
	docs := pythonDocuments(t)
	for _, d := range src.RunpodPython.Documents {
		listed["runpod-python/"+d.File] = true
		fix, err := os.ReadFile(filepath.Join("testdata/runpod-python", d.File))
		if err != nil {
			t.Error(err)
			continue
		}
		gen, ok := docs[d.Doc]
		if !ok {
			t.Errorf("%s: runpod_python_docs.py makes no document %q", d.File, d.Doc)
			continue
		}
		if strings.TrimSpace(gen) != strings.TrimSpace(string(fix)) {
			t.Errorf("runpod-python/%s differs from what runpod-python %s generates (%s):\n--- fixture\n%s\n--- generated\n%s", d.File, src.RunpodPython.Version, d.Doc, fix, gen)
		}
	}
	for _, d := range src.Runpodctl.Documents {
		listed["runpodctl/"+d.File] = true
		fix, err := os.ReadFile(filepath.Join("testdata/runpodctl", d.File))
		if err != nil {
			t.Error(err)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, clientkit.RunpodctlDir, d.Source))
		if err != nil {
			t.Errorf("%s: %v", d.File, err)
			continue
		}
		if !strings.Contains(string(b), strings.TrimSpace(string(fix))) {
			t.Errorf("runpodctl/%s is not verbatim in runpodctl %s's %s", d.File, src.Runpodctl.Commit, d.Source)
		}
	}
	// Every fixture is accounted for.
	for _, sub := range []string{"runpod-python", "runpodctl"} {
		files, _ := filepath.Glob(filepath.Join("testdata", sub, "*.graphql"))
		for _, f := range files {
			if !listed[sub+"/"+filepath.Base(f)] {
				t.Errorf("testdata/%s/%s is not in testdata/clients.json", sub, filepath.Base(f))
			}
		}
	}
}
