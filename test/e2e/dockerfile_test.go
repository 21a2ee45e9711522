package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// writeFiles writes name → content under dir (parents made).
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// pyAppDockerfile is a Python web app's Dockerfile as projects write it,
// its `pip install` replaced by a step that works offline.
const pyAppDockerfile = `FROM base
ARG GREETING=hello
ENV APP_HOME=/app PYTHONUNBUFFERED=1
WORKDIR $APP_HOME
COPY requirements.txt .
RUN mkdir -p deps && while read -r pkg; do echo "installed $pkg" > "deps/$pkg"; done < requirements.txt
COPY . .
RUN test ! -e secret.txt && test ! -e debug.log && echo "$GREETING" > greeting.txt
USER 1000
EXPOSE 8000
LABEL org.example.app=demo
CMD ["python3", "app.py"]
`

const pyApp = `import os
print(open("greeting.txt").read().strip(), "from", os.getcwd(), "as", os.getuid(), "with", sorted(os.listdir("deps")), os.environ["PYTHONUNBUFFERED"])
`

// TestDockerfileBuilds: a Python-style app builds from its Dockerfile and
// context (.dockerignore honoured, ARG/ENV/WORKDIR/USER/EXPOSE/LABEL
// kept), berth run with no command runs its CMD, an unchanged rebuild is
// all cache hits and a changed file rebuilds only from its COPY on; a
// multi-stage build copies from an earlier stage and keeps
// ENTRYPOINT+CMD; an unsupported instruction is refused with its line;
// and the context cannot reach outside itself (../ sources, a tarball's
// ../ and absolute names, a symlink to /etc/shadow).
func TestDockerfileBuilds(t *testing.T) {
	parallel(t)
	d := startDaemon(t)
	ctx := context.Background()

	app := t.TempDir()
	writeFiles(t, app, map[string]string{
		"Dockerfile":       pyAppDockerfile,
		"app.py":           pyApp,
		"requirements.txt": "flask\nrequests\n",
		".dockerignore":    "secret.txt\n*.log\n",
		"secret.txt":       "do-not-ship",
		"debug.log":        "noise",
	})
	out, errOut, code := d.cli("template", "build", "pyapp", "-f", filepath.Join(app, "Dockerfile"), app, "--build-arg", "GREETING=hi")
	if code != 0 || strings.TrimSpace(out) != "pyapp" {
		t.Fatalf("build pyapp: %d %q %q", code, out, errOut)
	}
	want := "hi from /app as 1000 with ['flask', 'requests'] 1\n"
	if o, e, c := d.cli("run", "--template", "pyapp"); c != 0 || o != want {
		t.Fatalf("berth run with no command: %d %q %q (want %q)", c, o, e, want)
	}
	tpl, err := d.c.GetTemplate(ctx, "pyapp")
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Labels["org.example.app"] != "demo" || len(tpl.ExposedPorts) != 1 || tpl.ExposedPorts[0] != "8000/tcp" ||
		tpl.User != "1000" || tpl.Workdir != "/app" || tpl.Source != "dockerfile" || tpl.Build == nil {
		t.Fatalf("template config: %+v", tpl)
	}
	lines := map[int]bool{}
	for _, st := range tpl.Build.Steps {
		lines[st.Line] = true
	}
	if !lines[5] || !lines[6] || !lines[7] || !lines[8] {
		t.Fatalf("build record lacks the RUN/COPY lines: %+v", tpl.Build.Steps)
	}
	// Unchanged: every layer from the cache.
	_, errOut, code = d.cli("template", "build", "pyapp2", "-f", filepath.Join(app, "Dockerfile"), app, "--build-arg", "GREETING=hi")
	if code != 0 || strings.Count(errOut, "(cached)") != 4 || !strings.Contains(errOut, "0 built") {
		t.Fatalf("unchanged rebuild: %d %q", code, errOut)
	}
	// A changed app.py: the requirements layers stay cached, COPY . . on rebuilt.
	writeFiles(t, app, map[string]string{"app.py": strings.Replace(pyApp, "print(", "print('v2', ", 1)})
	_, errOut, code = d.cli("template", "build", "pyapp3", "-f", filepath.Join(app, "Dockerfile"), app, "--build-arg", "GREETING=hi")
	if code != 0 || !strings.Contains(errOut, "COPY requirements.txt . (cached)") || strings.Contains(errOut, "COPY . . (cached)") {
		t.Fatalf("changed rebuild: %d %q", code, errOut)
	}
	if o, _, c := d.cli("run", "--template", "pyapp3"); c != 0 || !strings.HasPrefix(o, "v2 hi") {
		t.Fatalf("changed app: %q", o)
	}

	// Multi-stage: the result copies from the build stage.
	ms := t.TempDir()
	writeFiles(t, ms, map[string]string{
		"hello.sh.in": "#!/bin/sh\necho hello NAME \"$@\"\n",
		"Dockerfile": `FROM base AS build
WORKDIR /src
COPY hello.sh.in .
RUN mkdir -p /out && sed 's/NAME/berth/' hello.sh.in > /out/hello && chmod 755 /out/hello

FROM base
COPY --from=build /out/hello /opt/bin/
ENTRYPOINT ["/opt/bin/hello"]
CMD ["world"]
`})
	if o, e, c := d.cli("template", "build", "multi", "-f", filepath.Join(ms, "Dockerfile"), ms); c != 0 {
		t.Fatalf("multi-stage build: %q %q", o, e)
	}
	if o, e, c := d.cli("run", "--template", "multi"); c != 0 || o != "hello berth world\n" {
		t.Fatalf("multi-stage run: %d %q %q", c, o, e)
	}
	if _, _, c := d.cli("run", "--template", "multi", "--", "test", "-e", "/src/hello.sh.in"); c == 0 {
		t.Fatal("the build stage's files leaked into the result")
	}

	// An unsupported instruction is refused with its line, before any step.
	bad := t.TempDir()
	writeFiles(t, bad, map[string]string{"Dockerfile": "FROM base\nRUN true\nHEALTHCHECK CMD true\n"})
	_, errOut, code = d.cli("template", "build", "bad", "-f", filepath.Join(bad, "Dockerfile"), bad)
	if code == 0 || !strings.Contains(errOut, "line 3") || !strings.Contains(errOut, "HEALTHCHECK") {
		t.Fatalf("unsupported instruction: %d %q", code, errOut)
	}
	// A failing RUN names its line, instruction and exit code.
	writeFiles(t, bad, map[string]string{"Dockerfile": "FROM base\nRUN exit 7\n"})
	_, errOut, code = d.cli("template", "build", "bad", "-f", filepath.Join(bad, "Dockerfile"), bad)
	if code == 0 || !strings.Contains(errOut, "line 2 (RUN exit 7)") || !strings.Contains(errOut, "exit code 7") {
		t.Fatalf("failing RUN: %d %q", code, errOut)
	}

	// The context is the whole world of a COPY: ../ stays inside it.
	esc := t.TempDir()
	writeFiles(t, esc, map[string]string{"Dockerfile": "FROM base\nCOPY ../../../../etc/shadow /stolen\n"})
	_, errOut, code = d.cli("template", "build", "esc", "-f", filepath.Join(esc, "Dockerfile"), esc)
	if code == 0 || !strings.Contains(errOut, "etc/shadow: no such file") {
		t.Fatalf("COPY ../ escaped: %d %q", code, errOut)
	}
	// A symlink in the context is copied as a symlink: inside the image it
	// names the image's own file, never the host's.
	if err := os.Symlink("/etc/shadow", filepath.Join(esc, "shadow-link")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, esc, map[string]string{"Dockerfile": "FROM base\nCOPY shadow-link /x/\n"})
	if o, e, c := d.cli("template", "build", "esc", "-f", filepath.Join(esc, "Dockerfile"), esc); c != 0 {
		t.Fatalf("symlink build: %q %q", o, e)
	}
	hostShadow, _ := os.ReadFile("/etc/shadow")
	o, _, _ := d.cli("run", "--template", "esc", "--", "sh", "-c", "readlink /x/shadow-link; cat /x/shadow-link 2>/dev/null")
	if !strings.HasPrefix(o, "/etc/shadow\n") || len(hostShadow) > 0 && strings.Contains(o, strings.SplitN(string(hostShadow), "\n", 2)[0]) {
		t.Fatalf("symlink copy: %q", o)
	}
	// Archives naming places outside their root are refused whole.
	for _, name := range []string{"../evil", "/abs/evil", "a/../../evil"} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		df := "FROM base\nCOPY . /ctx/\n"
		tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(df))})
		tw.Write([]byte(df))
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 4})
		tw.Write([]byte("evil"))
		tw.Close()
		_, err := d.c.BuildDockerfile(ctx, "tarball", &buf, client.DockerfileOptions{}, nil)
		var ce *client.Error
		if !asClientError(err, &ce) || ce.Status != 400 {
			t.Fatalf("context with %q: %v", name, err)
		}
	}
	if _, err := d.c.GetTemplate(ctx, "tarball"); err == nil {
		t.Fatal("a refused context left a template")
	}
	_ = api.Template{}
}
