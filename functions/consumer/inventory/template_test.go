package inventory_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/example"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/inventory"
	"github.com/idemgo/sqs-lambda-consumer/functions/consumer/wiring"
)

// TestTemplateBlock: the inventory's block swapped into the repository's template.yaml
// gives a template cfn-lint accepts, wired to the inventory; swapping the block of the
// example template.yaml carries back gives the original template byte for byte.
func TestTemplateBlock(t *testing.T) {
	orig, err := os.ReadFile("../../../template.yaml")
	if err != nil {
		t.Fatal(err)
	}
	carried, err := example.BlockExample(orig)
	if err != nil {
		t.Fatal(err)
	}
	carriedEx, err := example.Find(wiring.Examples, carried)
	if err != nil {
		t.Fatal(err)
	}
	block := inventory.Example{}.Template()
	if name, err := example.BlockExample(block); err != nil || name != "inventory" {
		t.Fatalf("BlockExample(the block) = %q, %v; want inventory", name, err)
	}
	swapped, err := example.SwapBlock(orig, block)
	if err != nil {
		t.Fatalf("SwapBlock: %v", err)
	}
	if name, err := example.BlockExample(swapped); err != nil || name != "inventory" {
		t.Fatalf("BlockExample(swapped template) = %q, %v; want inventory", name, err)
	}
	for _, want := range []string{"StockTable:", "ConfirmationsQueue:", "STOCK_TABLE: !Ref StockTable", "CONFIRMATIONS_QUEUE_URL: !Ref ConfirmationsQueue", "Default: order_id"} {
		if !bytes.Contains(swapped, []byte(want)) {
			t.Errorf("swapped template lacks %q", want)
		}
	}
	// The resources of the block the template carried (the default example's) are gone,
	// unless that example is the inventory itself; the grants' names are every block's.
	if carried != "inventory" {
		ids := regexp.MustCompile(`(?m)^  ([A-Za-z0-9]+):\s*$`).FindAllSubmatch(carriedEx.Template(), -1)
		if len(ids) < 4 {
			t.Fatalf("found %d names in %s's block", len(ids), carried)
		}
		for _, id := range ids {
			name := string(id[1])
			if name == "ExampleConsumerPolicy" || name == "ExampleReaperPolicy" || name == "ScopeName" || name == "KeyField" {
				continue
			}
			if bytes.Contains(swapped, []byte("  "+name+":")) || bytes.Contains(swapped, []byte("Ref "+name)) {
				t.Errorf("swapped template still names %s's %s", carried, name)
			}
		}
	}
	wired, err := example.Wire(orig, inventory.Example{})
	if err != nil || !bytes.Equal(wired, swapped) {
		t.Errorf("Wire(template, inventory) differs from SwapBlock (err %v)", err)
	}
	back, err := example.SwapBlock(swapped, carriedEx.Template())
	if err != nil {
		t.Fatalf("SwapBlock back to %s: %v", carried, err)
	}
	if !bytes.Equal(back, orig) {
		t.Fatalf("swapping %s's block back does not give template.yaml byte for byte", carried)
	}

	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		t.Skip("cfn-lint is not on PATH")
	}
	path := filepath.Join(t.TempDir(), "template.yaml")
	if err := os.WriteFile(path, swapped, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), lint, path).CombinedOutput(); err != nil {
		t.Fatalf("cfn-lint on the template with the inventory's block: %v\n%s", err, out)
	}
}
