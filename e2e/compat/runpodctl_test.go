package compat

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"berth/internal/clientkit"
	"berth/internal/dockertest"
)

// runpodctl 2e2df89 against `berth serve`, command by command.

// ctlKind classifies a command of runpodctl's tree.
type ctlKind int

const (
	ctlRun     ctlKind = iota // runs against Berth (steps below)
	ctlRefused                // cannot work on one host; Berth answers with its own error (steps below)
	ctlGroup                  // only groups subcommands: `--help`
	ctlLocal                  // works without a server (steps below)
	ctlNotOurs                // needs the internet, not Berth (croc relays, GitHub releases): `--help` only
)

// ctlCommands classifies every command runpodctl's help shows (and its
// deprecated ones, which the root help names). A command the walk finds
// that is not here fails TestRunpodctlCommands until it is classified.
var ctlCommands = map[string]ctlKind{
	"billing": ctlGroup, "billing network-volume": ctlRun, "billing pods": ctlRun, "billing serverless": ctlRun,
	"completion": ctlLocal, "doctor": ctlRun, "user": ctlRun, "version": ctlLocal,
	"datacenter": ctlGroup, "datacenter list": ctlRun, "gpu": ctlGroup, "gpu list": ctlRun,
	"hub": ctlGroup, "hub get": ctlRefused, "hub list": ctlRefused, "hub search": ctlRefused,
	"model": ctlGroup, "model add": ctlRefused, "model list": ctlRefused, "model remove": ctlRefused,
	"network-volume": ctlGroup, "network-volume create": ctlRun, "network-volume delete": ctlRun,
	"network-volume get": ctlRun, "network-volume list": ctlRun, "network-volume update": ctlRun,
	"pod": ctlGroup, "pod create": ctlRun, "pod delete": ctlRun, "pod get": ctlRun, "pod list": ctlRun,
	"pod reset": ctlRun, "pod restart": ctlRun, "pod start": ctlRun, "pod stop": ctlRun, "pod update": ctlRun,
	"registry": ctlGroup, "registry create": ctlRun, "registry delete": ctlRun, "registry get": ctlRun, "registry list": ctlRun,
	"serverless": ctlGroup, "serverless create": ctlRun, "serverless delete": ctlRun, "serverless get": ctlRun,
	"serverless list": ctlRun, "serverless update": ctlRun,
	"ssh": ctlGroup, "ssh add-key": ctlRun, "ssh info": ctlRun, "ssh list-keys": ctlRun, "ssh remove-key": ctlRun,
	"template": ctlGroup, "template create": ctlRun, "template delete": ctlRun, "template get": ctlRun,
	"template list": ctlRun, "template search": ctlRun, "template update": ctlRun,
	"send": ctlNotOurs, "receive": ctlNotOurs, "update": ctlNotOurs,
	// Deprecated (hidden; the root help names them).
	"get": ctlGroup, "get cloud": ctlRun, "get pod": ctlRun, "get models": ctlRefused,
	"create": ctlGroup, "create pod": ctlRun, "create pods": ctlRun,
	"remove": ctlGroup, "remove pod": ctlRun, "remove pods": ctlRun,
	"start": ctlGroup, "start pod": ctlRun, "stop": ctlGroup, "stop pod": ctlRun,
	"config": ctlLocal,
	// exec python runs a file on a pod over SSH through RunPod's proxy
	// (ssh.runpod.io): not run here. project … drive a pod over SSH and
	// rsync with RunPod's base images: the client's own checks answer first
	// (no runpod.toml, no network volume).
	"exec": ctlGroup, "exec python": ctlNotOurs,
	"project": ctlGroup, "project build": ctlLocal, "project create": ctlLocal, "project deploy": ctlLocal, "project dev": ctlLocal,
}

