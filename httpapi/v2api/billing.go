package v2api

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"berth/mgmt"
)

// Billing from the run intervals Berth records (pods, serverless workers,
// network volume sizes), priced by prices.json. A single host has no
// clusters, so cluster billing is always empty; disk is not billed
// separately (its amounts are 0) and every volume is billed at the one
// volume price, as standard storage.

// billingQuery is v2's BillingQuery with the per-family id.
type billingQuery struct {
	StartTime       time.Time `json:"startTime"`
	EndTime         time.Time `json:"endTime"`
	BucketSize      string    `json:"bucketSize"`
	PodID           *string   `json:"podId,omitempty"`
	ServerlessID    *string   `json:"serverlessId,omitempty"`
	NetworkVolumeID *string   `json:"networkVolumeId,omitempty"`
	ClusterID       *string   `json:"clusterId,omitempty"`
}

// parseBilling reads the shared query; idParam is the family's id filter.
func (a *API) parseBilling(r *http.Request, idParam string) (mgmt.BillingQuery, billingQuery, string, error) {
	q := r.URL.Query()
	var mq mgmt.BillingQuery
	var bq billingQuery
	// The parameters' schemas are checked (params.go); their rules here.
	if q.Has("lastN") && (q.Has("startTime") || q.Has("endTime")) {
		f := "startTime"
		if !q.Has(f) {
			f = "endTime"
		}
		return mq, bq, "", mgmt.InvalidInput("lastN", "lastN and %s are mutually exclusive: give the last N buckets or a time range", f)
	}
	mq.Bucket = q.Get("bucketSize")
	if mq.Bucket == "" {
		mq.Bucket = "day"
	}
	if !slices.Contains(mgmt.BucketSizes, mq.Bucket) {
		return mq, bq, "", bad("bucketSize", "bucketSize must be one of hour, day, week, month, year, got %q", mq.Bucket)
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"startTime", &mq.Start}, {"endTime", &mq.End}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return mq, bq, "", bad(p.name, "%s must be an RFC 3339 time, got %q", p.name, v)
			}
			*p.dst = t.UTC()
		}
	}
	now := a.cfg.Clock.Now().UTC()
	if mq.End.IsZero() {
		mq.End = now
	}
	if v := q.Get("lastN"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return mq, bq, "", bad("lastN", "lastN must be a positive integer, got %q", v)
		}
		if mq.Start.IsZero() {
			// The last n buckets up to endTime.
			b := mgmt.BucketStart(mq.End, mq.Bucket)
			for i := 1; i < n; i++ {
				b = prevBucket(b, mq.Bucket)
			}
			mq.Start = b
		}
	}
	if mq.Start.IsZero() {
		mq.Start = mq.End.Add(-mgmt.DefaultBillingWindow)
	}
	if !mq.Start.Before(mq.End) {
		return mq, bq, "", mgmt.InvalidInput("startTime", "startTime must be before endTime")
	}
	bq = billingQuery{StartTime: mq.Start, EndTime: mq.End, BucketSize: mq.Bucket}
	id := ""
	if idParam != "" {
		id = q.Get(idParam)
	}
	return mq, bq, id, nil
}

func prevBucket(t time.Time, size string) time.Time {
	switch size {
	case "hour":
		return t.Add(-time.Hour)
	case "week":
		return t.AddDate(0, 0, -7)
	case "month":
		return t.AddDate(0, -1, 0)
	case "year":
		return t.AddDate(-1, 0, 0)
	}
	return t.AddDate(0, 0, -1)
}

// timeRange is v2's BillingTimeRange of a bucket, clipped to the query.
type timeRange struct {
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
}

func bucketRange(start time.Time, q mgmt.BillingQuery) timeRange {
	return timeRange{StartTime: start, EndTime: mgmt.NextBucket(start, q.Bucket)}
}

