// Package jobs holds the end-to-end tests of the job API with a real worker
// program: Berth as package app composes it (internal/apitest's Env on a
// fake clock, every exchange held to the OpenAPI document), and
// testdata/echoworker (built by internal/proctest) run on the host as a
// process with the environment worker-env hands out — every job operation,
// cancel, runsync's wait, timeouts and ttl, stopPod, a lost worker,
// webhooks, a restart, a full disk. No Docker: the worker protocol is what
// is under test. It has no code outside its tests.
package jobs
