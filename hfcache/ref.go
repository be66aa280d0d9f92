// Package hfcache is Berth's model cache: the Hugging Face models endpoints
// name (RunPod's "cached models"), downloaded once from the Hub's HTTP API
// into the Hugging Face hub cache layout
// (models--ORG--NAME/{blobs,snapshots/COMMIT,refs/REF}) so the official
// huggingface_hub library reads them offline, shared by every endpoint,
// capped in size, evicting what no endpoint names, least recently used
// first.
package hfcache

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// RefPrefix is how every model reference starts (RunPod's form): the model's
// page on the Hub. The Hub actually contacted is Config.Endpoint (a mirror).
const RefPrefix = "https://huggingface.co/"

// DefaultRevision is the revision a reference without ":REF" names.
const DefaultRevision = "main"

// Ref is one parsed model reference.
type Ref struct {
	Org, Name string
	// Revision is a branch, tag or 40-hex commit.
	Revision string
}

// Repo is the repository id, ORG/NAME.
func (r Ref) Repo() string { return r.Org + "/" + r.Name }

// String is the canonical reference: the revision always written.
func (r Ref) String() string { return RefPrefix + r.Repo() + ":" + r.Revision }

// Short is how people name the model in messages: ORG/NAME, and :REF when
// it is not main.
func (r Ref) Short() string {
	if r.Revision == DefaultRevision {
		return r.Repo()
	}
	return r.Repo() + ":" + r.Revision
}

// IsCommit: the revision is a full commit id (no refs file is written).
func (r Ref) IsCommit() bool { return commitRE.MatchString(r.Revision) }

var (
	// The Hub's repo-name rule (huggingface_hub's validate_repo_id), with
	// "--" and ".." refused: "--" separates the parts of the cache's
	// folder name, models--ORG--NAME.
	partRE   = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,96}$`)
	commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)
	// A git ref name, restricted to what is safe as a path under refs/.
	revRE = regexp.MustCompile(`^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,199}$`)
)

// MaxRefLen bounds a reference's length.
const MaxRefLen = 512

// ParseRef reads `https://huggingface.co/ORG/NAME[:REF]`. Its errors say
// what is wrong without naming a field: callers prefix the field.
func ParseRef(s string) (Ref, error) {
	if len(s) > MaxRefLen {
		return Ref{}, fmt.Errorf("a model reference is at most %d characters", MaxRefLen)
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return Ref{}, errors.New("a model reference may not hold control characters")
	}
	rest, ok := strings.CutPrefix(s, RefPrefix)
	if !ok {
		return Ref{}, fmt.Errorf("%q is not a Hugging Face model reference: want %sORG/NAME[:REF] (REF a branch, tag or commit; default %s)", s, RefPrefix, DefaultRevision)
	}
	path, rev, hasRev := strings.Cut(rest, ":")
	if !hasRev {
		rev = DefaultRevision
	}
	org, name, ok := strings.Cut(path, "/")
	if !ok || strings.Contains(name, "/") {
		return Ref{}, fmt.Errorf("%q: want %sORG/NAME[:REF], exactly one / between ORG and NAME", s, RefPrefix)
	}
	for _, p := range []struct{ what, v string }{{"organisation", org}, {"model name", name}} {
		if !partRE.MatchString(p.v) || strings.Contains(p.v, "--") || strings.Contains(p.v, "..") ||
			strings.HasPrefix(p.v, "-") || strings.HasPrefix(p.v, ".") || strings.HasSuffix(p.v, "-") || strings.HasSuffix(p.v, ".") {
			return Ref{}, fmt.Errorf("%q: the %s %q must be 1–96 letters, digits, '-', '_' or '.', not starting or ending with '-' or '.', without '--' or '..'", s, p.what, p.v)
		}
	}
	if !revRE.MatchString(rev) || strings.Contains(rev, "..") || strings.Contains(rev, "//") ||
		strings.HasSuffix(rev, "/") || strings.HasSuffix(rev, ".lock") || strings.Contains(rev, "/.") {
		return Ref{}, fmt.Errorf("%q: the revision %q is not a branch, tag or commit name (letters, digits, '_', '.', '-', '/'; at most 200)", s, rev)
	}
	return Ref{Org: org, Name: name, Revision: rev}, nil
}

// folder is the repository's folder in the cache.
func (r Ref) folder() string { return "models--" + r.Org + "--" + r.Name }
