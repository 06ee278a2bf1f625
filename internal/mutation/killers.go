package mutation

import (
	"fmt"
	"slices"
	"strings"
)

// OwnKiller is the name of the killer that runs the mutated package's own tests.
const OwnKiller = "own"

// DefaultKillers are the killers of make mutation, cheapest first:
//   - sim: the deterministic simulator (internal/sim, TestSim) over seeds 1 to
//     schedules: no moto, the real consumer and reaper over simulated SQS and DynamoDB;
//   - own: the mutated package's own tests, and those of the library's packages (idem/...)
//     that import it: the store's contract tests live in idem/ since it was split, on moto;
//   - functions: the tests of the packages under functions/ that import it, on moto.
func DefaultKillers(schedules int) []Killer {
	return []Killer{
		{
			Name: "sim", Packages: []string{"./internal/sim/"}, Args: []string{"-run", "^TestSim$", "-schedules", fmt.Sprint(schedules)},
			Run: "^TestSim$", Flags: []string{"-maxfailed", "1"}, Seeds: schedules,
		},
		{Name: OwnKiller, Packages: []string{"{target}", "./idem/..."}, AWS: true},
		{Name: "functions", Packages: []string{"./functions/..."}, AWS: true},
	}
}

// SelectKillers picks DefaultKillers by name, in the order given (comma-separated).
func SelectKillers(names string, schedules int) ([]Killer, error) {
	all := DefaultKillers(schedules)
	var out []Killer
	for n := range strings.SplitSeq(names, ",") {
		n = strings.TrimSpace(n)
		i := slices.IndexFunc(all, func(k Killer) bool { return k.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("mutation: unknown killer %q (known: sim, own, functions)", n)
		}
		out = append(out, all[i])
	}
	return out, nil
}

// NeedAWS reports whether a killer needs the local AWS endpoint.
func NeedAWS(ks []Killer) bool {
	return slices.ContainsFunc(ks, func(k Killer) bool { return k.AWS })
}
