package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestReadmeMapNamesEveryDirectory: the README's map ("How it works") names
// every top-level directory and every directory holding a Go package, each
// under its parent, and names nothing that does not exist — so a newcomer
// finds where a thing belongs from the map alone.
func TestReadmeMapNamesEveryDirectory(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	mapped, err := readmeMap(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	top, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range top {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "berth-data" {
			want[e.Name()] = true
		}
	}
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	wd, _ := os.Getwd()
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(wd, dir)
		if err != nil || rel == "." {
			continue
		}
		want[filepath.ToSlash(rel)] = true
	}
	var missing, stale []string
	for d := range want {
		if !mapped[d] {
			missing = append(missing, d+"/")
		}
	}
	for d := range mapped {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			stale = append(stale, d+"/")
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	if len(missing) > 0 {
		t.Errorf("the README's map does not name %v (add each under its parent, indented two spaces a level)", missing)
	}
	if len(stale) > 0 {
		t.Errorf("the README's map names directories that do not exist: %v", stale)
	}
}

// entry is a directory name in the map (a path below its parent, such as
// cmd/kubedev/): at a line's start after its indent, or after two spaces
// (two entries on one line).
var entry = regexp.MustCompile(`(?:^|  )([a-z0-9][a-z0-9_./-]*)/(?:\s|$)`)

// readmeMap reads the code block after "## How it works": each line's
// indent (two spaces a level) puts its entries under the last entry of the
// level above.
func readmeMap(readme string) (map[string]bool, error) {
	_, after, ok := strings.Cut(readme, "\n## How it works\n")
	if !ok {
		return nil, os.ErrNotExist
	}
	_, block, _ := strings.Cut(after, "```\n")
	block, _, _ = strings.Cut(block, "```")
	dirs := map[string]bool{}
	var parents []string // parents[i]: the last entry at level i
	for _, line := range strings.Split(block, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		indent := len(line) - len(trimmed)
		if indent%2 != 0 || !entry.MatchString(line[indent:]) || entry.FindStringIndex(line[indent:])[0] != 0 {
			continue // a continuation line of a description
		}
		level := indent / 2
		if level > len(parents) {
			continue
		}
		parents = parents[:level]
		prefix := strings.Join(parents, "/")
		for i, m := range entry.FindAllStringSubmatch(line[indent:], -1) {
			p := m[1]
			if prefix != "" {
				p = prefix + "/" + p
			}
			dirs[p] = true
			if i == 0 {
				parents = append(parents, m[1])
			}
		}
	}
	return dirs, nil
}
