package dockerfile

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
)

const multiStage = `# syntax=docker/dockerfile:1
ARG BASE=base
FROM ${BASE} AS build
ARG VERSION=1.0
ENV APP=/src GOFLAGS=-mod=vendor
WORKDIR $APP
COPY --chown=1000:1000 go.mod main.go ./
RUN echo building $VERSION > out.txt
FROM build
LABEL org.opencontainers.image.title="demo app" version=$VERSION
FROM base
COPY --from=build /src/out.txt /app/
WORKDIR app
USER 1000
EXPOSE 8080 53/udp
ENTRYPOINT ["/bin/sh", "-c"]
CMD echo hello
STOPSIGNAL SIGINT
`

func TestConvertMultiStage(t *testing.T) {
	p, err := Convert([]byte(multiStage), Options{BuildArgs: map[string]string{"VERSION": "2.0"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Stages) != 3 || p.Target != 2 {
		t.Fatalf("stages: %+v", p.Stages)
	}
	b := p.Stages[0]
	if b.Name != "build" || b.Base != "base" || b.BaseStage != -1 || b.Line != 3 {
		t.Fatalf("stage 0: %+v", b)
	}
	cp := b.Steps[3].Copy
	if cp == nil || !slices.Equal(cp.Srcs, []string{"go.mod", "main.go"}) || cp.Dst != "/src" || !cp.DstIsDir || cp.Chown != "1000:1000" || cp.FromStage != -1 {
		t.Fatalf("COPY: %+v", cp)
	}
	run := b.Steps[4]
	if run.Kind != KindRun || !slices.Equal(run.Run, []string{"/bin/sh", "-c", "echo building $VERSION > out.txt"}) ||
		!slices.Equal(run.RunEnv, []string{"VERSION=2.0"}) || run.Line != 8 {
		t.Fatalf("RUN: %+v", run)
	}
	if p.Stages[1].BaseStage != 0 {
		t.Fatalf("FROM build: %+v", p.Stages[1])
	}
	// An ARG is the stage's own: a stage built on it does not see it.
	if l := p.Stages[1].Steps[0]; l.Kind != KindLabel || l.Env[1] != [2]string{"version", ""} || l.Env[0][1] != "demo app" {
		t.Fatalf("LABEL: %+v", l)
	}
	f := p.Stages[2]
	if c := f.Steps[0].Copy; c.FromStage != 0 || c.Srcs[0] != "src/out.txt" || c.Dst != "/app" || !c.DstIsDir {
		t.Fatalf("COPY --from: %+v", c)
	}
	if w := f.Steps[1]; w.Workdir != "/app" {
		t.Fatalf("WORKDIR relative: %+v", w)
	}
	if e := f.Steps[3]; !slices.Equal(e.Ports, []string{"53/udp", "8080/tcp"}) {
		t.Fatalf("EXPOSE: %+v", e)
	}
	if e := f.Steps[4]; !slices.Equal(e.Cmd, []string{"/bin/sh", "-c"}) {
		t.Fatalf("ENTRYPOINT: %+v", e)
	}
	if c := f.Steps[5]; !slices.Equal(c.Cmd, []string{"/bin/sh", "-c", "echo hello"}) {
		t.Fatalf("CMD: %+v", c)
	}
	if need := p.Needed(); !need[0] || need[1] || !need[2] {
		t.Fatalf("needed: %v", need)
	}
	// A target stops at its stage.
	p, err = Convert([]byte(multiStage), Options{Target: "build"})
	if err != nil || p.Target != 0 {
		t.Fatalf("target: %+v %v", p, err)
	}
}

// TestConvertRefuses: what berth does not carry out is refused with the
// line it is on.
func TestConvertRefuses(t *testing.T) {
	for _, tc := range []struct {
		src  string
		line int
		want string
	}{
		{"FROM base\nRUN true\nHEALTHCHECK CMD true\n", 3, "HEALTHCHECK is not supported"},
		{"FROM base\nVOLUME /data\n", 2, "VOLUME is not supported"},
		{"FROM base\nONBUILD RUN true\n", 2, "ONBUILD is not supported"},
		{"FROM base\nRUN --mount=type=cache,target=/x true\n", 2, "RUN --mount is not supported"},
		{"FROM base\n\nADD https://example.com/x /x\n", 3, "ADD of a URL"},
		{"FROM base\nCOPY --from=nope /a /b\n", 2, "no earlier stage"},
		{"FROM base\nFROBNICATE x\n", 2, "FROBNICATE"},
		{"FROM base\nEXPOSE 99999\n", 2, "EXPOSE"},
		{"FROM --platform=linux/arm64 base\n", 1, "--platform"},
		{"RUN true\n", 1, ""},
		{"FROM base\nRUN <<EOF\necho hi\nEOF\n", 2, "heredocs"},
		{"FROM base\nCOPY --chmod=abc a /a\n", 2, "--chmod"},
	} {
		_, err := Convert([]byte(tc.src), Options{})
		var de *Error
		if !errors.As(err, &de) || de.Line != tc.line || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v (want line %d, %q)", tc.src, err, tc.line, tc.want)
		}
	}
	if _, err := Convert([]byte("FROM base\n"), Options{BuildArgs: map[string]string{"X": "1"}}); err == nil {
		t.Error("an undeclared build argument was accepted")
	}
	if _, err := Convert([]byte("FROM base\n"), Options{Target: "x"}); err == nil {
		t.Error("a missing target was accepted")
	}
}

// TestSourceNameStaysInContext: a source never names a place outside the
// context, however written.
func TestSourceNameStaysInContext(t *testing.T) {
	for in, want := range map[string]string{"../../etc/shadow": "etc/shadow", "/etc/shadow": "etc/shadow", ".": ".",
		"a/../../b": "b", "./x/": "x", "/": "."} {
		if got, err := SourceName(in); err != nil || got != want {
			t.Errorf("SourceName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// FuzzConvert: any input converts or fails with an *Error, never a
// panic; an accepted plan's sources are clean relative names, its
// destinations and workdirs clean absolute paths, and its stage
// references point back.
func FuzzConvert(f *testing.F) {
	for _, s := range []string{multiStage,
		"FROM base\nRUN echo hi\n",
		"FROM scratch\nCOPY . /\n",
		"ARG X=1\nFROM base AS a\nARG X\nRUN echo $X\nFROM a\nCOPY --from=0 /x /y\n",
		"FROM base\nENV A=1 B=\"two words\"\nWORKDIR /a\nWORKDIR b\nUSER app:app\nCMD [\"python3\", \"app.py\"]\n",
		"FROM base\nADD --chown=1:1 a.tar /x/\nSHELL [\"/bin/bash\", \"-c\"]\nRUN echo $0\n",
		"# escape=`\nFROM base\nRUN echo `\n  hi\n",
		"FROM base\nCOPY ../../etc/shadow /x\n",
		"FROM base\nHEALTHCHECK NONE\n",
		"FROM ${X:-base}\nLABEL a=b\nEXPOSE 80-90/tcp\nSTOPSIGNAL 9\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		p, err := Convert(src, Options{})
		if err != nil {
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		if len(p.Stages) == 0 || p.Target < 0 || p.Target >= len(p.Stages) {
			t.Fatalf("plan without its target: %+v", p)
		}
		for i, s := range p.Stages {
			if s.BaseStage >= i || (s.BaseStage < 0 && s.Base == "" && !s.Scratch) {
				t.Fatalf("stage %d base: %+v", i, s)
			}
			for _, st := range s.Steps {
				if c := st.Copy; c != nil {
					if c.FromStage >= i || !path.IsAbs(c.Dst) || path.Clean(c.Dst) != c.Dst {
						t.Fatalf("copy: %+v", c)
					}
					for _, src := range c.Srcs {
						if path.IsAbs(src) || src == ".." || strings.HasPrefix(src, "../") || path.Clean(src) != src {
							t.Fatalf("copy source %q leaves the context", src)
						}
					}
				}
				if st.Kind == KindWorkdir && (!path.IsAbs(st.Workdir) || path.Clean(st.Workdir) != st.Workdir) {
					t.Fatalf("workdir %q", st.Workdir)
				}
				if st.Kind == KindRun && len(st.Run) == 0 {
					t.Fatalf("empty RUN")
				}
			}
		}
	})
}

// TestBaseWorkdir: relative COPY destinations and WORKDIRs start from the
// base's own working directory, as docker's do (a template whose workdir
// is /workspace copies "dest/" to /workspace/dest, not /dest); a stage on
// an earlier stage takes that stage's; without one, /.
func TestBaseWorkdir(t *testing.T) {
	src := "FROM base\nCOPY a.txt dest/\nWORKDIR sub\nCOPY b.txt .\nFROM base AS plain\nCOPY a.txt dest/\n"
	p, err := Convert([]byte(src), Options{BaseWorkdir: func(base string) string {
		if base == "base" {
			return "/workspace"
		}
		return ""
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := p.Stages[0]
	if c := s.Steps[0].Copy; c.Dst != "/workspace/dest" || !c.DstIsDir {
		t.Errorf("COPY a.txt dest/ on base: %+v", c)
	}
	if w := s.Steps[1]; w.Kind != KindWorkdir || w.Workdir != "/workspace/sub" {
		t.Errorf("WORKDIR sub on base: %+v", w)
	}
	if c := s.Steps[2].Copy; c.Dst != "/workspace/sub" {
		t.Errorf("COPY b.txt . after WORKDIR sub: %+v", c)
	}
	p, err = Convert([]byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c := p.Stages[0].Steps[0].Copy; c.Dst != "/dest" {
		t.Errorf("without a known base workdir: %+v", c)
	}
}