// walkRunpodctl returns every command path under runpodctl's root: the
// help's "Available Commands", recursively, plus the deprecated commands
// the root help lists.
func walkRunpodctl(t *testing.T, run func(args ...string) (string, int)) []string {
	t.Helper()
	var out []string
	var walk func(path []string)
	walk = func(path []string) {
		help, code := run(append(slices.Clone(path), "--help")...)
		if code != 0 {
			t.Errorf("runpodctl %s --help: exit %d\n%s", strings.Join(path, " "), code, help)
			return
		}
		if len(path) > 0 {
			out = append(out, strings.Join(path, " "))
		}
		in := false
		for _, line := range strings.Split(help, "\n") {
			switch {
			case strings.HasPrefix(line, "Available Commands:"):
				in = true
			case in && strings.TrimSpace(line) == "":
				in = false
			case in:
				name := strings.Fields(line)[0]
				if name != "help" && !slices.Contains(out, strings.Join(append(slices.Clone(path), name), " ")) {
					walk(append(slices.Clone(path), name))
				}
			}
		}
		if len(path) == 0 {
			// "deprecated\n  get, create, …, get models"
			if _, rest, ok := strings.Cut(help, "\ndeprecated\n"); ok {
				line, _, _ := strings.Cut(rest, "\n")
				for _, c := range strings.Split(line, ",") {
					if c = strings.TrimSpace(c); c != "" && !slices.Contains(out, c) {
						walk(strings.Fields(c))
					}
				}
			}
		}
	}
	walk(nil)
	slices.Sort(out)
	return slices.Compact(out)
}

// ctlStep is one runpodctl invocation of the matrix.
type ctlStep struct {
	cmd  string   // the command path it exercises
	args []string // after "runpodctl"; {name} is replaced by a saved value
	fail bool     // a refusal: exit non-zero or an "error" in the output
	want []string // in stdout+stderr (after {name} replacement)
	not  []string // must not appear
	// save: name → the output's JSON field (top-level, or "pods.0.id"…).
	save map[string]string
	// then runs after the step (to poke the pod, wait for a state).
	then func(t *testing.T, out string)
}

