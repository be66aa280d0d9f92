package docker

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"
)

// BuildSpec is one image build from a context tar.
type BuildSpec struct {
	Tag        string
	Dockerfile string // path inside the context
	Target     string
	BuildArgs  map[string]string
	Labels     map[string]string
}

// BuildImage builds the image spec describes from contextTar with the
// daemon's classic builder (the one every daemon since 20.10 serves
// without a BuildKit session) and tags it spec.Tag. line gets every line
// of the build's output as it comes ("Step 2/5 : RUN …", the commands'
// output). The daemon's failure arrives inside the stream: it is returned
// as a *StreamError. Cancelling ctx closes the request, which stops the
// build in the daemon.
func (d *Docker) BuildImage(ctx context.Context, contextTar io.Reader, spec BuildSpec, line func(string)) error {
	args := make(map[string]*string, len(spec.BuildArgs))
	for k, v := range spec.BuildArgs {
		args[k] = &v
	}
	res, err := d.cli.ImageBuild(ctx, contextTar, client.ImageBuildOptions{
		Tags: []string{spec.Tag}, Dockerfile: spec.Dockerfile, Target: spec.Target, BuildArgs: args, Labels: spec.Labels,
		Remove: true, ForceRemove: true, Version: build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("build image %s: %w", spec.Tag, err)
	}
	defer res.Body.Close()
	if err := readBuildStream(res.Body, line); err != nil {
		return err
	}
	// A stream cut short (a daemon restart) carries no error: check.
	ok, err := d.ImageExists(ctx, spec.Tag)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("build image %s: the build's output ended but the image is not there", spec.Tag)
	}
	return nil
}

// readBuildStream reads the classic builder's JSON messages to the end,
// handing each output line to line; the first error message is returned.
func readBuildStream(r io.Reader, line func(string)) error {
	var partial string // output without its line break yet
	defer func() {
		if partial != "" {
			line(strings.TrimRight(partial, "\r"))
		}
	}()
	return eachMessage(r, "build output", func(m streamMessage) {
		text := m.Stream
		if text == "" && m.Status != "" { // a base image pull
			text = strings.TrimSpace(m.ID+" "+m.Status) + "\n"
		}
		for text != "" {
			i := strings.IndexByte(text, '\n')
			if i < 0 {
				partial += text
				break
			}
			l := partial + text[:i]
			partial = ""
			line(strings.TrimRight(l, "\r"))
			text = text[i+1:]
		}
	})
}

// LoadImage loads an image archive (docker save's format, which
// BuildKit's docker exporter writes) into the daemon; line gets the
// daemon's messages ("Loaded image: …"). A refusal inside the stream is
// returned as a *StreamError.
func (d *Docker) LoadImage(ctx context.Context, archive io.Reader, line func(string)) error {
	res, err := d.cli.ImageLoad(ctx, archive)
	if err != nil {
		return fmt.Errorf("load image: %w", err)
	}
	defer res.Close()
	return readBuildStream(res, line)
}
