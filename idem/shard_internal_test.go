package idem

import (
	"strconv"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// TestShardsSpreadKeysThatDifferInOrder: the in-flight shard of a key depends on the
// order of its bytes, not only on which bytes it holds, so keys that are anagrams of one
// another (ids built from the same parts) do not all land in one shard of the index.
// (FNV-1a modulo 4 reads only the low two bits of each byte: the 24 orders of "abcd"
// fill two shards.)
func TestShardsSpreadKeysThatDifferInOrder(t *testing.T) {
	var perms []string
	var permute func(prefix, rest string)
	permute = func(prefix, rest string) {
		if rest == "" {
			perms = append(perms, "s#"+prefix)
		}
		for i := range len(rest) {
			permute(prefix+rest[i:i+1], rest[:i]+rest[i+1:])
		}
	}
	permute("", "abcd")
	shards := map[string]int{}
	for _, k := range perms {
		s := persistence.ShardOf(k, 4)
		if n, err := strconv.Atoi(s); err != nil || n < 0 || n >= 4 {
			t.Fatalf("shard of %s: %q, want 0 to 3", k, s)
		}
		shards[s]++
		if got := persistence.ShardOf(k, 1); got != "0" {
			t.Fatalf("shard of %s among 1: %q", k, got)
		}
	}
	if len(shards) < 2 {
		t.Errorf("the 24 orders of one key's bytes fill shards %v; want them spread", shards)
	}
}
