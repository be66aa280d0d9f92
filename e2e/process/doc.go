// Package process holds the tests of Berth as a process: the berth binary
// built and run as a user, systemd or a container runs it — started,
// killed with SIGKILL and restarted on the same data, stopped, refused a
// damaged file — with real clients, worker programs and containers. It
// has no code outside its tests; they start the binary with
// internal/proctest, as e2e/compat does.
package process