type podAmounts struct {
	TotalAmount float64 `json:"totalAmount"`
	GPUAmount   float64 `json:"gpuAmount"`
	CPUAmount   float64 `json:"cpuAmount"`
	DiskAmount  float64 `json:"diskAmount"`
}

type podRecord struct {
	timeRange
	podAmounts
	PodID string `json:"podId"`
}

type serverlessAmounts struct {
	podAmounts
	FeeAmount float64 `json:"feeAmount"`
}

type serverlessRecord struct {
	timeRange
	serverlessAmounts
	ServerlessID string `json:"serverlessId"`
}

type totalAmount struct {
	TotalAmount float64 `json:"totalAmount"`
}

type endpointRecord struct {
	timeRange
	totalAmount
}

type volumeAmounts struct {
	TotalAmount           float64 `json:"totalAmount"`
	StandardAmount        float64 `json:"standardAmount"`
	HighPerformanceAmount float64 `json:"highPerformanceAmount"`
}

type volumeRecord struct {
	timeRange
	volumeAmounts
	NetworkVolumeID string `json:"networkVolumeId"`
}

type clusterAmounts struct {
	TotalAmount      float64 `json:"totalAmount"`
	GPUAmount        float64 `json:"gpuAmount"`
	DiskAmount       float64 `json:"diskAmount"`
	NetworkingAmount float64 `json:"networkingAmount"`
}

// allAmounts is v2's BillingAmounts.
type allAmounts struct {
	TotalAmount                  float64 `json:"totalAmount"`
	PodGPUAmount                 float64 `json:"podGpuAmount"`
	PodCPUAmount                 float64 `json:"podCpuAmount"`
	PodDiskAmount                float64 `json:"podDiskAmount"`
	ServerlessGPUAmount          float64 `json:"serverlessGpuAmount"`
	ServerlessCPUAmount          float64 `json:"serverlessCpuAmount"`
	ServerlessDiskAmount         float64 `json:"serverlessDiskAmount"`
	ServerlessFeeAmount          float64 `json:"serverlessFeeAmount"`
	StorageStandardAmount        float64 `json:"storageStandardAmount"`
	StorageHighPerformanceAmount float64 `json:"storageHighPerformanceAmount"`
	EndpointAmount               float64 `json:"endpointAmount"`
	ClusterGPUAmount             float64 `json:"clusterGpuAmount"`
	ClusterDiskAmount            float64 `json:"clusterDiskAmount"`
	ClusterNetworkingAmount      float64 `json:"clusterNetworkingAmount"`
}

type allRecord struct {
	timeRange
	allAmounts
}

// billingList is v2's List…BillingResponse: records and metadata.
type billingList[R any, T any] struct {
	Records  []R            `json:"records"`
	Metadata billingMeta[T] `json:"metadata"`
}

type billingMeta[T any] struct {
	Query                    billingQuery `json:"query"`
	RecordCount              int          `json:"recordCount"`
	Totals                   T            `json:"totals"`
	UniquePodCount           *int         `json:"uniquePodCount,omitempty"`
	UniqueServerlessCount    *int         `json:"uniqueServerlessCount,omitempty"`
	UniqueNetworkVolumeCount *int         `json:"uniqueNetworkVolumeCount,omitempty"`
	UniqueClusterCount       *int         `json:"uniqueClusterCount,omitempty"`
}

// writeBilling answers records with metadata; unique names the count
// field ("uniquePodCount"), "" for none.
func writeBilling[R any, T any](w http.ResponseWriter, records []R, q billingQuery, totals T, unique string, n int) {
	if records == nil {
		records = []R{}
	}
	out := billingList[R, T]{Records: records, Metadata: billingMeta[T]{Query: q, RecordCount: len(records), Totals: totals}}
	switch unique {
	case "uniquePodCount":
		out.Metadata.UniquePodCount = &n
	case "uniqueServerlessCount":
		out.Metadata.UniqueServerlessCount = &n
	case "uniqueNetworkVolumeCount":
		out.Metadata.UniqueNetworkVolumeCount = &n
	case "uniqueClusterCount":
		out.Metadata.UniqueClusterCount = &n
	}
	writeJSON(w, http.StatusOK, out)
}

