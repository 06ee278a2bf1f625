package samtemplate_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/internal/samtemplate"
)

// TestAlarmsAreGenerated: template.yaml's alarms are what samtemplate.Alarms generates,
// so that they are edited in one place.
func TestAlarmsAreGenerated(t *testing.T) {
	data, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := samtemplate.WithAlarms(data, samtemplate.Alarms)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, want) {
		t.Errorf("template.yaml's alarms differ from internal/samtemplate/alarms.go's; run %s", samtemplate.AlarmsCommand)
	}
}
