package sqsmsg

import (
	"strings"
	"testing"
)

// shortenText cuts to at most limit bytes at a rune boundary and ends the text with the
// mark whenever the mark fits; below the mark's size it cuts without one, and never
// panics, also on text with no rune boundary (invalid UTF-8) or a negative limit.
func TestShortenTextCutAtTheLimitKeepsWholeRunesAndTheMark(t *testing.T) {
	tests := []struct {
		s     string
		limit int
		want  string
	}{
		{"abcdef", 6, "abcdef"},                      // fits exactly: unchanged
		{"abcdef", 5, "ab" + reasonCut},              // cut, with the mark
		{"abcdef", len(reasonCut), reasonCut},        // room for the mark alone
		{"abcdef", 2, "ab"},                          // no room for the mark
		{"éé", 1, ""},                                // no room for a whole rune
		{"abcdef", 0, ""},                            //
		{"abcdef", -1, ""},                           //
		{"\x80\x80\x80\x80\x80", 4, reasonCut},       // no rune start before the cut
		{"\x80\x80\x80\x80\x80", 3, reasonCut},       //
		{"a€€", 5, "a" + reasonCut},                  // the mark does not split a rune
		{strings.Repeat("é", 3), 6, "ééé"},           //
		{strings.Repeat("é", 4), 6, "é" + reasonCut}, //
	}
	for _, tt := range tests {
		var got string
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("shortenText(%q, %d) panicked: %v", tt.s, tt.limit, p)
				}
			}()
			got = shortenText(tt.s, tt.limit)
		}()
		if got != tt.want {
			t.Errorf("shortenText(%q, %d) = %q, want %q", tt.s, tt.limit, got, tt.want)
		}
		if len(got) > max(tt.limit, 0) {
			t.Errorf("shortenText(%q, %d) = %q, longer than the limit", tt.s, tt.limit, got)
		}
	}
}
