package mgmt

import (
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Limits: every count, size, length and numeric range of management input,
// in one table that every surface (REST v1, REST v2, GraphQL) applies
// through the rules here. Where RunPod documents a range (v1.json,
// v2.json) it is RunPod's; elsewhere it is Berth's, chosen so that no
// stored value overflows any surface (GraphQL's Int is 32 bits) and no
// single request can make a record the host cannot serve.

// Limit is the inclusive range of one field: a number's value, a string's
// length in characters, or a list's or map's number of entries.
type Limit struct {
	Field    string // mgmt's (v1's) name of the field
	Min, Max int64
	Unit     string // "GB", "seconds", "characters", "entries", …
	// RunPod: the range is the one RunPod documents (Source says where);
	// otherwise it is Berth's own.
	Source string
}

var (
	// Names of templates, endpoints, pods, network volumes and registry
	// auths: v1.json's Pod.name maxLength, applied to every name.
	LimitName = Limit{"name", 1, 191, "characters", "v1.json Pod.name maxLength"}
	// An image reference: a repository name is at most 255 characters
	// (distribution/reference), a tag 128, a digest 71.
	LimitImage = Limit{"imageName", 1, 512, "characters", ""}
	// A command (dockerStartCmd, dockerEntrypoint, v2's args): words and
	// their total length.
	LimitCmdWords = Limit{"dockerStartCmd", 0, 1024, "words", ""}
	LimitCmdChars = Limit{"dockerStartCmd", 0, 32768, "characters", ""}
	// Environment: entries, and each name's and value's length.
	LimitEnvEntries = Limit{"env", 0, 512, "entries", ""}
	LimitEnvName    = Limit{"env", 1, 256, "characters", ""}
	LimitEnvValue   = Limit{"env", 0, 32768, "characters", ""}
	LimitPorts      = Limit{"ports", 0, 64, "entries", ""}
	LimitReadme     = Limit{"readme", 0, 65536, "characters", ""}
	LimitMountPath  = Limit{"volumeMountPath", 1, 1024, "characters", ""}
	// The container disk: v2.json's disk minimum 1.
	LimitContainerDisk = Limit{"containerDiskInGb", 1, 4096, "GB", "v2.json ContainerConfig.disk minimum 1"}
	// The pod volume: 0 (none) or v2.json's PersistentMount floor of 10 GB
	// up to the largest network volume.
	LimitPodVolume = Limit{"volumeInGb", 10, 4096, "GB", "v2.json PersistentMount.size minimum 10"}
	// Network volumes: v2.json's range (v1.json says 0-4000; v2 is
	// RunPod's current API, and its 10 GB floor is upstream's).
	LimitVolumeSize = Limit{"size", 10, 4096, "GB", "v2.json CreateNetworkVolumeRequest.size"}
	// A worker's /dev/shm (Berth's field): 0 (the rule) or 64 MiB, Docker's
	// default, up to 1 TiB.
	LimitShmSize  = Limit{"shmSizeInMb", 64, 1 << 20, "MB", ""}
	LimitGPUCount = Limit{"gpuCount", 1, 16, "GPUs", "v1.json/v2.json minimum 1"}
	// vCPUs of a CPU pod or endpoint: v2.json's minimum 2, and a power of
	// two (its text); beside GPUs any count from 1.
	LimitVCPUs       = Limit{"vcpuCount", 2, 256, "vCPUs", "v2.json CpuConfig.vcpuCount minimum 2, a power of two"}
	LimitVCPUsBeside = Limit{"vcpuCount", 1, 256, "vCPUs", ""}
	LimitWorkersMin  = Limit{"workersMin", 0, 1000, "workers", "v1.json/v2.json minimum 0"}
	LimitWorkersMax  = Limit{"workersMax", 0, 1000, "workers", "v1.json/v2.json minimum 0"}
	LimitIdleTimeout = Limit{"idleTimeout", 1, 3600, "seconds", "v1.json/v2.json 1-3600"}
	// scalerValue: seconds of queue delay, or requests per worker.
	LimitQueueDelay   = Limit{"scalerValue", 1, 3600, "seconds", "v1.json scalerValue minimum 1"}
	LimitRequestCount = Limit{"scalerValue", 1, 1000, "requests", "v1.json scalerValue minimum 1"}
	// The execution timeout: the queue's bounds (5 s to 7 days).
	LimitExecTimeout = Limit{"executionTimeoutMs", 5000, 7 * 24 * 3600 * 1000, "ms", ""}
	// Lists of ids.
	LimitGPUIDs       = Limit{"gpuTypeIds", 0, 64, "entries", ""}
	LimitDataCenters  = Limit{"dataCenterIds", 0, 64, "entries", ""}
	LimitVolumeIDs    = Limit{"networkVolumeIds", 0, 32, "entries", ""}
	LimitInstanceIDs  = Limit{"instanceIds", 0, 64, "entries", ""}
	LimitCudaVersions = Limit{"allowedCudaVersions", 0, 32, "entries", ""}
	LimitCountryCodes = Limit{"countryCodes", 0, 64, "entries", ""}
	LimitModelRefs    = Limit{"modelReferences", 0, 16, "entries", ""}
	// Any id a request names (templateId, a volume id, a GPU type…).
	LimitID = Limit{"id", 1, 128, "characters", ""}
	// Pods' placement hints.
	LimitMinRAMPerGPU  = Limit{"minRAMPerGPU", 0, 4096, "GB", ""}
	LimitMinVCPUPerGPU = Limit{"minVCPUPerGPU", 0, 256, "vCPUs", ""}
	LimitBandwidth     = Limit{"minDownloadMbps", 0, 1_000_000, "Mbps", ""}
	// Registry credentials (a cloud registry's token can be long).
	LimitRegistryUser     = Limit{"username", 1, 1024, "characters", ""}
	LimitRegistryPassword = Limit{"password", 1, 16384, "characters", ""}
	// The account's SSH keys.
	LimitSSHKeys   = Limit{"keys", 0, 64, "entries", ""}
	LimitSSHKeyLen = Limit{"keys", 1, 16384, "characters", ""}
	// The Hugging Face token (the Hub's are ~40 characters).
	LimitHFToken = Limit{"token", 1, 4096, "characters", ""}
)

// AllLimits is the table, for documents and tests.
var AllLimits = []Limit{
	LimitName, LimitImage, LimitCmdWords, LimitCmdChars, LimitEnvEntries, LimitEnvName, LimitEnvValue, LimitPorts,
	LimitReadme, LimitMountPath, LimitContainerDisk, LimitPodVolume, LimitVolumeSize, LimitShmSize, LimitGPUCount, LimitVCPUs, LimitVCPUsBeside,
	LimitWorkersMin, LimitWorkersMax, LimitIdleTimeout, LimitQueueDelay, LimitRequestCount, LimitExecTimeout,
	LimitGPUIDs, LimitDataCenters, LimitVolumeIDs, LimitInstanceIDs, LimitCudaVersions, LimitCountryCodes, LimitModelRefs, LimitID,
	LimitMinRAMPerGPU, LimitMinVCPUPerGPU, LimitBandwidth, LimitRegistryUser, LimitRegistryPassword,
	LimitSSHKeys, LimitSSHKeyLen, LimitHFToken,
}

// LimitOf returns the numeric limit of a field by mgmt's (v1's) name, for
// decoders that meet a number too large for Go's int.
func LimitOf(field string) (Limit, bool) {
	for _, l := range AllLimits {
		if l.Field == field && l.Unit != "characters" && l.Unit != "entries" && l.Unit != "words" {
			return l, true
		}
	}
	return Limit{}, false
}

// Range says the limit for a message: "1-3600 seconds".
func (l Limit) Range() string {
	return fmt.Sprintf("%d-%d %s", l.Min, l.Max, l.Unit)
}

// Check refuses v outside the limit, naming the field.
func (l Limit) Check(v int64) error { return l.CheckAs(l.Field, v) }

// CheckAs is Check naming the field as field (a surface's own name, or a
// list entry "env[\"A\"]").
func (l Limit) CheckAs(field string, v int64) error {
	if v < l.Min || v > l.Max {
		return invalid(field, "%s must be %s, got %d", field, l.Range(), v)
	}
	return nil
}

// CheckFloat checks a number given as a float (v2's queueDelay seconds, or
// a decoder's value too large for an int): NaN and infinities are refused
// like any value out of range, and v is shown as given.
func (l Limit) CheckFloat(field string, v float64) error {
	if math.IsNaN(v) || v < float64(l.Min) || v > float64(l.Max) {
		return invalid(field, "%s must be %s, got %s", field, l.Range(), strconv.FormatFloat(v, 'g', -1, 64))
	}
	return nil
}

// OutOfRange is the refusal of a number a decoder could not hold (1e20 for
// an integer field), naming the field and, when mgmt knows it, its range.
func OutOfRange(field, number string) error {
	number = ShortID(number)
	if l, ok := LimitOf(field); ok {
		return invalid(field, "%s must be %s, got %s", field, l.Range(), number)
	}
	return invalid(field, "%s: %s is not a number this field can hold", field, number)
}

// CheckLen refuses a string whose length in characters is outside the
// limit.
func (l Limit) CheckLen(field, s string) error {
	n := int64(utf8.RuneCountInString(s))
	if n < l.Min || n > l.Max {
		if l.Min > 0 && n < l.Min {
			return invalid(field, "%s must not be empty", field)
		}
		return invalid(field, "%s must be at most %d characters, got %d", field, l.Max, n)
	}
	return nil
}

// CheckCount refuses a list or map with more entries than the limit.
func (l Limit) CheckCount(field string, n int) error {
	if int64(n) < l.Min || int64(n) > l.Max {
		return invalid(field, "%s must have %d-%d %s, got %d", field, l.Min, l.Max, l.Unit, n)
	}
	return nil
}

// maxShownID is the longest id an error message repeats whole.
const maxShownID = 64

// ShortID is id as an error message may show it: whole when short, else
// its start and its length, so a client's 60 KB id is not echoed back.
func ShortID(id string) string {
	if len(id) <= maxShownID {
		return id
	}
	cut := 32
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", id[:cut], len(id))
}

// maxMessage bounds an error message a surface sends; a longer one is cut
// (ShortID keeps ids short; this is the guard for anything else echoed).
const maxMessage = 2048

// ClipMessage cuts an error message to a bounded length.
func ClipMessage(msg string) string {
	if len(msg) <= maxMessage {
		return msg
	}
	cut := maxMessage
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + fmt.Sprintf("…(%d bytes)", len(msg))
}

// isPowerOfTwo reports whether n is 1, 2, 4, 8, …
func isPowerOfTwo(n int64) bool { return n > 0 && n&(n-1) == 0 }
