package httpapi

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"berth/store"
)

// Billing: recorded usage intervals (store.UsageInterval, written by the
// runtime when containers start and stop and by the volume routes) priced
// with the operator's price table, summed per time bucket and group.

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

// hourly is the price of an hour of gpus GPUs of gpuType and vcpus vCPUs.
func (p Prices) hourly(gpuType string, gpus, vcpus int) float64 {
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

func (s *Server) prices() (Prices, error) {
	return LoadPrices(filepath.Join(s.dataDir(), PricesFile))
}

// pricesOrZero is the price table for views (a pod's costPerHr): a broken
// file is logged and counts as zero there; billing reports it.
func (s *Server) pricesOrZero() Prices {
	p, err := s.prices()
	if err != nil {
		s.cfg.Logger.Warn("price table unusable; showing zero costs", "err", err)
	}
	return p
}

type billKind int

const (
	billPods billKind = iota
	billEndpoints
	billVolumes
)

var bucketSizes = []string{"hour", "day", "week", "month", "year"}

// defaultBillingWindow is the period billed when startTime is not given.
const defaultBillingWindow = 30 * 24 * time.Hour

// billingQuery is a parsed billing request.
type billingQuery struct {
	bucket, grouping                         string
	start, end                               time.Time
	podID, endpointID, imageName, templateID string
	gpuTypes, dataCenters                    []string
}

func parseTime(r *http.Request, name string, def time.Time) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, bad("%s must be an RFC 3339 time such as 2026-01-31T00:00:00Z, got %q", name, v)
	}
	return t.UTC(), nil
}

func parseBillingQuery(r *http.Request, kind billKind, now time.Time) (billingQuery, error) {
	var q billingQuery
	var err error
	if q.bucket, err = queryEnum(r, "bucketSize", "day", bucketSizes...); err != nil {
		return q, err
	}
	switch kind {
	case billPods:
		q.grouping, err = queryEnum(r, "grouping", "gpuTypeId", "podId", "gpuTypeId")
	case billEndpoints:
		q.grouping, err = queryEnum(r, "grouping", "endpointId", "endpointId", "podId", "gpuTypeId")
	}
	if err != nil {
		return q, err
	}
	if q.end, err = parseTime(r, "endTime", now); err != nil {
		return q, err
	}
	if q.start, err = parseTime(r, "startTime", q.end.Add(-defaultBillingWindow)); err != nil {
		return q, err
	}
	if !q.start.Before(q.end) {
		return q, bad("startTime (%s) must be before endTime (%s)", q.start.Format(time.RFC3339), q.end.Format(time.RFC3339))
	}
	v := r.URL.Query()
	q.podID, q.endpointID, q.imageName, q.templateID = v.Get("podId"), v.Get("endpointId"), v.Get("imageName"), v.Get("templateId")
	q.gpuTypes, q.dataCenters = queryList(r, "gpuTypeId"), queryList(r, "dataCenterId")
	return q, nil
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
}

