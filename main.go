// Command berth runs the RunPod serverless platform on one machine. The
// command line is package cli; the server is package app (the composition),
// which serve.go configures from serve's flags.
package main

import (
	"os"

	"berth/cli"
)

var version = "0.1.0-dev"

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.Options{Version: version, Serve: serve}))
}
