package stack

import (
	"fmt"
	"os"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
)

// LoadFor reads the template at path with ex's template block wired in
// (example.Wire): the template as it would be with ex as the wired example.
func LoadFor(path string, ex example.Example) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("stack: read template: %w", err)
	}
	if data, err = example.Wire(data, ex); err != nil {
		return nil, fmt.Errorf("stack: %s: %w", path, err)
	}
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("stack: %s with example %s: %w", path, ex.Name(), err)
	}
	t.Path = path
	return t, nil
}
