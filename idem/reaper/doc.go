// Package reaper sweeps the records whose holder vanished. It promises: a lease is
// failed only once its end plus the grace has passed, and only the lease it
// listed (the reap is fenced on the listed token and lease end, so an extension wins);
// committed messages that no delivery sent are sent in commit order. Unlock clears a
// record for an operator.
package reaper
