package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/berth-sh/berth/client"
)

func tarOf(t *testing.T, name, content string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(content))
	tw.Close()
	return b.Bytes()
}

func asClientError(err error, target **client.Error) bool {
	return errors.As(err, target)
}

// startWith restarts a stopped daemon with extra serve flags.
func (d *daemon) startWith(extra ...string) {
	d.extra = extra
	d.start()
}

// startWithEnv starts a stopped daemon with extra environment variables
// (failpoints); with none, it starts a plain daemon.
func (d *daemon) startWithEnv(env ...string) {
	d.env = env
	d.start()
}

func jsonDecode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decoding %q: %v", s, err)
	}
}

// startDaemonWith starts a private daemon with extra serve flags.
func startDaemonWith(t *testing.T, extra ...string) *daemon {
	t.Helper()
	return newDaemon(t, &daemon{extra: extra})
}

// startDaemonIn starts a private daemon inside network namespace ns (only
// its network namespace: mounts stay visible to the test's leak checks).
func startDaemonIn(t *testing.T, ns string) *daemon {
	t.Helper()
	return newDaemon(t, &daemon{netns: ns})
}
