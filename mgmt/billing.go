package mgmt

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"berth/store"
)

// Billing: recorded usage intervals (store.UsageInterval, written by the
// runtime when containers start and stop and by the volume operations)
// priced with the operator's price table, summed per time bucket and group.

// PricesFile is the price table's name in the data directory.
const PricesFile = "prices.json"

// hoursPerMonth turns a GB-month price into an hourly one (365 × 24 / 12).
const hoursPerMonth = 730

// Prices is the operator's price table (<data dir>/prices.json), in USD.
// Missing prices are zero; without the file everything costs nothing.
//
//	{
//	  "gpuHourly": {"NVIDIA GeForce RTX 4090": 0.69, "NVIDIA A40": 0.39},
//	  "vcpuHourly": 0.02,
//	  "volumeGbMonthly": 0.07
//	}
type Prices struct {
	// GPUHourly is the price of one GPU of a type (a RunPod gpuTypeId)
	// for one hour.
	GPUHourly map[string]float64 `json:"gpuHourly"`
	// VCPUHourly is the price of one vCPU for one hour, charged for every
	// pod and worker (GPU ones too: set it to 0 when GPU prices include
	// the CPUs).
	VCPUHourly float64 `json:"vcpuHourly"`
	// VolumeGBMonthly is the price of one GB of network volume for one
	// month (730 hours), charged on the volume's size.
	VolumeGBMonthly float64 `json:"volumeGbMonthly"`
}

// Hourly is the price of an hour of gpus GPUs of gpuType and vcpus vCPUs.
func (p Prices) Hourly(gpuType string, gpus, vcpus int) float64 {
	return float64(gpus)*p.GPUHourly[gpuType] + float64(vcpus)*p.VCPUHourly
}

// LoadPrices reads a price table; a missing file is the zero table.
func LoadPrices(path string) (Prices, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Prices{}, nil
	}
	if err != nil {
		return Prices{}, fmt.Errorf("read price table: %w", err)
	}
	var p Prices
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Prices{}, fmt.Errorf("price table %s: %w", path, err)
	}
	bad := p.VCPUHourly < 0 || p.VolumeGBMonthly < 0
	for _, v := range p.GPUHourly {
		bad = bad || v < 0
	}
	if bad {
		return Prices{}, fmt.Errorf("price table %s: prices must not be negative", path)
	}
	return p, nil
}

// Prices reads the data directory's price table.
func (s *Service) Prices() (Prices, error) {
	return LoadPrices(filepath.Join(s.cfg.DataDir, PricesFile))
}

// PricesOrZero is the price table for views (a pod's costPerHr): a broken
// file is logged and counts as zero there; Billing reports it.
func (s *Service) PricesOrZero() Prices {
	p, err := s.Prices()
	if err != nil {
		s.cfg.Logger.Warn("price table unusable; showing zero costs", "err", err)
	}
	return p
}

// BillKind is what a billing query covers.
type BillKind int

const (
	BillPods BillKind = iota
	BillEndpoints
	BillVolumes
)

// BucketSizes are the accepted BillingQuery.Bucket values.
var BucketSizes = []string{"hour", "day", "week", "month", "year"}

// Groupings are the accepted BillingQuery.Grouping values per kind, the
// default first.
var Groupings = map[BillKind][]string{
	BillPods:      {"gpuTypeId", "podId"},
	BillEndpoints: {"endpointId", "podId", "gpuTypeId"},
}

// DefaultBillingWindow is the period billed when Start is zero.
const DefaultBillingWindow = 30 * 24 * time.Hour

// BillingQuery selects and groups usage. Zero values take the defaults:
// bucket "day", the kind's first grouping, End now, Start End-30 days.
type BillingQuery struct {
	Kind                                     BillKind
	Bucket, Grouping                         string
	Start, End                               time.Time
	PodID, EndpointID, ImageName, TemplateID string
	GPUTypeIDs, DataCenterIDs                []string
	// VolumeID selects one network volume; PerVolume gives each volume
	// its own records (REST v2) instead of one per bucket (v1).
	VolumeID  string
	PerVolume bool
}