func TestRunpodctlCommands(t *testing.T) {
	t.Parallel()
	bin := clientkit.Runpodctl(t)
	img := dockertest.BuildGoImage(t, podprog)
	s := startBerth(t)
	home := t.TempDir()
	env := append(os.Environ(), "HOME="+home, "RUNPOD_API_KEY="+s.Key,
		"RUNPOD_API_URL="+s.URL+"/v1", "RUNPOD_GRAPHQL_URL="+s.URL+"/graphql", "SHELL=/bin/bash")
	work := t.TempDir()
	run := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env, cmd.Dir, cmd.Stdin = env, work, strings.NewReader("")
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		err := cmd.Run()
		return b.String(), clientkit.ExitCode(err)
	}

	// Every command is classified; every classified command exists.
	walked := walkRunpodctl(t, run)
	for _, c := range walked {
		if _, ok := ctlCommands[c]; !ok {
			t.Errorf("runpodctl has a command the matrix does not know: %q — classify it in ctlCommands and give it a step", c)
		}
	}
	for c := range ctlCommands {
		if !slices.Contains(walked, c) {
			t.Errorf("ctlCommands lists %q, which runpodctl no longer has", c)
		}
	}

	vars := map[string]string{"image": img}
	fill := func(s string) string {
		return regexp.MustCompile(`\{[a-zA-Z0-9]+\}`).ReplaceAllStringFunc(s, func(m string) string {
			if v, ok := vars[m[1:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	covered := map[string]bool{}
	podPort := func(t *testing.T) int {
		var p v1Pod
		s.rest("GET", "/v1/pods/"+vars["pod"], nil, 200, &p)
		return p.PortMappings["8888"]
	}
	key := authorizedKey(t, "ctl@berth")
	steps := []ctlStep{
		{cmd: "version", args: []string{"version"}, want: []string{"runpodctl"}},
		{cmd: "completion", args: []string{"completion"}, want: []string{"completion installed"}},
		{cmd: "doctor", args: []string{"doctor"}, want: []string{`"healthy": true`}},
		{cmd: "user", args: []string{"user"}, want: []string{`"id"`}},
		{cmd: "gpu list", args: []string{"gpu", "list", "--include-unavailable"}, want: []string{"NVIDIA GeForce RTX 4090"}},
		{cmd: "datacenter list", args: []string{"datacenter", "list"}, want: []string{"BERTH-LOCAL"}},

		{cmd: "registry create", args: []string{"registry", "create", "--name", "ctl-reg", "--username", "me", "--password", "registry-secret-pw"}, want: []string{"ctl-reg"}, save: map[string]string{"reg": "id"}},
		{cmd: "registry list", args: []string{"registry", "list"}, want: []string{"{reg}"}},
		{cmd: "registry get", args: []string{"registry", "get", "{reg}"}, want: []string{"ctl-reg"}, not: []string{"registry-secret-pw"}},

		{cmd: "template create", args: []string{"template", "create", "--name", "ctl-tpl", "--image", "{image}", "--ports", "8888/tcp,22/tcp",
			"--port-labels", "8888=app", "--env", `{"A":"1"}`, "--container-disk-in-gb", "5"}, want: []string{"ctl-tpl"}, save: map[string]string{"tpl": "id"}},
		{cmd: "template create", args: []string{"template", "create", "--name", "ctl-worker", "--image", "{image}", "--serverless", "--registry-auth-id", "{reg}"},
			want: []string{"ctl-worker"}, save: map[string]string{"wtpl": "id"}},
		{cmd: "template list", args: []string{"template", "list", "--all"}, want: []string{"{tpl}", "{wtpl}"}},
		{cmd: "template list", args: []string{"template", "list", "--type", "user"}, want: []string{"{tpl}"}},
		{cmd: "template search", args: []string{"template", "search", "ctl", "--type", "user"}, want: []string{"{tpl}"}},
		{cmd: "template get", args: []string{"template", "get", "{tpl}"}, want: []string{"ctl-tpl", "{image}"}},
		{cmd: "template update", args: []string{"template", "update", "{tpl}", "--name", "ctl-tpl-2", "--readme", "hello"}, want: []string{"ctl-tpl-2"}},

		{cmd: "network-volume create", args: []string{"network-volume", "create", "--name", "ctl-nv", "--size", "10", "--data-center-id", "EU-RO-1"}, want: []string{"ctl-nv"}, save: map[string]string{"nv": "id"}},
		{cmd: "network-volume list", args: []string{"network-volume", "list"}, want: []string{"{nv}"}},
		{cmd: "network-volume get", args: []string{"network-volume", "get", "{nv}"}, want: []string{"EU-RO-1"}},
		{cmd: "network-volume update", args: []string{"network-volume", "update", "{nv}", "--size", "20", "--name", "ctl-nv-2"}, want: []string{"ctl-nv-2"}},

		{cmd: "pod create", args: []string{"pod", "create", "--name", "ctl-pod", "--image", "{image}", "--compute-type", "CPU", "--ports", "8888/tcp,22/tcp",
			"--network-volume-id", "{nv}", "--env", `{"K":"V"}`, "--volume-mount-path", "/data"}, want: []string{"ctl-pod"}, save: map[string]string{"pod": "id"}},
		{cmd: "pod create", args: []string{"pod", "create", "--name", "ctl-gpu", "--template-id", "{tpl}", "--gpu-id", "NVIDIA GeForce RTX 4090", "--data-center-ids", "US-TX-3"},
			want: []string{"ctl-gpu"}, save: map[string]string{"gpupod": "id"}},
		{cmd: "pod create", args: []string{"pod", "create", "--name", "ctl-community", "--image", "{image}", "--cloud-type", "COMMUNITY", "--compute-type", "CPU"}, want: []string{"ctl-community"}},
		{cmd: "pod list", args: []string{"pod", "list"}, want: []string{"{pod}", "{gpupod}"}},
		{cmd: "pod list", args: []string{"pod", "list", "--compute-type", "CPU", "--name", "ctl-pod"}, want: []string{"{pod}"}, not: []string{"{gpupod}"}},
		{cmd: "pod get", args: []string{"pod", "get", "{pod}", "--include-machine", "--include-network-volume"}, want: []string{"RUNNING", "EU-RO-1", "/data"},
			then: func(t *testing.T, _ string) {
				var p v1Pod
				s.rest("GET", "/v1/pods/"+vars["pod"], nil, 200, &p)
				vars["sshport"] = strconv.Itoa(p.PortMappings["22"])
			}},
		{cmd: "ssh info", args: []string{"ssh", "info", "{pod}"}, want: []string{`"ssh_command"`, "root@", "-p {sshport}"}},
		{cmd: "pod stop", args: []string{"pod", "stop", "{pod}"}, want: []string{"EXITED"}},
		{cmd: "pod start", args: []string{"pod", "start", "{pod}"}, want: []string{"RUNNING"}},
		{cmd: "pod restart", args: []string{"pod", "restart", "{pod}"}, want: []string{"RUNNING"}},
		{cmd: "pod reset", args: []string{"pod", "reset", "{pod}"}, want: []string{"RUNNING"}},
		{cmd: "pod update", args: []string{"pod", "update", "{pod}", "--name", "ctl-pod-2"}, want: []string{"ctl-pod-2"}},
		// The pod's command exits on its own: every view follows.
		{cmd: "pod get", args: []string{"pod", "get", "{pod}"}, want: []string{"RUNNING"}, then: func(t *testing.T, _ string) {
			podCommand(t, podPort(t), "exit 7")
			eventually(t, "the pod reads EXITED", func() bool {
				var p v1Pod
				s.rest("GET", "/v1/pods/"+vars["pod"], nil, 200, &p)
				return p.DesiredStatus == "EXITED"
			})
		}},
		// pod get embeds ssh info: {"error": "pod not ready"} for the exited pod.
		{cmd: "pod get", args: []string{"pod", "get", "{pod}"}, fail: true, want: []string{`"desiredStatus": "EXITED"`, "exit code 7", "pod not ready"}, not: []string{"ssh_command"}},
		{cmd: "ssh info", args: []string{"ssh", "info", "{pod}"}, fail: true, want: []string{"pod not ready", "EXITED"}, not: []string{"ssh_command", "{sshport}"}},
		{cmd: "pod list", args: []string{"pod", "list", "--status", "EXITED"}, want: []string{"{pod}"}, not: []string{"{gpupod}"}},

		{cmd: "serverless create", args: []string{"serverless", "create", "--name", "ctl-ep", "--template-id", "{wtpl}", "--gpu-id", "ADA_24", "--workers-max", "0",
			"--network-volume-id", "{nv}", "--scale-by", "requests", "--scale-threshold", "3", "--idle-timeout", "30", "--execution-timeout", "120"},
			want: []string{"ctl-ep"}, save: map[string]string{"ep": "id"}},
		{cmd: "serverless create", args: []string{"serverless", "create", "--name", "ctl-cpu", "--template-id", "{wtpl}", "--compute-type", "CPU",
			"--instance-id", "cpu3c-2-4", "--workers-max", "0"}, want: []string{"ctl-cpu"}, save: map[string]string{"cpuep": "id"}},
		{cmd: "serverless create", args: []string{"serverless", "create", "--name", "hub", "--hub-id", "some-listing"}, fail: true, want: []string{"Hub"}},
		{cmd: "serverless list", args: []string{"serverless", "list", "--include-template"}, want: []string{"{ep}", "{cpuep}"}},
		{cmd: "serverless get", args: []string{"serverless", "get", "{ep}", "--include-workers"}, want: []string{"ctl-ep", `"gpuIds": "ADA_24"`, `"flashBootType": "FLASHBOOT"`}},
		{cmd: "serverless list", args: []string{"serverless", "list"}, want: []string{`"gpuIds": "ADA_24"`}},
		{cmd: "serverless update", args: []string{"serverless", "update", "{ep}", "--name", "ctl-ep-2", "--workers-max", "1", "--template-id", "{wtpl}"}, want: []string{"ctl-ep-2"}},
		// --clear-models reads the endpoint through REST and sends it all
		// back to saveEndpoint (gpuIds, locations, flashBootType
		// included): the endpoint is as it was.
		{cmd: "serverless update", args: []string{"serverless", "update", "{ep}", "--clear-models"}, want: []string{"ctl-ep-2", `"gpuIds": "ADA_24"`},
			then: func(t *testing.T, _ string) {
				var e struct {
					GPUTypeIDs    []string `json:"gpuTypeIds"`
					DataCenterIDs []string `json:"dataCenterIds"`
					Flashboot     bool
					IdleTimeout   int
					WorkersMax    int
				}
				s.rest("GET", "/v1/endpoints/"+vars["ep"], nil, 200, &e)
				if !slices.Equal(e.GPUTypeIDs, []string{"ADA_24"}) || !e.Flashboot || e.IdleTimeout != 30 || e.WorkersMax != 1 || len(e.DataCenterIDs) != 26 {
					t.Errorf("after serverless update --clear-models: %+v", e)
				}
			}},
		{cmd: "serverless update", args: []string{"serverless", "update", "{cpuep}", "--clear-models"}, want: []string{"ctl-cpu", "cpu3c-2-4"}},
		// Cached models: --model-reference (repeatable) replaces the list,
		// read back by runpodctl and REST; --clear-models empties it; a
		// malformed reference is refused naming the field.
		{cmd: "serverless update", args: []string{"serverless", "update", "{ep}", "--model-reference", "https://huggingface.co/org/model:main",
			"--model-reference", "https://huggingface.co/org/other"}, want: []string{"ctl-ep-2"},
			then: func(t *testing.T, _ string) {
				var e struct{ ModelReferences []string }
				s.rest("GET", "/v1/endpoints/"+vars["ep"], nil, 200, &e)
				if !slices.Equal(e.ModelReferences, []string{"https://huggingface.co/org/model:main", "https://huggingface.co/org/other"}) {
					t.Errorf("after serverless update --model-reference: %q", e.ModelReferences)
				}
			}},
		{cmd: "serverless update", args: []string{"serverless", "update", "{ep}", "--model-reference", "org/model"}, fail: true, want: []string{"modelReferences[0]"}},
		{cmd: "serverless update", args: []string{"serverless", "update", "{ep}", "--clear-models"}, want: []string{"ctl-ep-2"},
			then: func(t *testing.T, _ string) {
				var e struct{ ModelReferences []string }
				s.rest("GET", "/v1/endpoints/"+vars["ep"], nil, 200, &e)
				if len(e.ModelReferences) != 0 {
					t.Errorf("after serverless update --clear-models: %q", e.ModelReferences)
				}
			}},
		{cmd: "serverless create", args: []string{"serverless", "create", "--name", "ctl-models", "--template-id", "{wtpl}", "--gpu-id", "ADA_24", "--workers-max", "0",
			"--model-reference", "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct:main"}, want: []string{"ctl-models", "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct:main"},
			save: map[string]string{"mep": "id"}},

		{cmd: "ssh add-key", args: []string{"ssh", "add-key", "--key", key}},
		{cmd: "ssh list-keys", args: []string{"ssh", "list-keys"}, want: []string{"ctl@berth", "runpodctl-ssh-key"}},

		{cmd: "billing pods", args: []string{"billing", "pods", "--grouping", "podId"}},
		{cmd: "billing serverless", args: []string{"billing", "serverless"}},
		{cmd: "billing network-volume", args: []string{"billing", "network-volume", "--bucket-size", "hour"}},

		// RunPod's cloud only: Berth's own refusal, not a schema error.
		{cmd: "hub list", args: []string{"hub", "list"}, fail: true, want: []string{"Hub is not available on Berth"}},
		{cmd: "hub search", args: []string{"hub", "search", "vllm"}, fail: true, want: []string{"Hub is not available on Berth"}},
		{cmd: "hub get", args: []string{"hub", "get", "runpod/worker-vllm"}, fail: true, want: []string{"Hub is not available on Berth"}},
		{cmd: "model list", args: []string{"model", "list"}, fail: true, want: []string{"model repositories are not available on Berth"}},
		{cmd: "model add", args: []string{"model", "add", "--name", "m", "--owner", "me"}, fail: true, want: []string{"model repositories are not available on Berth"}},
		{cmd: "model remove", args: []string{"model", "remove", "--name", "m", "--owner", "me"}, fail: true, want: []string{"model repositories are not available on Berth"}},
		{cmd: "get models", args: []string{"get", "models"}, fail: true, want: []string{"model repositories are not available on Berth"}},

		// Deprecated commands (GraphQL).
		// No board here, so no offer: the header alone.
		{cmd: "get cloud", args: []string{"get", "cloud", "--disk", "10", "--secure"}, want: []string{"GPU TYPE"}, not: []string{"RTX"}},
		{cmd: "get pod", args: []string{"get", "pod"}, want: []string{"{gpupod}"}},
		{cmd: "get pod", args: []string{"get", "pod", "{gpupod}", "--allfields"}, want: []string{"{gpupod}"}},
		// Without --secureCloud the legacy command asks for the community
		// cloud (recorded; this host serves it); its default --volumeSize 1
		// is below the 10 GB minimum of a pod volume (mgmt's limits table,
		// v2.json's).
		{cmd: "create pod", args: []string{"create", "pod", "--name", "legacy-community", "--imageName", "{image}", "--gpuType", "NVIDIA GeForce RTX 4090", "--volumeSize", "10"}, want: []string{"created"}},
		{cmd: "create pod", args: []string{"create", "pod", "--secureCloud", "--name", "legacy", "--imageName", "{image}", "--gpuType", "NVIDIA GeForce RTX 4090"}, fail: true, want: []string{"volumeInGb must be 0 (no pod volume) or 10-4096 GB, got 1"}},
		{cmd: "create pod", args: []string{"create", "pod", "--secureCloud", "--name", "legacy", "--imageName", "{image}", "--gpuType", "NVIDIA GeForce RTX 4090", "--cost", "0.5",
			"--ports", "8888/http", "--volumePath", "/workspace", "--volumeSize", "10", "--env", "A=1"}, want: []string{"created"}},
		{cmd: "create pods", args: []string{"create", "pods", "--secureCloud", "--name", "group", "--podCount", "2", "--imageName", "{image}", "--gpuType", "NVIDIA GeForce RTX 4090", "--volumeSize", "0"}, want: []string{"created"}},
		{cmd: "stop pod", args: []string{"stop", "pod", "{gpupod}"}, want: []string{"stopped"}},
		{cmd: "start pod", args: []string{"start", "pod", "{gpupod}"}, want: []string{"started"}},
		{cmd: "start pod", args: []string{"start", "pod", "{gpupod}", "--bid", "0.2"}, fail: true, want: []string{"spot"}},
		{cmd: "remove pods", args: []string{"remove", "pods", "group", "--podCount", "2"}, want: []string{"removed"}},
		{cmd: "remove pods", args: []string{"remove", "pods", "legacy"}, want: []string{"removed"}},
		{cmd: "remove pods", args: []string{"remove", "pods", "legacy-community"}, want: []string{"removed"}},
		{cmd: "remove pod", args: []string{"remove", "pod", "{gpupod}"}, want: []string{"removed"}},

		{cmd: "ssh remove-key", args: []string{"ssh", "remove-key", "--name", "ctl@berth"}},
		{cmd: "serverless delete", args: []string{"serverless", "delete", "{ep}"}},
		{cmd: "serverless delete", args: []string{"serverless", "delete", "{cpuep}"}},
		{cmd: "serverless delete", args: []string{"serverless", "delete", "{mep}"}},
		{cmd: "pod delete", args: []string{"pod", "delete", "{pod}"}},
		{cmd: "template delete", args: []string{"template", "delete", "{tpl}"}},
		{cmd: "template delete", args: []string{"template", "delete", "{wtpl}"}},
		{cmd: "registry delete", args: []string{"registry", "delete", "{reg}"}},
		{cmd: "network-volume delete", args: []string{"network-volume", "delete", "{nv}"}},

		// Client-side commands.
		{cmd: "config", args: []string{"config", "--apiKey", "{key}", "--apiUrl", "{graphql}"}, want: []string{"saved"}},
		{cmd: "project build", args: []string{"project", "build"}, fail: true, want: []string{"runpod.toml"}},
		{cmd: "project deploy", args: []string{"project", "deploy"}, want: []string{"No network volumes found"}},
		{cmd: "project dev", args: []string{"project", "dev"}, want: []string{"No 'runpod.toml' found"}},
		{cmd: "project create", args: []string{"project", "create", "--name", "proj", "--init"}, want: []string{"Project name set to 'proj'"}},
	}
	vars["key"], vars["graphql"] = s.Key, s.URL+"/graphql"

	for i, st := range steps {
		args := make([]string, len(st.args))
		for j, a := range st.args {
			args[j] = fill(a)
		}
		start := time.Now()
		out, code := run(args...)
		took := time.Since(start)
		covered[st.cmd] = true
		failed := code != 0 || strings.Contains(out, `"error"`) || strings.Contains(out, "Error: ")
		what := fmt.Sprintf("step %d: runpodctl %s", i, strings.Join(args, " "))
		switch {
		case st.fail && !failed:
			t.Errorf("%s: succeeded, want a refusal\n%s", what, out)
		case !st.fail && failed:
			t.Errorf("%s: exit %d\n%s", what, code, out)
			continue
		}
		for _, w := range st.want {
			if w = fill(w); !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q\n%s", what, w, out)
			}
		}
		for _, w := range st.not {
			if w = fill(w); strings.Contains(out, w) {
				t.Errorf("%s: output has %q\n%s", what, w, out)
			}
		}
		for name, field := range st.save {
			var v any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("%s: output is not JSON: %v\n%s", what, err, out)
			}
			for _, part := range strings.Split(field, ".") {
				if m, ok := v.(map[string]any); ok {
					v = m[part]
				}
			}
			str, ok := v.(string)
			if !ok || str == "" {
				t.Fatalf("%s: no %s in the output\n%s", what, field, out)
			}
			vars[name] = str
		}
		if st.then != nil {
			st.then(t, out)
		}
		if testing.Verbose() {
			t.Logf("%s: ok (%s)", what, took.Round(time.Millisecond))
		}
	}

	for c, k := range ctlCommands {
		switch k {
		case ctlRun, ctlRefused, ctlLocal:
			if !covered[c] {
				t.Errorf("runpodctl %s is classified but no step runs it", c)
			}
		}
	}

	// The README's settings: runpodctl reads Berth's URLs and the key from
	// ~/.runpod/config.toml as the README shows it, with no variables.
	readme, err := os.ReadFile(filepath.Join(clientkit.ModuleRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "<!-- runpodctl-config")
	if ok {
		_, block, ok = strings.Cut(block, "```toml\n")
	}
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal("README.md has no runpodctl-config toml block")
	}
	block = strings.NewReplacer("<the operator key>", s.Key, "http://127.0.0.1:8080", s.URL).Replace(block)
	home2 := t.TempDir()
	os.MkdirAll(filepath.Join(home2, ".runpod"), 0o755)
	if err := os.WriteFile(filepath.Join(home2, ".runpod", "config.toml"), []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	env = []string{"HOME=" + home2, "PATH=" + os.Getenv("PATH")}
	for _, args := range [][]string{{"user"}, {"pod", "list", "--all"}, {"template", "list", "--type", "user"}} {
		if out, code := run(args...); code != 0 || strings.Contains(out, `"error"`) {
			t.Errorf("runpodctl %s with the README's config.toml: exit %d\n%s", strings.Join(args, " "), code, out)
		}
	}
}

// authorizedKey is a fresh ed25519 public key in authorized_keys form.
func authorizedKey(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, part := range [][]byte{[]byte("ssh-ed25519"), pub} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(part)))
		b = append(b, part...)
	}
	return "ssh-ed25519 " + base64.StdEncoding.EncodeToString(b) + " " + comment
}
