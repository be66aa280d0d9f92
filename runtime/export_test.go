package runtime

import "berth/store"

// SpecKey exposes specKey to the external tests that make containers a
// Supervisor adopts as current.
func SpecKey(ep store.Endpoint, t store.Template) string { return specKey(ep, t) }