// BillingRecord is one bucket of one group (RunPod BillingRecord).
type BillingRecord struct {
	Amount            float64   `json:"amount"`
	Time              time.Time `json:"time"`
	TimeBilledMs      int64     `json:"timeBilledMs"`
	DiskSpaceBilledGb int       `json:"diskSpaceBilledGb"`
	PodID             string    `json:"podId,omitempty"`
	EndpointID        string    `json:"endpointId,omitempty"`
	GPUTypeID         string    `json:"gpuTypeId,omitempty"`
	// GPUAmount and CPUAmount split Amount (REST v2 shows them).
	GPUAmount float64 `json:"-"`
	CPUAmount float64 `json:"-"`
}

// VolumeBillingRecord is one bucket of network volume storage.
type VolumeBillingRecord struct {
	Amount                                  float64   `json:"amount"`
	Time                                    time.Time `json:"time"`
	DiskSpaceBilledGb                       int       `json:"diskSpaceBilledGb"`
	HighPerformanceStorageAmount            float64   `json:"highPerformanceStorageAmount"`
	HighPerformanceStorageDiskSpaceBilledGb int       `json:"highPerformanceStorageDiskSpaceBilledGb"`
	VolumeID                                string    `json:"-"` // with PerVolume
}

// Bills are a billing answer: Compute for pods and endpoints, Volumes for
// network volumes.
type Bills struct {
	Compute []BillingRecord
	Volumes []VolumeBillingRecord
}

// normalise fills the defaults and checks q.
func (q *BillingQuery) normalise(now time.Time) error {
	if q.Bucket == "" {
		q.Bucket = "day"
	}
	if !slices.Contains(BucketSizes, q.Bucket) {
		return invalid("bucketSize", "bucketSize must be one of hour, day, week, month, year, got %q", q.Bucket)
	}
	if gs := Groupings[q.Kind]; len(gs) > 0 {
		if q.Grouping == "" {
			q.Grouping = gs[0]
		}
		if !slices.Contains(gs, q.Grouping) {
			return invalid("grouping", "grouping must be one of %s, got %q", joinSorted(gs), q.Grouping)
		}
	} else {
		q.Grouping = ""
	}
	if q.End.IsZero() {
		q.End = now
	}
	if q.Start.IsZero() {
		q.Start = q.End.Add(-DefaultBillingWindow)
	}
	q.Start, q.End = q.Start.UTC(), q.End.UTC()
	if !q.Start.Before(q.End) {
		return invalid("startTime", "startTime (%s) must be before endTime (%s)", q.Start.Format(time.RFC3339), q.End.Format(time.RFC3339))
	}
	return nil
}

// joinSorted lists values in the order v1 always named them.
func joinSorted(gs []string) string {
	order := []string{"endpointId", "podId", "gpuTypeId"}
	var out []string
	for _, o := range order {
		if slices.Contains(gs, o) {
			out = append(out, o)
		}
	}
	s := ""
	for i, v := range out {
		if i > 0 {
			s += ", "
		}
		s += v
	}
	return s
}