// VolumeBillingRecord is one bucket of network volume storage.
type VolumeBillingRecord struct {
	Amount                                  float64   `json:"amount"`
	Time                                    time.Time `json:"time"`
	DiskSpaceBilledGb                       int       `json:"diskSpaceBilledGb"`
	HighPerformanceStorageAmount            float64   `json:"highPerformanceStorageAmount"`
	HighPerformanceStorageDiskSpaceBilledGb int       `json:"highPerformanceStorageDiskSpaceBilledGb"`
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

func (q billingQuery) matches(kind billKind, iv store.UsageInterval) bool {
	in := func(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }
	eq := func(want, got string) bool { return want == "" || want == got }
	switch kind {
	case billPods:
		return iv.Kind == store.UsagePod && eq(q.podID, iv.ID) && in(q.gpuTypes, gpuGroup(iv))
	case billEndpoints:
		return iv.Kind == store.UsageWorker && eq(q.endpointID, iv.EndpointID) && eq(q.templateID, iv.TemplateID) &&
			eq(q.imageName, iv.ImageName) && in(q.gpuTypes, gpuGroup(iv)) && (len(q.dataCenters) == 0 || slices.Contains(q.dataCenters, DataCenterID))
	}
	return iv.Kind == store.UsageVolume
}

// gpuGroup is an interval's gpuTypeId; CPU work is grouped as "CPU".
func gpuGroup(iv store.UsageInterval) string {
	if iv.GPUTypeID == "" || iv.GPUCount == 0 {
		return "CPU"
	}
	return iv.GPUTypeID
}

func (q billingQuery) group(iv store.UsageInterval) string {
	switch q.grouping {
	case "podId":
		return iv.ID
	case "endpointId":
		return iv.EndpointID
	}
	return gpuGroup(iv)
}

func (s *Server) billing(kind billKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		now := s.now()
		q, err := parseBillingQuery(r, kind, now)
		if err != nil {
			s.mgmtErr(w, r, err)
			return
		}
		prices, err := s.prices()
		if err != nil {
			s.internal(w, r, err)
			return
		}
		type key struct {
			t     time.Time
			group string
		}
		compute := map[key]*BillingRecord{}
		volumes := map[time.Time]*VolumeBillingRecord{}
		volumeGB := map[time.Time]map[string]int{} // per bucket: largest size of each volume
		err = store.UsageBetween(s.cfg.Store, q.start, q.end, func(iv store.UsageInterval) error {
			if !q.matches(kind, iv) {
				return nil
			}
			end := iv.End
			if end.IsZero() {
				end = now
			}
			from, to := maxTime(iv.Start, q.start), minTime(end, q.end)
			pieces(from, to, q.bucket, func(b time.Time, d time.Duration) {
				if kind == billVolumes {
					rec := volumes[b]
					if rec == nil {
						rec = &VolumeBillingRecord{Time: b}
						volumes[b] = rec
						volumeGB[b] = map[string]int{}
					}
					rec.Amount += d.Hours() / hoursPerMonth * float64(iv.SizeGB) * prices.VolumeGBMonthly
					volumeGB[b][iv.ID] = max(volumeGB[b][iv.ID], iv.SizeGB)
					return
				}
				k := key{b, q.group(iv)}
				rec := compute[k]
				if rec == nil {
					rec = &BillingRecord{Time: b}
					switch q.grouping {
					case "podId":
						rec.PodID = k.group
					case "endpointId":
						rec.EndpointID = k.group
					default:
						rec.GPUTypeID = k.group
					}
					compute[k] = rec
				}
				rec.Amount += d.Hours() * prices.hourly(iv.GPUTypeID, iv.GPUCount, iv.VCPUCount)
				rec.TimeBilledMs += d.Milliseconds()
			})
			return nil
		})
		if err != nil {
			s.internal(w, r, err)
			return
		}
		if kind == billVolumes {
			out := make([]VolumeBillingRecord, 0, len(volumes))
			for b, rec := range volumes {
				for _, gb := range volumeGB[b] {
					rec.DiskSpaceBilledGb += gb
				}
				rec.Amount = roundUSD(rec.Amount)
				out = append(out, *rec)
			}
			slices.SortFunc(out, func(a, b VolumeBillingRecord) int { return a.Time.Compare(b.Time) })
			writeJSON(w, http.StatusOK, out)
			return
		}
		out := make([]BillingRecord, 0, len(compute))
		for _, rec := range compute {
			rec.Amount = roundUSD(rec.Amount)
			out = append(out, *rec)
		}
		slices.SortFunc(out, func(a, b BillingRecord) int {
			if c := a.Time.Compare(b.Time); c != 0 {
				return c
			}
			return cmp.Compare(a.PodID+a.EndpointID+a.GPUTypeID, b.PodID+b.EndpointID+b.GPUTypeID)
		})
		writeJSON(w, http.StatusOK, out)
	}
}