func round(v float64) float64 { return float64(int64(v*1e6+0.5)) / 1e6 }

func (a *API) billingPods(w http.ResponseWriter, r *http.Request) {
	mq, bq, id, err := a.parseBilling(r, "podId")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	mq.Kind, mq.Grouping, mq.PodID = mgmt.BillPods, "podId", id
	if id != "" {
		bq.PodID = &id
	}
	bills, err := a.cfg.Mgmt.Billing(r.Context(), mq)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var recs []podRecord
	var tot podAmounts
	ids := map[string]bool{}
	for _, b := range bills.Compute {
		recs = append(recs, podRecord{bucketRange(b.Time, mq), podAmounts{TotalAmount: b.Amount, GPUAmount: b.GPUAmount, CPUAmount: b.CPUAmount}, b.PodID})
		tot.TotalAmount, tot.GPUAmount, tot.CPUAmount = tot.TotalAmount+b.Amount, tot.GPUAmount+b.GPUAmount, tot.CPUAmount+b.CPUAmount
		ids[b.PodID] = true
	}
	tot = podAmounts{TotalAmount: round(tot.TotalAmount), GPUAmount: round(tot.GPUAmount), CPUAmount: round(tot.CPUAmount)}
	writeBilling(w, recs, bq, tot, "uniquePodCount", len(ids))
}

func (a *API) billingServerless(w http.ResponseWriter, r *http.Request) {
	mq, bq, id, err := a.parseBilling(r, "serverlessId")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	mq.Kind, mq.Grouping, mq.EndpointID = mgmt.BillEndpoints, "endpointId", id
	if id != "" {
		bq.ServerlessID = &id
	}
	bills, err := a.cfg.Mgmt.Billing(r.Context(), mq)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var recs []serverlessRecord
	var tot serverlessAmounts
	ids := map[string]bool{}
	for _, b := range bills.Compute {
		am := serverlessAmounts{podAmounts: podAmounts{TotalAmount: b.Amount, GPUAmount: b.GPUAmount, CPUAmount: b.CPUAmount}}
		recs = append(recs, serverlessRecord{bucketRange(b.Time, mq), am, b.EndpointID})
		tot.TotalAmount, tot.GPUAmount, tot.CPUAmount = tot.TotalAmount+b.Amount, tot.GPUAmount+b.GPUAmount, tot.CPUAmount+b.CPUAmount
		ids[b.EndpointID] = true
	}
	tot.podAmounts = podAmounts{TotalAmount: round(tot.TotalAmount), GPUAmount: round(tot.GPUAmount), CPUAmount: round(tot.CPUAmount)}
	writeBilling(w, recs, bq, tot, "uniqueServerlessCount", len(ids))
}

// billingEndpoints: v2's endpoint billing is one total per bucket over all
// serverless endpoints.
func (a *API) billingEndpoints(w http.ResponseWriter, r *http.Request) {
	mq, bq, _, err := a.parseBilling(r, "")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	mq.Kind, mq.Grouping = mgmt.BillEndpoints, "endpointId"
	bills, err := a.cfg.Mgmt.Billing(r.Context(), mq)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var recs []endpointRecord
	var tot float64
	for _, b := range bills.Compute {
		if n := len(recs); n > 0 && recs[n-1].StartTime.Equal(b.Time) {
			recs[n-1].TotalAmount = round(recs[n-1].TotalAmount + b.Amount)
		} else {
			recs = append(recs, endpointRecord{bucketRange(b.Time, mq), totalAmount{b.Amount}})
		}
		tot += b.Amount
	}
	writeBilling(w, recs, bq, totalAmount{round(tot)}, "", 0)
}

