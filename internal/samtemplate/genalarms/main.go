// Command genalarms rewrites the generated alarms and dashboard of template.yaml (run
// from the repository's root) from samtemplate.Alarms and samtemplate.Dashboard.
package main

import (
	"fmt"
	"os"

	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

func main() {
	if err := run("template.yaml"); err != nil {
		fmt.Fprintln(os.Stderr, "genalarms:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the template: %w", err)
	}
	out, err := samtemplate.WithAlarms(data, samtemplate.Alarms)
	if err == nil {
		out, err = samtemplate.WithDashboard(out, samtemplate.Dashboard, samtemplate.Alarms)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("write the template: %w", err)
	}
	return nil
}
