package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGatewayLogIsPrivate (issue 38, argued point): `idemctl gateway --log FILE` writes
// every call's key and body; the file is its owner's alone (0600), a new one and one that
// was there, readable by all, before.
func TestGatewayLogIsPrivate(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "old.log")
	if err := os.WriteFile(existing, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "new.log"), existing} {
		f, err := createPrivate(path)
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, mode)
		}
	}
}
