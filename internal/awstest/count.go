package awstest

import (
	"context"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// Calls counts the requests an SDK client sends, by operation, with a middleware after
// the retry step: every HTTP attempt counts, retries included.
type Calls struct {
	mu  sync.Mutex
	ops map[string]int
}

// NewCalls returns an empty counter.
func NewCalls() *Calls { return &Calls{ops: map[string]int{}} }

// APIOption is the middleware to append to a client's Options.APIOptions.
func (c *Calls) APIOption(stack *middleware.Stack) error {
	return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc("awstest.Calls",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			c.mu.Lock()
			c.ops[awsmiddleware.GetOperationName(ctx)]++
			c.mu.Unlock()
			return next.HandleFinalize(ctx, in)
		}), "Retry", middleware.After)
}

// Total returns the number of requests counted.
func (c *Calls) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.ops {
		n += v
	}
	return n
}

// Ops returns a copy of the per-operation counts.
func (c *Calls) Ops() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.ops))
	for k, v := range c.ops {
		m[k] = v
	}
	return m
}

// Reset sets every count to zero.
func (c *Calls) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops = map[string]int{}
}
