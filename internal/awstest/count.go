package awstest

import (
	"context"
	"maps"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// Calls counts the requests an SDK client sends, by operation. NewCalls counts with a
// middleware after the retry step: every HTTP attempt, retries included. NewOperations
// counts before it: each call the code makes once, whatever the SDK retried (a request
// whose answer moto lost under load is sent again), for the tests that count the code's
// round trips.
type Calls struct {
	mu          sync.Mutex
	ops         map[string]int
	beforeRetry bool
}

// NewCalls returns an empty counter of HTTP attempts.
func NewCalls() *Calls { return &Calls{ops: map[string]int{}} }

// NewOperations returns an empty counter of the calls the code makes.
func NewOperations() *Calls { return &Calls{ops: map[string]int{}, beforeRetry: true} }

// APIOption is the middleware to append to a client's Options.APIOptions.
func (c *Calls) APIOption(stack *middleware.Stack) error {
	where := middleware.After
	if c.beforeRetry {
		where = middleware.Before
	}
	return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc("awstest.Calls",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			c.mu.Lock()
			c.ops[awsmiddleware.GetOperationName(ctx)]++
			c.mu.Unlock()
			return next.HandleFinalize(ctx, in)
		}), "Retry", where)
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
	return maps.Clone(c.ops)
}

// Reset sets every count to zero.
func (c *Calls) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops = map[string]int{}
}
