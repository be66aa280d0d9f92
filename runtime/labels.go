package runtime

// Labels Berth puts on every instance (container or Pod) it creates. After
// a restart Berth rebuilds its view of workers, pods and GPU assignments
// from these alone.
const (
	LabelManaged  = "berth.managed"  // always "true"
	LabelKind     = "berth.kind"     // KindWorker or KindPod
	LabelEndpoint = "berth.endpoint" // endpoint id (workers)
	LabelWorker   = "berth.worker"   // worker id
	LabelPod      = "berth.pod"      // pod id
	LabelVersion  = "berth.version"  // endpoint/template version the instance runs
	LabelGPUs     = "berth.gpus"     // comma-joined GPU device ids
	// LabelDataDir holds an id of the Berth instance (a hash of its data
	// directory) so two Berths sharing one daemon or namespace never adopt
	// each other's workers.
	LabelDataDir = "berth.instance"
)

// Values of LabelKind.
const (
	KindWorker = "worker"
	KindPod    = "pod"
)
