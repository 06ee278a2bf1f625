package reaper

import (
	"encoding/json"
	"fmt"
	"time"
)

// sweepJSON is SweepResult as JSON: MaxLate as MaxLateMs, whole milliseconds (the unit
// of the reaper's log line), where encoding/json would write a time.Duration in
// nanoseconds. The MaxLate pointer, never set, hides the embedded duration.
type sweepJSON struct {
	sweepFields
	MaxLate   *struct{} `json:"MaxLate,omitempty"`
	MaxLateMs int64
}

// sweepFields has SweepResult's fields without its JSON methods.
type sweepFields SweepResult

// MarshalJSON writes the result with MaxLateMs in place of MaxLate: the reaper Lambda's
// response.
func (r SweepResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(sweepJSON{sweepFields: sweepFields(r), MaxLateMs: r.MaxLate.Milliseconds()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *SweepResult) UnmarshalJSON(b []byte) error {
	var v sweepJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("idem: sweep result: %w", err)
	}
	*r = SweepResult(v.sweepFields)
	r.MaxLate = time.Duration(v.MaxLateMs) * time.Millisecond
	return nil
}
