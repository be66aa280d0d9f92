// Package process holds the tests of Berth as a process: the berth binary
// built and run as a user, systemd or a container runs it — started,
// killed with SIGKILL and restarted on the same data, stopped, refused a
// damaged file — with real clients, worker programs and containers. It
// has no code outside its tests; startBerth (berth_test.go) is the one
// way its tests start the binary.
package process
