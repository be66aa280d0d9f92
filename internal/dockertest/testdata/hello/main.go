// Command hello is dockertest's own test program.
package main

import (
	"fmt"
	"os"
)

func main() { fmt.Println("hello " + os.Getenv("WHO")) }
