package mgmt

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"berth/gpu"
	"berth/hfcache"
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
		return "", invalid(field, "%s: %s is not a data-centre id such as \"EU-RO-1\" (this Berth host is %q)", field, quote(ShortID(id)), DataCenterID)
	}
	if id != DataCenterID && !slices.Contains(DataCenters, id) {
		return fmt.Sprintf("%s: data centre %q is not one Berth knows; recorded, and served by this host", field, id), nil
	}
	return "", nil
}

// checkDataCenters checks a list, collecting warnings.
func checkDataCenters(field string, ids []string, warn *[]string) error {
	if err := LimitDataCenters.CheckCount(field, len(ids)); err != nil {
		return err
	}
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
		if err := CheckText(field, id, false); err != nil {
			return nil, err
		}
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
	if err := LimitPorts.CheckCount("ports", len(ports)); err != nil {
		return err
	}
	for _, p := range ports {
		m := portRe.FindStringSubmatch(p)
		if m == nil {
			return invalid("ports", "ports entry %s must be <port>/<http|tcp>", quote(ShortID(p)))
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
		if err := CheckText("portsConfig", name, false); err != nil {
			return err
		}
		if len(name) > 64 {
			return invalid("portsConfig", "portsConfig: the label of port %s must be at most 64 characters", port)
		}
	}
	return nil
}

func validateEnv(env map[string]string) error {
	if err := LimitEnvEntries.CheckCount("env", len(env)); err != nil {
		return err
	}
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsFunc(k, IsControl) {
			return invalid("env", "env name %s is not a valid variable name", strconv.Quote(ShortID(k)))
		}
		if err := CheckText("env "+strconv.Quote(ShortID(k)), v, true); err != nil {
			return reField(err, "env")
		}
		if err := LimitEnvName.CheckLen("env name "+quote(ShortID(k)), k); err != nil {
			return reField(err, "env")
		}
		if err := LimitEnvValue.CheckLen("env "+quote(ShortID(k)), v); err != nil {
			return reField(err, "env")
		}
	}
	return nil
}

// reField sets the Field of a refusal whose message names a part of it.
func reField(err error, field string) error {
	if e, ok := err.(*Error); ok {
		e.Field = field
	}
	return err
}

