// Package dashboard holds the dashboard's browser tests: headless chromium
// (chromedp) driving the page a running Berth serves — the built binary
// (internal/proctest) or Berth as app composes it (internal/apptest) —
// with worker containers behind it; they also make docs/dashboard's
// screenshots. It has no code outside its tests; the dashboard itself is
// package berth/dashboard.
package dashboard
