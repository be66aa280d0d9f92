// The tests of REST v1 (rest.runpod.io/v1's routes and Berth's /v1
// extensions) against a Berth as berth serve composes it, on
// internal/apitest's Env, the server harness httpapi's tests share: every
// exchange held to the served OpenAPI document and, for NewValidating, the
// client's to RunPod's.
package v1api_test

import "berth/internal/apitest"

type J = apitest.J
