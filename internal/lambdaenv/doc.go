// Package lambdaenv runs Lambda bootstraps on the host as Lambda runs them: each
// Environment is one execution environment, a child process that polls the Lambda
// Runtime API (internal/coldstart.RuntimeAPI, on loopback) for its events.
//
// What it promises, each from the Lambda documentation:
//   - An environment initializes on its first invocation, and again after a reset: the
//     process is started, and its init ends when it first asks for an event
//     (https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html).
//   - Each invocation carries the Lambda-Runtime-Deadline-Ms header; an invocation still
//     running at its deadline is a timeout: the process is killed (SIGKILL) and the
//     invocation fails with ErrTimeout; the next invocation starts a fresh environment
//     (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html,
//     https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html).
//   - A function error (a post to /runtime/invocation/{id}/error) fails the invocation
//     with a *FunctionError; a process that exits mid-invocation (a crash, or
//     aws-lambda-go exiting after a panic) fails it with an *ExitError, and the next
//     invocation starts a fresh environment.
//   - An init that posts to /runtime/init/error, or exits before it asks for an event,
//     fails the invocation with an *InitError, as Lambda reports Runtime.ExitError or
//     the posted error type
//     (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html#runtimes-api-initerror).
//
// Differences from Lambda, on purpose: the init counts against the first invocation's
// deadline (Lambda gives an on-demand init its own 10 s), memory is announced in
// AWS_LAMBDA_FUNCTION_MEMORY_SIZE but not enforced, and the environment is not frozen
// between invocations. An Environment runs one invocation at a time and is safe for
// concurrent use; concurrency is the number of Environments.
package lambdaenv
