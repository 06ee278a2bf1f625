package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/sqs-lambda-consumer/idem/persistence"
)

// TestInspectShowsTheRefusedPayload: a record completed for another payload shows the
// fingerprint of the one it refused, in the table and the JSON, so that an operator sees
// why the ingress answers a retry of that payload "failed", not 422.
func TestInspectShowsTheRefusedPayload(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	applied, refused := strings.Repeat("a", 64), strings.Repeat("b", 64)
	rec := &persistence.Record{Key: "s#k", Status: persistence.StatusCompleted, PayloadHash: applied, RefusedHash: refused,
		Error: "payload mismatch", Category: persistence.CategoryInvalid, ExpiresAt: now.Add(time.Hour)}
	v := newRecordView(&recordRef{key: "k", pk: "s#k"}, rec, now)
	var table bytes.Buffer
	v.print(&table)
	if !strings.Contains(table.String(), "refused payload hash") || !strings.Contains(table.String(), shortToken(refused)) {
		t.Errorf("the table does not show the refused payload's hash:\n%s", table.String())
	}
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"refused_hash":"`+refused+`"`) {
		t.Errorf("the JSON has no refused_hash: %s", data)
	}
	rec.RefusedHash = ""
	table.Reset()
	newRecordView(&recordRef{key: "k", pk: "s#k"}, rec, now).print(&table)
	if strings.Contains(table.String(), "refused payload hash") {
		t.Errorf("a row for a record that refused nothing:\n%s", table.String())
	}
}
