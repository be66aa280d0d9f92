// Package e2e holds end-to-end tests of whole Berth features with real worker
// containers: Berth as berth serve composes it (package app), driven by
// real clients (the official OpenAI Go client, plain HTTP). It has no code
// outside its tests.
package e2e
