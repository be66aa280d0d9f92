// Command testprog is the container program of berth/runtime's tests. The
// first argument picks a behaviour; "ready" on stdout means signal handling
// is set up.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"berth/internal/shm"
)

func main() {
	mode := "echo"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "echo": // both streams, then exit $EXIT
		fmt.Println("stdout: " + os.Getenv("MSG"))
		fmt.Fprintln(os.Stderr, "stderr: line")
		fmt.Println(`{"requestId": "job-1", "message": "from handler", "level": "INFO"}`)
		code, _ := strconv.Atoi(os.Getenv("EXIT"))
		os.Exit(code)
	case "tick": // a numbered line every 200 ms until killed (a long build step)
		for i := 1; ; i++ {
			fmt.Printf("tick %d\n", i)
			time.Sleep(200 * time.Millisecond)
		}
	case "trap": // exit 0 on SIGTERM
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("ready")
		<-c
		fmt.Println("got SIGTERM")
		os.Exit(0)
	case "ignore": // must be killed
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		for { // not select{}: the runtime would call that a deadlock
			time.Sleep(time.Hour)
		}
	case "serve": // greet on :8888
		ln, err := net.Listen("tcp", ":8888")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("ready")
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			fmt.Fprintln(c, "hello")
			c.Close()
		}
	case "shm": // report /dev/shm's size, write $SHM_WRITE bytes to it shared, then wait for SIGTERM
		n, _ := strconv.ParseInt(os.Getenv("SHM_WRITE"), 10, 64)
		size, err := shm.Write(n)
		if err != nil {
			fmt.Println("shm error:", err)
			os.Exit(1)
		}
		fmt.Printf("shm %d wrote %d\n", size, n)
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		<-c
	case "crash":
		panic("testprog crash")
	case "oom": // grow until the memory limit kills us
		var keep [][]byte
		for {
			b := make([]byte, 8<<20)
			for i := range b {
				b[i] = 1
			}
			keep = append(keep, b)
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(64)
	}
}
