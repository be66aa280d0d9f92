package graphqlapi

import (
	"net/http"
	"slices"
	"strings"

	"berth/mgmt"
)

// locations reads saveEndpoint's locations: data-centre ids ("EU-RO-1")
// or, as RunPod's GraphQL documents them, country codes ("US", "CZ,FR"),
// a country standing for RunPod's data centres in it.
func locations(s string) ([]string, error) {
	var out []string
	for _, part := range splitList(s) {
		if !isCountry(part) {
			out = append(out, part) // mgmt checks the id
			continue
		}
		var in []string
		for _, dc := range mgmt.DataCenters {
			if countryOf(dc) == part {
				in = append(in, dc)
			}
		}
		if len(in) == 0 {
			var known []string
			for _, dc := range mgmt.DataCenters {
				if c := countryOf(dc); !slices.Contains(known, c) {
					known = append(known, c)
				}
			}
			slices.Sort(known)
			return nil, invalid("locations", "locations: no RunPod data centre Berth knows is in %q; countries: %s, or data-centre ids such as \"EU-RO-1\"", part, strings.Join(known, ", "))
		}
		out = append(out, in...)
	}
	return out, nil
}

func isCountry(s string) bool {
	return len(s) == 2 && s[0] >= 'A' && s[0] <= 'Z' && s[1] >= 'A' && s[1] <= 'Z'
}

// countryOf is a RunPod data centre's country: "US-TX-3" and "CA-MTL-1"
// start with it; "EU-RO-1", "EUR-IS-1", "AP-JP-1" and "OC-AU-1" start
// with a region.
func countryOf(dc string) string {
	parts := strings.Split(dc, "-")
	if len(parts) > 1 && slices.Contains([]string{"EU", "EUR", "AP", "OC"}, parts[0]) {
		return parts[1]
	}
	return parts[0]
}

// KeyFromQuery lets a request give the API key as ?api_key=, the form
// RunPod's GraphQL documentation uses in its curl examples; an
// Authorization header wins.
func KeyFromQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := r.URL.Query().Get("api_key"); k != "" && r.Header.Get("Authorization") == "" {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+k)
		}
		next.ServeHTTP(w, r)
	})
}
