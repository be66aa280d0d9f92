package mgmt

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"berth/gpu"
)

// DataCenterID is the one data centre a Berth host is.
const DataCenterID = "BERTH-LOCAL"

// DataCenters are RunPod's data-centre ids (v1.json). Any well-formed id is
// accepted and recorded; all of them are this host.
var DataCenters = []string{
	"AP-JP-1", "CA-MTL-1", "CA-MTL-2", "CA-MTL-3", "EU-CZ-1", "EU-FR-1", "EU-NL-1", "EU-RO-1", "EU-SE-1",
	"EUR-IS-1", "EUR-IS-2", "EUR-IS-3", "EUR-NO-1", "OC-AU-1", "US-CA-2", "US-DE-1", "US-GA-1", "US-GA-2",
	"US-IL-1", "US-KS-2", "US-KS-3", "US-NC-1", "US-TX-1", "US-TX-3", "US-TX-4", "US-WA-1",
}

// DataCenterPattern is the shape of a data-centre id: "EU-RO-1",
// "US-TX-3", "BERTH-LOCAL".
const DataCenterPattern = `^[A-Z]{2,5}(-[A-Z0-9]{1,8}){1,3}$`

var dataCenterRe = regexp.MustCompile(DataCenterPattern)

// CheckDataCenter checks one data-centre id of field: malformed is
// Invalid; a well-formed id Berth does not know gives a warning.
func CheckDataCenter(field, id string) (warning string, err error) {
	if !dataCenterRe.MatchString(id) {
		return "", invalid(field, "%s: %q is not a data-centre id such as \"EU-RO-1\" (this Berth host is %q)", field, id, DataCenterID)
	}
	if id != DataCenterID && !slices.Contains(DataCenters, id) {
		return fmt.Sprintf("%s: data centre %q is not one Berth knows; recorded, and served by this host", field, id), nil
	}
	return "", nil
}

// checkDataCenters checks a list, collecting warnings.
func checkDataCenters(field string, ids []string, warn *[]string) error {
	for _, id := range ids {
		w, err := CheckDataCenter(field, id)
		if err != nil {
			return err
		}
		if w != "" {
			*warn = append(*warn, w)
		}
	}
	return nil
}

// CheckGPUIDs checks a gpuTypeIds list (type ids, pool ids, "-"
// exclusions; see gpu.CheckID): malformed is Invalid naming field; unknown
// ids give warnings.
func CheckGPUIDs(field string, ids []string) (warnings []string, err error) {
	for _, id := range ids {
		w, err := gpu.CheckID(id)
		if err != nil {
			return nil, invalid(field, "%s: %v", field, err)
		}
		if w != "" {
			warnings = append(warnings, field+": "+w)
		}
	}
	return warnings, nil
}

var portRe = regexp.MustCompile(`^([0-9]{1,5})/(http|tcp)$`)

// SplitPorts splits the comma-joined ports form ("8888/http,22/tcp") that
// RunPod's defaults, runpod-python and GraphQL use. It never returns nil.
func SplitPorts(s string) []string {
	out := []string{}
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// SplitArgs splits a command line given as one string (GraphQL's
// dockerArgs) into words; double and single quotes group words.
func SplitArgs(s string) ([]string, error) {
	out := []string{}
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, invalid("dockerArgs", "dockerArgs: unclosed %c quote", quote)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

func validatePorts(ports []string) error {
	for _, p := range ports {
		m := portRe.FindStringSubmatch(p)
		if m == nil {
			return invalid("ports", "ports entry %q must be <port>/<http|tcp>", p)
		}
		if n, _ := strconv.Atoi(m[1]); n < 1 || n > 65535 {
			return invalid("ports", "ports entry %q: port must be 1-65535", p)
		}
	}
	return nil
}

func validatePortLabels(labels map[string]string, ports []string) error {
	for port, name := range labels {
		if !slices.ContainsFunc(ports, func(p string) bool { return strings.HasPrefix(p, port+"/") }) {
			return invalid("portsConfig", "portsConfig: port %q is not one of the template's ports (%s)", port, strings.Join(ports, ","))
		}
		if strings.TrimSpace(name) == "" {
			return invalid("portsConfig", "portsConfig: the label of port %s must not be empty", port)
		}
		if len(name) > 64 {
			return invalid("portsConfig", "portsConfig: the label of port %s must be at most 64 characters", port)
		}
	}
	return nil
}

func validateEnv(env map[string]string) error {
	for k := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return invalid("env", "env name %q is not a valid variable name", k)
		}
	}
	return nil
}

func oneOf(name string, v *string, values []string, dst *string) error {
	if v == nil {
		return nil
	}
	if !slices.Contains(values, *v) {
		return invalid(name, "%s must be one of %s, got %q", name, strings.Join(values, ", "), *v)
	}
	*dst = *v
	return nil
}

func nonNegative(name string, v *int, dst *int) error {
	if v == nil {
		return nil
	}
	if *v < 0 {
		return invalid(name, "%s must not be negative, got %d", name, *v)
	}
	*dst = *v
	return nil
}

// applyDisks checks and applies the disk fields templates and pods share;
// nothing is applied when any of them is refused.
func applyDisks(disk, volume *int, mount *string, toDisk, toVolume *int, toMount *string) error {
	for _, f := range []struct {
		name string
		v    *int
	}{{"containerDiskInGb", disk}, {"volumeInGb", volume}} {
		if f.v != nil && *f.v < 0 {
			return invalid(f.name, "%s must not be negative", f.name)
		}
	}
	if mount != nil && !path.IsAbs(*mount) {
		return invalid("volumeMountPath", "volumeMountPath must be an absolute path, got %q", *mount)
	}
	if disk != nil {
		*toDisk = *disk
	}
	if volume != nil {
		*toVolume = *volume
	}
	if mount != nil {
		*toMount = *mount
	}
	return nil
}
