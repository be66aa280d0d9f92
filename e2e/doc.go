// Package e2e holds end-to-end tests of whole Berth features with real worker
// containers: Berth as berth serve composes it (package app), driven by
// real clients (the official OpenAI Go client, plain HTTP). It has no code
// outside its tests. The other end-to-end suites are its subdirectories:
// kube (the same on the API server), jobs (the job API with worker
// processes on the host), process (the built binary), compat
// (the real RunPod clients) and dashboard (a browser).
package e2e
