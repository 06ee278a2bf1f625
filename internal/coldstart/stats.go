package coldstart

import (
	"io"
	"os/exec"
	"slices"
	"time"
)

// newCommand is bin with exactly env (nothing inherited from this process, as in
// Lambda) and both output streams to output.
func newCommand(bin string, env []string, output io.Writer) *exec.Cmd {
	cmd := exec.Command(bin)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = output, output
	return cmd
}

// Percentile returns the p-th percentile (0 to 100) of ds, interpolated linearly between
// the closest ranks; 0 for no values.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	p = min(max(p, 0), 100)
	pos := p / 100 * float64(len(s)-1)
	i := int(pos)
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	frac := pos - float64(i)
	return s[i] + time.Duration(frac*float64(s[i+1]-s[i]))
}
