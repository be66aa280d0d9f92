// Package e2e holds end-to-end tests of whole Berth features with real worker
// containers: store, queue, HTTP API and container runtime wired as in
// berth serve, driven by real clients (the official OpenAI Go client, plain
// HTTP). It has no code outside its tests.
package e2e