// IsControl reports whether r is a character no text field may hold: C0
// controls (U+0000–001F), DEL, C1 controls (U+0080–009F) and the
// bidirectional embeddings, overrides and isolates (U+202A–202E,
// U+2066–2069), which make a terminal or a page show other text than is
// stored (escape sequences, "Trojan Source" reordering).
func IsControl(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// CheckText is the one rule of free text: s, the value of field, must
// not hold a control character (IsControl). A multiline field (a readme,
// a command's words, an environment value) may hold tabs and line breaks;
// a one-line field (names, imageName, paths, labels) may not.
func CheckText(field, s string, multiline bool) error {
	for i, r := range s {
		if multiline && (r == '\t' || r == '\n' || r == '\r') {
			continue
		}
		if IsControl(r) {
			what := "one line of printable text"
			if multiline {
				what = "printable text (tabs and line breaks allowed)"
			}
			return invalid(field, "%s holds a control character (%U at byte %d): it must be %s", field, r, i, what)
		}
	}
	return nil
}

// checkName checks a resource's name: not blank, at most LimitName, one
// line of text.
func checkName(name string) error {
	if strings.TrimSpace(name) == "" {
		return invalid("name", "name must not be empty")
	}
	if err := CheckText("name", name, false); err != nil {
		return err
	}
	return LimitName.CheckLen("name", name)
}

// checkImage checks an image reference's length and text (Docker judges
// the rest when it pulls).
func checkImage(image string) error {
	if strings.TrimSpace(image) == "" {
		return invalid("imageName", "imageName must not be empty")
	}
	if err := CheckText("imageName", image, false); err != nil {
		return err
	}
	return LimitImage.CheckLen("imageName", image)
}

// checkCmd checks a command's words (dockerStartCmd, dockerEntrypoint).
func checkCmd(field string, words []string) error {
	if err := LimitCmdWords.CheckCount(field, len(words)); err != nil {
		return err
	}
	n := 0
	for _, w := range words {
		if err := CheckText(field, w, true); err != nil {
			return err
		}
		n += len(w)
	}
	if int64(n) > LimitCmdChars.Max {
		return invalid(field, "%s must be at most %d characters in all, got %d", field, LimitCmdChars.Max, n)
	}
	return nil
}

// checkID checks one id a request names: not blank, at most LimitID long,
// no control characters.
func checkID(field, id string) error {
	if strings.TrimSpace(id) == "" {
		return invalid(field, "%s must not be empty", field)
	}
	if len(id) > int(LimitID.Max) {
		return invalid(field, "%s %s is not an id: ids are at most %d characters", field, quote(ShortID(id)), LimitID.Max)
	}
	if strings.ContainsFunc(id, IsControl) {
		return invalid(field, "%s %s holds a control character", field, strconv.Quote(ShortID(id)))
	}
	return nil
}

// checkIDList checks a list of ids: its length, each id, no repeats.
func checkIDList(field string, ids []string, l Limit) error {
	if err := l.CheckCount(field, len(ids)); err != nil {
		return err
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if err := checkID(field, id); err != nil {
			return err
		}
		if seen[id] {
			return invalid(field, "%s: %s is given twice", field, quote(ShortID(id)))
		}
		seen[id] = true
	}
	return nil
}

// checkGPUList checks a gpuTypeIds list (CheckGPUIDs) and its length.
// With v2 (RunPod's REST v2 rule) each "-" exclusion must name a GPU type
// of one of the listed pools, and the exclusions must leave a type.
func checkGPUList(field string, ids []string, v2 bool) ([]string, error) {
	if err := LimitGPUIDs.CheckCount(field, len(ids)); err != nil {
		return nil, err
	}
	w, err := CheckGPUIDs(field, ids)
	if err != nil || !v2 {
		return w, err
	}
	var pools, types, excluded []string
	for _, id := range ids {
		if ex, ok := strings.CutPrefix(id, "-"); ok {
			excluded = append(excluded, strings.TrimSpace(ex))
		} else if gpu.IsPoolID(id) {
			pools = append(pools, id)
		} else {
			types = append(types, id)
		}
	}
	if len(excluded) == 0 {
		return w, nil
	}
	left := slices.Clone(types)
	for _, m := range gpu.Models {
		if slices.Contains(pools, m.Pool) && !slices.Contains(left, m.ID) {
			left = append(left, m.ID)
		}
	}
	for _, ex := range excluded {
		if !slices.Contains(left, ex) {
			return nil, invalid(field, "%s: excluded type %s is not a GPU type of the pools %s", field, quote(ShortID(ex)), strings.Join(pools, ", "))
		}
	}
	left = slices.DeleteFunc(left, func(t string) bool { return slices.Contains(excluded, t) })
	if len(left) == 0 {
		return nil, invalid(field, "%s: the exclusions leave no GPU type in the pools %s", field, strings.Join(pools, ", "))
	}
	return w, nil
}

// checkCPUFlavors checks cpuFlavorIds: known flavours, each once.
func checkCPUFlavors(field string, ids []string) error {
	seen := map[string]bool{}
	for _, c := range ids {
		if !slices.Contains(CPUFlavors, c) {
			return invalid(field, "%s: %s is not one of %s", field, quote(ShortID(c)), strings.Join(CPUFlavors, ", "))
		}
		if seen[c] {
			return invalid(field, "%s: %s is given twice", field, quote(c))
		}
		seen[c] = true
	}
	return nil
}

// checkVCPUs checks a vCPU count: LimitVCPUs and a power of two.
func checkVCPUs(field string, n int) error {
	if err := LimitVCPUs.CheckAs(field, int64(n)); err != nil {
		return err
	}
	if !isPowerOfTwo(int64(n)) {
		return invalid(field, "%s must be a power of two (2, 4, 8, …), got %d", field, n)
	}
	return nil
}

// instanceRe is a RunPod CPU instance id: flavour-vCPUs-memory GB
// ("cpu3c-2-4").
var instanceRe = regexp.MustCompile(`^(cpu[0-9][a-z])-([0-9]{1,4})-([0-9]{1,5})$`)

func checkInstanceIDs(ids []string) error {
	if err := LimitInstanceIDs.CheckCount("instanceIds", len(ids)); err != nil {
		return err
	}
	for _, id := range ids {
		if _, _, err := ParseInstanceID("instanceIds", id); err != nil {
			return err
		}
	}
	return nil
}

// ParseInstanceID reads a RunPod CPU instance id ("cpu3c-2-4": flavour,
// vCPUs, memory GB; the memory may be left out) as a CPU flavour and a
// vCPU count, each checked as cpuFlavorIds and a CPU pod's vcpuCount are;
// a refusal names field.
func ParseInstanceID(field, id string) (flavor string, vcpus int, err error) {
	m := instanceRe.FindStringSubmatch(id)
	if m == nil {
		if slices.Contains(CPUFlavors, id) {
			return id, 0, nil // a flavour alone: its default vCPUs
		}
		if f, n, ok := strings.Cut(id, "-"); ok && !strings.Contains(n, "-") {
			m = []string{id, f, n, ""}
		}
	}
	if m == nil || !slices.Contains(CPUFlavors, m[1]) {
		return "", 0, invalid(field, "%s: %s is not a CPU instance id such as \"cpu3c-2-4\" (flavour %s, vCPUs, GB)", field, quote(ShortID(id)), strings.Join(CPUFlavors, "/"))
	}
	n, err := strconv.Atoi(m[2])
	if err != nil {
		return "", 0, invalid(field, "%s: %s: the vCPU count (the second part) is not a number", field, quote(ShortID(id)))
	}
	if err := checkVCPUs(field, n); err != nil {
		return "", 0, err
	}
	return m[1], n, nil
}

// checkCudaVersions checks a list of CUDA versions ("12.4").
func checkCudaVersions(vs []string) error {
	if err := LimitCudaVersions.CheckCount("allowedCudaVersions", len(vs)); err != nil {
		return err
	}
	for _, v := range vs {
		if !cudaRe.MatchString(v) {
			return invalid("allowedCudaVersions", "allowedCudaVersions: %s is not a CUDA version such as \"12.4\"", quote(ShortID(v)))
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

// applyDisks checks and applies the disk fields templates and pods share;
// nothing is applied when any of them is refused. A pod volume is 0 (none)
// or LimitPodVolume.
func applyDisks(disk, volume *int, mount *string, toDisk, toVolume *int, toMount *string) error {
	if disk != nil {
		if err := LimitContainerDisk.Check(int64(*disk)); err != nil {
			return err
		}
	}
	if volume != nil && *volume != 0 {
		if err := LimitPodVolume.Check(int64(*volume)); err != nil {
			return invalid("volumeInGb", "volumeInGb must be 0 (no pod volume) or %s, got %d", LimitPodVolume.Range(), *volume)
		}
	}
	if mount != nil {
		if err := LimitMountPath.CheckLen("volumeMountPath", *mount); err != nil {
			return err
		}
		if err := CheckText("volumeMountPath", *mount, false); err != nil {
			return err
		}
		if !path.IsAbs(*mount) {
			return invalid("volumeMountPath", "volumeMountPath must be an absolute path, got %s", quote(ShortID(*mount)))
		}
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

// CheckModelReferences is the one rule of an endpoint's model references:
// at most LimitModelRefs, each one line of text and a Hugging Face
// reference (hfcache.ParseRef), none naming the same model twice.
func CheckModelReferences(field string, refs []string) error {
	if err := LimitModelRefs.CheckCount(field, len(refs)); err != nil {
		return err
	}
	seen := map[hfcache.Ref]bool{}
	for i, s := range refs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := CheckText(f, s, false); err != nil {
			return invalid(field, "%v", err)
		}
		r, err := hfcache.ParseRef(s)
		if err != nil {
			return invalid(field, "%s: %v", f, err)
		}
		if seen[r] {
			return invalid(field, "%s: %s is given twice", f, quote(s))
		}
		seen[r] = true
	}
	return nil
}
