package v1api

import (
	"net/http"
	"time"

	"berth/mgmt"
)

// Billing: the v1 query parameters translated to a mgmt.BillingQuery.

func parseTime(r *http.Request, name string) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, bad("%s must be an RFC 3339 time such as 2026-01-31T00:00:00Z, got %q", name, v)
	}
	return t.UTC(), nil
}

func parseBillingQuery(r *http.Request, kind mgmt.BillKind) (mgmt.BillingQuery, error) {
	q := mgmt.BillingQuery{Kind: kind}
	var err error
	if q.Bucket, err = queryEnum(r, "bucketSize", "day", mgmt.BucketSizes...); err != nil {
		return q, err
	}
	if gs := mgmt.Groupings[kind]; len(gs) > 0 {
		if q.Grouping, err = queryEnum(r, "grouping", gs[0], v1GroupingOrder(gs)...); err != nil {
			return q, err
		}
	}
	if q.End, err = parseTime(r, "endTime"); err != nil {
		return q, err
	}
	if q.Start, err = parseTime(r, "startTime"); err != nil {
		return q, err
	}
	v := r.URL.Query()
	q.PodID, q.EndpointID, q.ImageName, q.TemplateID = v.Get("podId"), v.Get("endpointId"), v.Get("imageName"), v.Get("templateId")
	q.GPUTypeIDs, q.DataCenterIDs = queryList(r, "gpuTypeId"), queryList(r, "dataCenterId")
	return q, nil
}

// v1GroupingOrder lists groupings as v1's error messages always have.
func v1GroupingOrder(gs []string) []string {
	var out []string
	for _, g := range []string{"endpointId", "podId", "gpuTypeId"} {
		for _, h := range gs {
			if g == h {
				out = append(out, g)
			}
		}
	}
	return out
}

func (a *API) billing(kind mgmt.BillKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := parseBillingQuery(r, kind)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		bills, err := a.cfg.Mgmt.Billing(r.Context(), q)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		if kind == mgmt.BillVolumes {
			writeJSON(w, http.StatusOK, bills.Volumes)
			return
		}
		writeJSON(w, http.StatusOK, bills.Compute)
	}
}
