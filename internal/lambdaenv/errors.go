package lambdaenv

import (
	"errors"
	"fmt"
)

// ErrTimeout is an invocation that was still running at its deadline; its environment
// was killed. Lambda reports it as "Task timed out after N seconds".
var ErrTimeout = errors.New("lambdaenv: task timed out")

// FunctionError is an invocation the function answered with an error document.
type FunctionError struct {
	Type    string // errorType, or the Lambda-Runtime-Function-Error-Type header
	Message string // errorMessage
}

func (e *FunctionError) Error() string {
	return fmt.Sprintf("lambdaenv: function error %s: %s", e.Type, e.Message)
}

// ExitError is an environment whose process ended during an invocation without
// answering it (a crash, or the runtime exiting after a panic).
type ExitError struct {
	Err error // from the process's Wait
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("lambdaenv: Runtime.ExitError: the process exited during the invocation: %v", e.Err)
}

func (e *ExitError) Unwrap() error { return e.Err }

// InitError is an environment that failed its init: it posted to /runtime/init/error
// (Type and Message from it) or exited before asking for an event (Type
// Runtime.ExitError).
type InitError struct {
	Type    string
	Message string
}

func (e *InitError) Error() string {
	return fmt.Sprintf("lambdaenv: init error %s: %s", e.Type, e.Message)
}
