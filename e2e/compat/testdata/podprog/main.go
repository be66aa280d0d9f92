// Command podprog is the pod program of the compat tests: it prints
// "ready", then answers one command per connection on :8888 —
// "ls DIR" (the names in DIR), "read FILE", "write FILE TEXT", "exit N"
// (exits with code N after answering "bye").
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

func main() {
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
		line, _ := bufio.NewReader(c).ReadString('\n')
		f := strings.Fields(line)
		if len(f) == 0 {
			c.Close()
			continue
		}
		switch f[0] {
		case "ls":
			ents, err := os.ReadDir(f[1])
			if err != nil {
				fmt.Fprintln(c, "error:", err)
			}
			for _, e := range ents {
				fmt.Fprintln(c, e.Name())
			}
		case "read":
			b, err := os.ReadFile(f[1])
			if err != nil {
				fmt.Fprintln(c, "error:", err)
			}
			c.Write(b)
		case "write":
			if err := os.WriteFile(f[1], []byte(strings.Join(f[2:], " ")), 0o644); err != nil {
				fmt.Fprintln(c, "error:", err)
			}
			fmt.Fprintln(c, "ok")
		case "exit":
			n, _ := strconv.Atoi(f[1])
			fmt.Fprintln(c, "bye")
			c.Close()
			fmt.Println("exiting with", n)
			os.Exit(n)
		}
		c.Close()
	}
}
