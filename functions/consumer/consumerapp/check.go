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
	if c.LeaseGrace <= 0 {
		// idem would take its own default for the lease, but the longest lease (maxLease,
		// which the reaper is told too) would have none: the lease would end at the
		// deadline, and a taker whose clock runs ahead would take the key from a holder
		// that still runs.
		errs = append(errs, fmt.Errorf("LEASE_GRACE %s is not positive: a lease must outlast its invocation by more than two environments' clocks can drift apart (the template's default is 30s)", c.LeaseGrace))
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
