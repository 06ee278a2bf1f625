package consumerapp

import (
	"errors"
	"fmt"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/idem"
)

// Check reports every setting of cfg that cannot work, with what to change, so that the
// function fails its init with a clear message instead of failing every record. FromEnv
// calls it; keep every such rule here.
func (c Config) Check() error {
	var errs []error
	if c.FunctionTimeout > 0 && c.FunctionTimeout <= c.DeadlineMargin {
		errs = append(errs, fmt.Errorf("FUNCTION_TIMEOUT %s is not more than DEADLINE_MARGIN %s: no record could ever start (raise the function's Timeout in template.yaml, and FUNCTION_TIMEOUT with it, or lower DEADLINE_MARGIN)",
			c.FunctionTimeout, c.DeadlineMargin))
	}
	if c.DeadlineMargin < 0 {
		errs = append(errs, fmt.Errorf("DEADLINE_MARGIN %s is negative", c.DeadlineMargin))
	}
	if err := (idem.KeyRule{Source: c.KeySource, Field: c.KeyField}).Check(); err != nil {
		errs = append(errs, err)
	}
	if err := checkLease(c); err != nil {
		errs = append(errs, err)
	}
	if c.Example != nil {
		if err := example.CheckMode(c.Example, c.Mode); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("consumer configuration: %w", err)
	}
	return nil
}
