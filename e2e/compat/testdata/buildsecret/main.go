// Command buildsecret is a build step of compat's secret build arg test:
// it prints the TOKEN build arg (which Berth must scrub from the build's
// log) and its SHA-256 (which shows the build received it).
package main

import (
	"crypto/sha256"
	"fmt"
	"os"
)

func main() {
	v := os.Getenv("TOKEN")
	fmt.Printf("the token is %s\n", v)
	fmt.Printf("token sha256 %x\n", sha256.Sum256([]byte(v)))
}
