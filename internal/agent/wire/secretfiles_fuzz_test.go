package wire

import (
	"strings"
	"testing"
)

// FuzzDecodeSecretFiles: whatever the bytes, the decode either refuses or
// returns at most MaxSecretFiles files within the byte bounds, each under
// SecretDir with no empty, . or .. component, no path twice.
func FuzzDecodeSecretFiles(f *testing.F) {
	for _, s := range []string{
		`{"files":[{"path":"/run/secrets/a","data":"eA=="}]}`,
		`{"files":[{"path":"/run/secrets/a/b","data":""},{"path":"/run/secrets/c","data":"eQ=="}]}`,
		`{"files":[{"path":"/run/secrets/../etc/passwd","data":"eA=="}]}`,
		`{"files":[{"path":"/run/secrets/a","data":"eA=="},{"path":"/run/secrets/a/b","data":"eA=="}]}`,
		`{"files":[],"egress_ca":"eA==","system_ca":"eQ=="}`,
		`{"files":[{"path":"/run/secrets/berth-egress-ca-bundle.pem","data":"eA=="}],"egress_ca":"eA=="}`,
		`{"files":[]}`, `{}`, `null`, `{"files":[{"path":"/run/secrets/a"}]} x`, `{"other":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		sf, rels, err := DecodeSecretFiles(p)
		if err != nil {
			return
		}
		if len(sf.EgressCA) > MaxEgressCABytes || len(sf.SystemCA) > MaxSystemCABytes {
			t.Fatalf("CA of %d/%d bytes accepted", len(sf.EgressCA), len(sf.SystemCA))
		}
		for _, fl := range sf.Files {
			if fl.Path == EgressCABundle {
				t.Fatalf("a secret file at the CA bundle's path accepted")
			}
		}
		if len(sf.Files) > MaxSecretFiles || len(rels) != len(sf.Files) {
			t.Fatalf("%d files", len(sf.Files))
		}
		total := 0
		seen := map[string]bool{}
		for i, fl := range sf.Files {
			total += len(fl.Data)
			if len(fl.Data) > MaxSecretFileBytes || !strings.HasPrefix(fl.Path, SecretDir+"/") || len(fl.Path) > MaxSecretPath {
				t.Fatalf("file %q accepted", fl.Path)
			}
			if rels[i] != strings.TrimPrefix(fl.Path, SecretDir+"/") || seen[rels[i]] {
				t.Fatalf("rel %q of %q", rels[i], fl.Path)
			}
			seen[rels[i]] = true
			for _, c := range strings.Split(rels[i], "/") {
				if c == "" || c == "." || c == ".." {
					t.Fatalf("component %q of %q", c, fl.Path)
				}
			}
		}
		if total > MaxSecretBytes {
			t.Fatalf("%d bytes in all", total)
		}
	})
}
