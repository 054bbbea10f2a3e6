// Command admissionpolicies writes config/admission/policies.yaml, the
// admission policies of internal/admissionpolicy for the operator's
// ServiceAccount as config/default installs it (make manifests).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/drastack/drastack/internal/admissionpolicy"
)

func main() {
	out := flag.String("output", "config/admission/policies.yaml", "file to write")
	flag.Parse()
	data, err := admissionpolicy.Manifest(admissionpolicy.DefaultIdentity)
	if err == nil {
		err = os.WriteFile(*out, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "admissionpolicies:", err)
		os.Exit(1)
	}
}
