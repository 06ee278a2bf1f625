package samtemplate_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
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

// TestDashboardIsGenerated: template.yaml's dashboard is what samtemplate.Dashboard and
// samtemplate.Alarms generate, so that a widget or an alarm is edited in one place.
func TestDashboardIsGenerated(t *testing.T) {
	data, err := os.ReadFile(templatePath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := samtemplate.WithDashboard(data, samtemplate.Dashboard, samtemplate.Alarms)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, want) {
		t.Errorf("template.yaml's dashboard differs from internal/samtemplate/dashboard.go's; run %s", samtemplate.AlarmsCommand)
	}
}

// TestDashboardBodyIsJSONWithEveryAlarm: once CloudFormation substitutes its ${...}, the
// dashboard's body is JSON, and its alarms' widget lists every alarm, once, in Alarms'
// order: an alarm added to Alarms shows on the dashboard with no second edit.
func TestDashboardBodyIsJSONWithEveryAlarm(t *testing.T) {
	_, body, ok := bytes.Cut([]byte(samtemplate.RenderDashboard(samtemplate.Dashboard, samtemplate.Alarms)), []byte("!Sub |\n"))
	if !ok {
		t.Fatal("the dashboard has no DashboardBody: !Sub |")
	}
	subst := regexp.MustCompile(`\$\{([A-Za-z0-9:.]+)\}`).ReplaceAll(body, []byte("sub-$1"))
	var doc struct {
		Widgets []struct {
			Type       string
			Properties struct{ Alarms []string }
		}
	}
	if err := json.Unmarshal(subst, &doc); err != nil {
		t.Fatalf("the dashboard's body is not JSON once substituted: %v\n%s", err, subst)
	}
	var listed []string
	for _, w := range doc.Widgets {
		if w.Type == "alarm" {
			listed = append(listed, w.Properties.Alarms...)
		}
	}
	var want []string
	for _, a := range samtemplate.Alarms {
		want = append(want, "sub-"+a.ID+".Arn")
	}
	if !slices.Equal(listed, want) {
		t.Errorf("the alarms' widget lists %v, want every alarm of Alarms %v", listed, want)
	}
	if len(doc.Widgets) != len(samtemplate.Dashboard)+1 {
		t.Errorf("%d widgets, want %d metric widgets and the alarms'", len(doc.Widgets), len(samtemplate.Dashboard))
	}
}
