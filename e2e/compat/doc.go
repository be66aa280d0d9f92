// Package compat is Berth's compatibility suite against the real RunPod
// clients, and the end-to-end tests of what they found: it builds the
// berth binary, runs `berth serve` on a fresh data directory with worker
// and pod containers, and drives it with runpod-python 1.12.0 (its
// management functions, Endpoint and AsyncioEndpoint, a handler written
// with runpod.serverless.start on the host and in a container) and
// runpodctl 2e2df89 (its whole command tree), both from
// ../shared/thirdparty (see internal/clientkit). Tests that need the
// clients skip with a message where they are absent and fail instead with
// BERTH_REQUIRE_DOCKER=1 (CI); the others need only Docker. The package
// has no code outside its tests.
package compat
