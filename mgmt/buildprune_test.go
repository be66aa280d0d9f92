package mgmt

import (
	"reflect"
	"testing"
	"time"

	"berth/store"
)

func TestBuildImagesToPrune(t *testing.T) {
	img := func(tag string) string { return "berth/ep:" + tag + "00000000000"[:12-len(tag)] }
	done := func(id, ep, tag string) store.Build {
		return store.Build{ID: id, EndpointID: ep, Status: store.BuildCompleted, ImageName: img(tag)}
	}
	rel := func(ep string, v int, build string) store.Release {
		return store.Release{EndpointID: ep, Version: v, Source: ReleaseGitBuild, BuildID: build}
	}
	now := time.Now()
	pruned := done("b1", "e", "1")
	pruned.ImagePrunedAt = &now
	failed := done("bf", "e", "f")
	failed.Status = store.BuildFailed
	running := done("br", "e", "1")
	running.Status = store.BuildBuilding
	pushed := done("b1", "e", "1")
	pushed.PushedImage = "reg/ep@sha256:aa"
	four := []store.Build{done("b1", "e", "1"), done("b2", "e", "2"), done("b3", "e", "3"), done("b4", "e", "4")}
	fourRel := []store.Release{rel("e", 2, "b1"), rel("e", 3, "b2"), rel("e", 4, "b3"), rel("e", 5, "b4")}
	for _, c := range []struct {
		name     string
		keep     int
		builds   []store.Build
		releases []store.Release
		inUse    []string
		want     []PruneImage
	}{
		{"nothing", 2, nil, nil, nil, []PruneImage{}},
		{"keep the two newest releases' images", 2, four, fourRel, nil,
			[]PruneImage{{img("1"), []string{"b1"}}, {img("2"), []string{"b2"}}}},
		{"keep counts distinct images: a rollback to a kept one takes no place", 2, four,
			append(fourRel, rel("e", 6, "b3")), nil, []PruneImage{{img("1"), []string{"b1"}}, {img("2"), []string{"b2"}}}},
		{"a rollback's image is kept as a release's", 2, four,
			append(fourRel, rel("e", 6, "b1")), nil, []PruneImage{{img("2"), []string{"b2"}}, {img("3"), []string{"b3"}}}},
		{"a template's image stays", 1, four, fourRel, []string{img("1")},
			[]PruneImage{{img("2"), []string{"b2"}}, {img("3"), []string{"b3"}}}},
		{"a pushed reference in use keeps the local copy", 1, []store.Build{pushed, done("b2", "e", "2")},
			[]store.Release{rel("e", 2, "b1"), rel("e", 3, "b2")}, []string{"reg/ep@sha256:aa"}, []PruneImage{}},
		{"a build not finished keeps its image", 1, append(four[:2:2], running, four[3]), fourRel, nil,
			[]PruneImage{{img("2"), []string{"b2"}}}},
		{"already pruned: not listed again", 1, []store.Build{pruned, done("b2", "e", "2")},
			[]store.Release{rel("e", 2, "b1"), rel("e", 3, "b2")}, nil, []PruneImage{}},
		{"a failed build's image goes (a push failed after the build)", 1, []store.Build{failed, done("b2", "e", "2")},
			[]store.Release{rel("e", 3, "b2")}, nil, []PruneImage{{img("f"), []string{"bf"}}}},
		{"manual releases do not count", 1, four, []store.Release{rel("e", 5, "b4"), {EndpointID: "e", Version: 6}}, nil,
			[]PruneImage{{img("1"), []string{"b1"}}, {img("2"), []string{"b2"}}, {img("3"), []string{"b3"}}}},
		{"an image two endpoints built is kept when either keeps it", 1,
			[]store.Build{done("b1", "e", "1"), done("b2", "e", "2"), done("x1", "x", "1")},
			[]store.Release{rel("e", 2, "b1"), rel("e", 3, "b2"), rel("x", 2, "x1")}, nil, []PruneImage{}},
		{"an image two builds made goes as one, both named", 1,
			[]store.Build{done("b1", "e", "1"), done("b1b", "e", "1"), done("b2", "e", "2")},
			[]store.Release{rel("e", 2, "b1"), rel("e", 3, "b2")}, nil, []PruneImage{{img("1"), []string{"b1", "b1b"}}}},
		{"only Berth's build names", 1,
			[]store.Build{{ID: "o", EndpointID: "e", Status: store.BuildCompleted, ImageName: "python:3.11"}, done("b2", "e", "2")},
			[]store.Release{rel("e", 3, "b2")}, nil, []PruneImage{}},
		{"keep below 1 is 1", 0, four, fourRel, nil,
			[]PruneImage{{img("1"), []string{"b1"}}, {img("2"), []string{"b2"}}, {img("3"), []string{"b3"}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			inUse := map[string]bool{}
			for _, i := range c.inUse {
				inUse[i] = true
			}
			got := BuildImagesToPrune(PruneInput{Keep: c.keep, Builds: c.builds, Releases: c.releases, InUse: inUse})
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestIsBuildImageName(t *testing.T) {
	for ref, want := range map[string]bool{
		"berth/hello:0123456789ab": true, "berth/hello:0123456789": false, "berth/a/b:0123456789ab": false,
		"hello:0123456789ab": false, "berth/:0123456789ab": false, "berth/hello:0123456789AB": false,
		"berth/pending-first-build:none": false, "reg/berth/hello:0123456789ab": false,
	} {
		if got := IsBuildImageName(ref); got != want {
			t.Errorf("%s: %v, want %v", ref, got, want)
		}
	}
}
