package v2api

import "strconv"

func (a *API) document() map[string]any { return map[string]any{"openapi": "3.1.0"} }

func itoa(n int) string { return strconv.Itoa(n) }
