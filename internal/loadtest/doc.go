// Package loadtest holds load tools that run the real berth binary as a
// user would and measure it from outside. They are tests that skip unless
// asked for (see TestQueueDepth), so CI's normal pass stays fast.
package loadtest