// bucketStart aligns t to the start of its bucket (UTC; weeks start on
// Monday).
func bucketStart(t time.Time, size string) time.Time {
	t = t.UTC()
	y, m, d := t.Date()
	switch size {
	case "hour":
		return t.Truncate(time.Hour)
	case "week":
		day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		return day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
	case "month":
		return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
	case "year":
		return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

func nextBucket(t time.Time, size string) time.Time {
	switch size {
	case "hour":
		return t.Add(time.Hour)
	case "week":
		return t.AddDate(0, 0, 7)
	case "month":
		return t.AddDate(0, 1, 0)
	case "year":
		return t.AddDate(1, 0, 0)
	}
	return t.AddDate(0, 0, 1)
}

// pieces splits [from, to) into its parts per bucket.
func pieces(from, to time.Time, size string, fn func(bucket time.Time, d time.Duration)) {
	for b := bucketStart(from, size); b.Before(to); b = nextBucket(b, size) {
		nb := nextBucket(b, size)
		ps, pe := maxTime(from, b), minTime(to, nb)
		if pe.After(ps) {
			fn(b, pe.Sub(ps))
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// roundUSD keeps amounts to a millionth of a dollar, so float noise does
// not show.
func roundUSD(v float64) float64 { return math.Round(v*1e6) / 1e6 }

func (q BillingQuery) matches(iv store.UsageInterval) bool {
	in := func(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }
	eq := func(want, got string) bool { return want == "" || want == got }
	switch q.Kind {
	case BillPods:
		return iv.Kind == store.UsagePod && eq(q.PodID, iv.ID) && in(q.GPUTypeIDs, gpuGroup(iv))
	case BillEndpoints:
		// Usage is recorded in this host's data centre only.
		return iv.Kind == store.UsageWorker && eq(q.EndpointID, iv.EndpointID) && eq(q.TemplateID, iv.TemplateID) &&
			eq(q.ImageName, iv.ImageName) && in(q.GPUTypeIDs, gpuGroup(iv)) && in(q.DataCenterIDs, DataCenterID)
	}
	return iv.Kind == store.UsageVolume && (q.VolumeID == "" || q.VolumeID == iv.ID)
}

// gpuGroup is an interval's gpuTypeId; CPU work is grouped as "CPU".
func gpuGroup(iv store.UsageInterval) string {
	if iv.GPUTypeID == "" || iv.GPUCount == 0 {
		return "CPU"
	}
	return iv.GPUTypeID
}

func (q BillingQuery) group(iv store.UsageInterval) string {
	switch q.Grouping {
	case "podId":
		return iv.ID
	case "endpointId":
		return iv.EndpointID
	}
	return gpuGroup(iv)
}

// Billing prices the usage q selects, in buckets, oldest first.
func (s *Service) Billing(ctx context.Context, q BillingQuery) (Bills, error) {
	if err := live(ctx); err != nil {
		return Bills{}, err
	}
	now := s.now()
	if err := q.normalise(now); err != nil {
		return Bills{}, err
	}
	prices, err := s.Prices()
	if err != nil {
		return Bills{}, err
	}
	type key struct {
		t     time.Time
		group string
	}
	compute := map[key]*BillingRecord{}
	type vkey struct {
		t  time.Time
		id string // with PerVolume
	}
	volumes := map[vkey]*VolumeBillingRecord{}
	volumeGB := map[vkey]map[string]int{} // per bucket: largest size of each volume
	err = store.UsageBetween(s.cfg.Store, q.Start, q.End, func(iv store.UsageInterval) error {
		if !q.matches(iv) {
			return nil
		}
		end := iv.End
		if end.IsZero() {
			end = now
		}
		from, to := maxTime(iv.Start, q.Start), minTime(end, q.End)
		pieces(from, to, q.Bucket, func(b time.Time, d time.Duration) {
			if q.Kind == BillVolumes {
				k := vkey{t: b}
				if q.PerVolume {
					k.id = iv.ID
				}
				rec := volumes[k]
				if rec == nil {
					rec = &VolumeBillingRecord{Time: b, VolumeID: k.id}
					volumes[k] = rec
					volumeGB[k] = map[string]int{}
				}
				rec.Amount += d.Hours() / hoursPerMonth * float64(iv.SizeGB) * prices.VolumeGBMonthly
				volumeGB[k][iv.ID] = max(volumeGB[k][iv.ID], iv.SizeGB)
				return
			}
			k := key{b, q.group(iv)}
			rec := compute[k]
			if rec == nil {
				rec = &BillingRecord{Time: b}
				switch q.Grouping {
				case "podId":
					rec.PodID = k.group
				case "endpointId":
					rec.EndpointID = k.group
				default:
					rec.GPUTypeID = k.group
				}
				compute[k] = rec
			}
			rec.Amount += d.Hours() * prices.Hourly(iv.GPUTypeID, iv.GPUCount, iv.VCPUCount)
			rec.GPUAmount += d.Hours() * prices.Hourly(iv.GPUTypeID, iv.GPUCount, 0)
			rec.CPUAmount += d.Hours() * prices.Hourly("", 0, iv.VCPUCount)
			rec.TimeBilledMs += d.Milliseconds()
		})
		return nil
	})
	if err != nil {
		return Bills{}, err
	}
	var out Bills
	if q.Kind == BillVolumes {
		out.Volumes = make([]VolumeBillingRecord, 0, len(volumes))
		for k, rec := range volumes {
			for _, gb := range volumeGB[k] {
				rec.DiskSpaceBilledGb += gb
			}
			rec.Amount = roundUSD(rec.Amount)
			out.Volumes = append(out.Volumes, *rec)
		}
		slices.SortFunc(out.Volumes, func(a, b VolumeBillingRecord) int {
			if c := a.Time.Compare(b.Time); c != 0 {
				return c
			}
			return cmp.Compare(a.VolumeID, b.VolumeID)
		})
		return out, nil
	}
	out.Compute = make([]BillingRecord, 0, len(compute))
	for _, rec := range compute {
		rec.Amount, rec.GPUAmount, rec.CPUAmount = roundUSD(rec.Amount), roundUSD(rec.GPUAmount), roundUSD(rec.CPUAmount)
		out.Compute = append(out.Compute, *rec)
	}
	slices.SortFunc(out.Compute, func(a, b BillingRecord) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.PodID+a.EndpointID+a.GPUTypeID, b.PodID+b.EndpointID+b.GPUTypeID)
	})
	return out, nil
}

// PodHourly is what a pod costs an hour now: the GPUs it holds (or, when
// stopped, the first type it asked for) and its vCPUs.
func (p Prices) PodHourly(pod store.Pod) float64 {
	gpuType, gpus := "", pod.GPUCount
	if pod.GPU != nil {
		gpuType, gpus = pod.GPU.ID, pod.GPU.Count
	} else if len(pod.GPUTypeIDs) > 0 {
		gpuType = pod.GPUTypeIDs[0]
	}
	return p.Hourly(gpuType, gpus, pod.VCPUCount)
}

// BucketStart and NextBucket align times to billing buckets (UTC; weeks
// start on Monday) for adapters that show each bucket's range.
func BucketStart(t time.Time, size string) time.Time { return bucketStart(t, size) }
func NextBucket(t time.Time, size string) time.Time  { return nextBucket(t, size) }

// RecordRunStart opens the usage interval of a pod or worker container that
// has started (the runtime reports its kind, id, endpoint and GPUs), adding
// what billing prices and filters on besides the GPUs: the vCPUs, template
// and image of the pod, or of the worker's endpoint and its template. The
// vCPUs are the record's vcpuCount, the figure RunPod bills (Berth does not
// cap a container's CPU). A record gone by now (deleted while starting)
// leaves them 0.
func RecordRunStart(db *store.DB, iv store.UsageInterval) error {
	return db.Update(func(tx *store.Tx) error {
		switch iv.Kind {
		case store.UsagePod:
			var p store.Pod
			if err := tx.Get(store.Pods, iv.ID, &p); err == nil {
				iv.VCPUCount, iv.TemplateID, iv.ImageName = p.VCPUCount, p.TemplateID, p.ImageName
			} else if !errors.Is(err, store.ErrNotFound) {
				return err
			}
		case store.UsageWorker:
			var e store.Endpoint
			if err := tx.Get(store.Endpoints, iv.EndpointID, &e); err == nil {
				iv.VCPUCount, iv.TemplateID = e.VCPUCount, e.TemplateID
				var t store.Template
				if err := tx.Get(store.Templates, e.TemplateID, &t); err == nil {
					iv.ImageName = t.ImageName
				} else if !errors.Is(err, store.ErrNotFound) {
					return err
				}
			} else if !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		return tx.StartUsage(iv)
	})
}
