package coldstart_test

import (
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/internal/coldstart"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 90, 7 * time.Millisecond},
		{ms(4, 1, 3, 2), 50, 2500 * time.Microsecond},
		{ms(10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110), 90, 100 * time.Millisecond},
		{ms(1, 2), 100, 2 * time.Millisecond},
		{ms(1, 2), 0, time.Millisecond},
	}
	for _, tc := range tests {
		if got := coldstart.Percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
		}
	}
}
