//go:build race

package sim

// raceDetector is set when the tests run with -race: every goroutine access then costs
// about ten times more, so TestSim explores a smaller default budget (make test runs
// the full one without -race).
const raceDetector = true
