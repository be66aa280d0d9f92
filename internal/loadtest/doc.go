// Package loadtest holds load tools that run the real berth binary as a
// user would and measure it from outside. They are tests that skip unless
// asked for (see TestQueueDepth), so CI's normal pass stays fast. The
// binary is built by internal/proctest; they start it themselves rather
// than with proctest.Start, because they time a restart up to the first
// answer of an endpoint's /health (proctest waits for READY=1 instead) and
// TestGraphQLInFlight may run an older binary (-bin).
package loadtest
