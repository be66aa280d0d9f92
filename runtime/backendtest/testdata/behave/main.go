// Command behave is the program of runtime/backendtest's behaviours on
// the backends that run real programs (Docker, Kubernetes through
// kubetest's PodRunner). The behaviour is its first argument, else
// $BEHAVE (a PodRunner runs the program without the Pod's arguments):
//
//	exit    prints "line 1", "line 2", "line 3" and exits with $EXIT
//	trap    prints "ready"; on SIGTERM prints "got SIGTERM" and exits 0
//	ignore  prints "ready" and ignores SIGTERM: only a kill ends it
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	mode := os.Getenv("BEHAVE")
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "exit":
		for i := 1; i <= 3; i++ {
			fmt.Printf("line %d\n", i)
		}
		code, _ := strconv.Atoi(os.Getenv("EXIT"))
		os.Exit(code)
	case "trap":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("ready")
		<-c
		fmt.Println("got SIGTERM")
		os.Exit(0)
	case "ignore":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		for { // not select{}: the runtime would call that a deadlock
			time.Sleep(time.Hour)
		}
	default:
		fmt.Fprintf(os.Stderr, "behave: unknown behaviour %q\n", mode)
		os.Exit(64)
	}
}
