// The tests of REST v2 (RunPod's v2.json: pods, serverless endpoints,
// templates, volumes, registries, the catalogue, billing) against a Berth
// as berth serve composes it, on internal/apitest's Env, the server harness
// httpapi's and v1api's tests share: every exchange held to RunPod's v2.json
// and to Berth's own /v2/openapi.json.
package v2api_test

import "berth/internal/apitest"

type J = apitest.J
