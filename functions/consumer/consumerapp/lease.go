package consumerapp

import "fmt"

// checkLease refuses a configuration in which a crashed invocation's lease can outlive
// its message's invisibility: the lease ends at most FunctionTimeout + LeaseGrace after
// the invocation starts, and SQS redelivers the message VisibilityTimeout after it
// handed it to the poller. A redelivery onto a live lease burns one of the queue's
// maxReceiveCount receives; enough of them park the message in the dead-letter queue
// without it ever being applied. (sqsbatch.Visibility also moves a waiting message past the
// lease end; this check keeps the common case, a crash, from needing it.) Either
// duration unset skips the check. Config.Check calls it, so the consumer fails at init.
func checkLease(cfg Config) error {
	if cfg.FunctionTimeout <= 0 || cfg.VisibilityTimeout <= 0 {
		return nil
	}
	if lease := cfg.FunctionTimeout + cfg.LeaseGrace; lease >= cfg.VisibilityTimeout {
		return fmt.Errorf("FUNCTION_TIMEOUT %s + LEASE_GRACE %s = %s must be below VISIBILITY_TIMEOUT %s (the input queue's): "+
			"a crashed consumer's lease would still hold when SQS redelivers its messages, and each redelivery would burn a receive",
			cfg.FunctionTimeout, cfg.LeaseGrace, lease, cfg.VisibilityTimeout)
	}
	return nil
}
