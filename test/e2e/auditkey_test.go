package e2e

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
)

// serve --audit-key-file (#15): two daemons sharing one PostgreSQL store
// seal with one key, so the one chain their records form verifies on
// either; a third daemon with its own key sees it as tampered.
func TestTwoDaemonsShareAuditKey(t *testing.T) {
	parallel(t)
	url := pgURL(t)
	key := make([]byte, 32)
	rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "audit.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	a := startDaemonWith(t, "--store", url, "--audit-key-file", keyFile)
	b := startDaemonWith(t, "--store", url, "--audit-key-file", keyFile)
	ctx := context.Background()
	for _, d := range []*daemon{a, b, a} {
		sb, err := d.c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.c.DeleteSandbox(ctx, sb.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	for name, d := range map[string]*daemon{"a": a, "b": b} {
		if code, out := auditVerify(t, d); code != 0 || !strings.Contains(out, "audit log intact") {
			t.Errorf("audit verify on %s: %d %q", name, code, out)
		}
	}
	own := startDaemonWith(t, "--store", url)
	if code, out := auditVerify(t, own); code == 0 {
		t.Errorf("a daemon with its own key verified the shared chain: %q", out)
	}
}