func (a *API) billingVolumes(w http.ResponseWriter, r *http.Request) {
	mq, bq, id, err := a.parseBilling(r, "networkVolumeId")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	mq.Kind, mq.VolumeID, mq.PerVolume = mgmt.BillVolumes, id, true
	if id != "" {
		bq.NetworkVolumeID = &id
	}
	bills, err := a.cfg.Mgmt.Billing(r.Context(), mq)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var recs []volumeRecord
	var tot float64
	ids := map[string]bool{}
	for _, b := range bills.Volumes {
		recs = append(recs, volumeRecord{bucketRange(b.Time, mq), volumeAmounts{TotalAmount: b.Amount, StandardAmount: b.Amount}, b.VolumeID})
		tot += b.Amount
		ids[b.VolumeID] = true
	}
	writeBilling(w, recs, bq, volumeAmounts{TotalAmount: round(tot), StandardAmount: round(tot)}, "uniqueNetworkVolumeCount", len(ids))
}

func (a *API) billingClusters(w http.ResponseWriter, r *http.Request) {
	_, bq, id, err := a.parseBilling(r, "clusterId")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if id != "" {
		bq.ClusterID = &id
	}
	writeBilling[struct{}](w, nil, bq, clusterAmounts{}, "uniqueClusterCount", 0)
}

// billingAll is every family per bucket.
func (a *API) billingAll(w http.ResponseWriter, r *http.Request) {
	mq, bq, _, err := a.parseBilling(r, "")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ctx := r.Context()
	byTime := map[time.Time]*allRecord{}
	at := func(t time.Time) *allRecord {
		if byTime[t] == nil {
			byTime[t] = &allRecord{timeRange: bucketRange(t, mq)}
		}
		return byTime[t]
	}
	for _, kind := range []mgmt.BillKind{mgmt.BillPods, mgmt.BillEndpoints, mgmt.BillVolumes} {
		q := mq
		q.Kind, q.Grouping = kind, ""
		bills, err := a.cfg.Mgmt.Billing(ctx, q)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		for _, b := range bills.Compute {
			rec := at(b.Time)
			if kind == mgmt.BillPods {
				rec.PodGPUAmount += b.GPUAmount
				rec.PodCPUAmount += b.CPUAmount
			} else {
				rec.ServerlessGPUAmount += b.GPUAmount
				rec.ServerlessCPUAmount += b.CPUAmount
			}
			rec.TotalAmount += b.Amount
		}
		for _, b := range bills.Volumes {
			rec := at(b.Time)
			rec.StorageStandardAmount += b.Amount
			rec.TotalAmount += b.Amount
		}
	}
	var recs []allRecord
	var tot allAmounts
	for _, rec := range byTime {
		x := &rec.allAmounts
		for _, f := range []*float64{&x.TotalAmount, &x.PodGPUAmount, &x.PodCPUAmount, &x.ServerlessGPUAmount, &x.ServerlessCPUAmount, &x.StorageStandardAmount} {
			*f = round(*f)
		}
		tot.TotalAmount += x.TotalAmount
		tot.PodGPUAmount += x.PodGPUAmount
		tot.PodCPUAmount += x.PodCPUAmount
		tot.ServerlessGPUAmount += x.ServerlessGPUAmount
		tot.ServerlessCPUAmount += x.ServerlessCPUAmount
		tot.StorageStandardAmount += x.StorageStandardAmount
		recs = append(recs, *rec)
	}
	slices.SortFunc(recs, func(a, b allRecord) int { return a.StartTime.Compare(b.StartTime) })
	for _, f := range []*float64{&tot.TotalAmount, &tot.PodGPUAmount, &tot.PodCPUAmount, &tot.ServerlessGPUAmount, &tot.ServerlessCPUAmount, &tot.StorageStandardAmount} {
		*f = round(*f)
	}
	writeBilling(w, recs, bq, tot, "", 0)
}
