package e2e

import (
	"maps"
	"strings"
	"testing"
)

// TestE2BNewerEnvd (#33) drives the door's envd 0.6.4 API with the
// unmodified e2b SDK (test/e2b/envd.mjs): file metadata is the file's
// user.e2b.* xattrs — written by multipart and octet-stream uploads,
// read back by getInfo and list, kept by a rename, gone after an
// overwrite, and set from inside as well; watch events carry entry info
// when asked; a watch allowing network mounts works; a signed file URL
// reads and writes without a token, and is refused (401) when expired,
// edited (path, user, expiry), sent to another sandbox, used for the
// other operation, or used after its sandbox is gone; one that names no
// sandbox (E2B_SANDBOX_URL routes by headers) is told so (400). A
// command's wait when its sandbox is killed fails as E2B's does: the
// stream's connection cut, the SDK's health check then saying the sandbox
// is gone (TimeoutError, "killed or reached its end of life"). A create
// with mcp runs the SDK's own gateway start in the sandbox: on a template
// without mcp-gateway it fails as on E2B and leaves no sandbox. A
// sandbox made with maskRequestHost gets that Host on requests to its
// ports.
func TestE2BNewerEnvd(t *testing.T) {
	parallel(t)
	_, url, key := e2bDaemon(t)
	type answer struct {
		Status int
		Body   string
	}
	var got struct {
		OK                                   bool
		Failure                              string
		Written, WrittenOctet, Info          map[string]string
		InfoOctet, Listed, Renamed           map[string]string
		Overwritten, OverwrittenInfo, Inside map[string]string
		XattrCmd                             string
		Entry                                *struct {
			Name, Path, Type string
		}
		NetworkMounts                                  string
		Download, DownloadRoot, Upload, NoExpiry       answer
		Uploaded                                       string
		Expired, OtherPath, OtherUser, LaterExpiry     answer
		OtherSandbox, ReadAsWrite, Unrouted, AfterKill answer
		UnroutedExpired                                answer
		KilledWait, MCP, MaskedHost                    string
		MCPLeft                                        int
	}
	runE2BScript(t, "envd.mjs", url, key, &got)
	t.Logf("the SDK saw: %+v", got)
	if !got.OK {
		t.Fatalf("the SDK script failed: %s", got.Failure)
	}
	meta := map[string]string{"author": "mish", "purpose": "upload"}
	for what, m := range map[string]map[string]string{"multipart write": got.Written, "octet-stream write": got.WrittenOctet,
		"getInfo": got.Info, "renamed": got.Renamed} {
		if !maps.Equal(m, meta) {
			t.Errorf("metadata of the %s: %v, want %v", what, m, meta)
		}
	}
	if !maps.Equal(got.Listed, map[string]string{"tag": "listed"}) {
		t.Errorf("metadata in a list: %v", got.Listed)
	}
	if got.Overwritten != nil || got.OverwrittenInfo != nil || got.XattrCmd != "none" {
		t.Errorf("an overwrite without metadata kept some: %v %v, in the sandbox %q", got.Overwritten, got.OverwrittenInfo, got.XattrCmd)
	}
	if want := map[string]string{"author": "mish", "purpose": "upload", "inside": "yes"}; !maps.Equal(got.Inside, want) {
		t.Errorf("an xattr set inside: %v, want %v", got.Inside, want)
	}
	if got.Entry == nil || got.Entry.Name != "f.txt" || got.Entry.Path != "/home/user/w/f.txt" || got.Entry.Type != "file" {
		t.Errorf("a watch event's entry: %+v", got.Entry)
	}
	if got.NetworkMounts != "f.txt" {
		t.Errorf("a watch allowing network mounts: %q", got.NetworkMounts)
	}
	for what, a := range map[string]answer{"download": got.Download, "download as root": got.DownloadRoot,
		"download without expiry": got.NoExpiry} {
		if a.Status != 200 {
			t.Errorf("a signed %s: %d %s", what, a.Status, a.Body)
		}
	}
	if got.Download.Body != "signed content" || got.DownloadRoot.Body != "root file" {
		t.Errorf("signed downloads read %q, %q", got.Download.Body, got.DownloadRoot.Body)
	}
	if got.Upload.Status != 200 || !strings.Contains(got.Upload.Body, `"path":"/home/user/up.txt"`) || got.Uploaded != "uploaded by url" {
		t.Errorf("a signed upload: %+v, read back %q", got.Upload, got.Uploaded)
	}
	if got.Expired.Status != 401 || !strings.Contains(got.Expired.Body, "signature is already expired") {
		t.Errorf("an expired signature: %+v", got.Expired)
	}
	for what, a := range map[string]answer{"path edited": got.OtherPath, "user edited": got.OtherUser,
		"expiry edited": got.LaterExpiry, "sent to another sandbox": got.OtherSandbox, "read signature to upload": got.ReadAsWrite,
		"after its sandbox was killed": got.AfterKill} {
		if a.Status != 401 || strings.Contains(a.Body, "signed content") {
			t.Errorf("a signed URL %s: %+v, want 401", what, a)
		}
	}
	if got.Unrouted.Status != 400 || !strings.Contains(got.Unrouted.Body, "--e2b-domain") {
		t.Errorf("a signed URL naming no sandbox: %+v", got.Unrouted)
	}
	if !strings.HasPrefix(got.KilledWait, "TimeoutError: ") || !strings.Contains(got.KilledWait, "killed or reached its end of life") {
		t.Errorf("waiting for a command of a killed sandbox: %s", got.KilledWait)
	}
	if got.MaskedHost != "masked.example:8080" {
		t.Errorf("the Host a request to port 8080 of a maskRequestHost sandbox carried: %q", got.MaskedHost)
	}
	if !strings.HasPrefix(got.MCP, "SandboxError: Failed to start MCP gateway") || got.MCPLeft != 0 {
		t.Errorf("a create with mcp on a template without mcp-gateway: %s, %d sandboxes left", got.MCP, got.MCPLeft)
	}
	if got.UnroutedExpired.Status != 401 || !strings.Contains(got.UnroutedExpired.Body, "signature is already expired") {
		t.Errorf("an expired signed URL naming no sandbox: %+v", got.UnroutedExpired)
	}
}
