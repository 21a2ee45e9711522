package catalogue

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
	"github.com/berth-sh/berth/internal/selftest/attack"
)

// The file API: uploads and reads resolved inside the sandbox's root
// whatever the paths and symlinks say. The host side holds a secret and a
// file to keep in the env's host dir; none may be read, written or removed
// through a sandbox.
func filesAttacks() []*attack.Attack {
	const g = "files"
	f := func(id, desc, expected string, run func(ctx ctxT, e *attack.Env) attack.Outcome) *attack.Attack {
		return &attack.Attack{ID: "files." + id, Category: attack.CatFiles, Description: desc, Expected: expected, Run: run}
	}
	// tarSlip uploads entries into /tmp/st-up and checks that none of the
	// named sandbox paths and host files exists afterwards.
	tarSlip := func(entries func(e *attack.Env) []tarEntry, sandboxPaths []string, hostNames []string) func(ctxT, *attack.Env) attack.Outcome {
		return attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
			e.Sh(ctx, sb.ID, "mkdir -p /tmp/st-up")
			werr := e.C.WriteTar(ctx, sb.ID, "/tmp/st-up", bytes.NewReader(makeTar(entries(e))))
			var hit []string
			for _, h := range hostNames {
				if _, err := os.Lstat(filepath.Join(e.HostDir, h)); err == nil {
					hit = append(hit, "host "+filepath.Join(e.HostDir, h))
				}
			}
			for _, p := range sandboxPaths {
				if out, _, _ := e.Sh(ctx, sb.ID, "test -e "+p+" -o -L "+p+" && echo there"); strings.Contains(out, "there") {
					hit = append(hit, "sandbox "+p)
				}
			}
			if len(hit) > 0 {
				return attack.Escaped("written outside the target dir: %s (upload: %s)", strings.Join(hit, ", "), errText(werr))
			}
			return attack.Contained("nothing outside the target dir (upload: %s)", errText(werr))
		})
	}
	// secretRead checks that reading path (after setup in the sandbox)
	// does not return the host secret.
	secretRead := func(setup func(e *attack.Env) string, path func(e *attack.Env) string) func(ctxT, *attack.Env) attack.Outcome {
		return attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
			secret := hostSecret(e)
			if s := setup(e); s != "" {
				e.Sh(ctx, sb.ID, s)
			}
			var buf attack.SyncBuffer
			_, _, err := e.C.ReadFile(ctx, sb.ID, path(e), &buf)
			if strings.Contains(buf.String(), secret) {
				return attack.Escaped("read the host's secret through %s", path(e))
			}
			return attack.Contained("%s", errOr(err, fmt.Sprintf("read %d bytes, not the host's", len(buf.String()))))
		})
	}
	// dotdot sends a raw request whose path climbs out of the root and
	// wants a 400 with nothing touched on the host.
	dotdot := func(method, endpoint, query string, body any, check func(e *attack.Env) string) func(ctxT, *attack.Env) attack.Outcome {
		return attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
			secret := hostSecret(e)
			p := "../../../../../../../.." + e.HostDir
			st, resp, err := e.Raw.Do(ctx, method, "/v1/sandboxes/"+sb.ID+endpoint+"?path="+url.QueryEscape(p)+query, "", body)
			if err != nil {
				return attack.Escaped("request: %v", err)
			}
			if strings.Contains(resp, secret) {
				return attack.Escaped("%d and the host's secret in the answer", st)
			}
			if bad := check(e); bad != "" {
				return attack.Escaped("%d; on the host: %s", st, bad)
			}
			return attack.Judged(st == 400, "%d %s", st, attack.Clip(attack.OneLine(resp), 70))
		})
	}
	absent := func(name string) func(e *attack.Env) string {
		return func(e *attack.Env) string {
			if _, err := os.Lstat(filepath.Join(e.HostDir, name)); err == nil {
				return filepath.Join(e.HostDir, name) + " was created"
			}
			return ""
		}
	}
	return []*attack.Attack{
		f("dockerfile-context-escape", "build from a Dockerfile whose context tar climbs out (../, absolute names) and whose COPY names the host's secret by ../ and absolute paths",
			"every build refused; nothing written on the host; no template made",
			func(ctx ctxT, e *attack.Env) attack.Outcome {
				secret := hostSecret(e)
				name := "st-dockerfile-" + e.Tag
				var got []string
				for _, es := range [][]tarEntry{
					{{name: "Dockerfile", body: "FROM base\nCOPY . /ctx/\n"}, {name: "../../../../../../../.." + e.HostDir + "/slip-df", body: "x"}},
					{{name: "Dockerfile", body: "FROM base\nCOPY . /ctx/\n"}, {name: e.HostDir + "/slip-df", body: "x"}},
					{{name: "Dockerfile", body: "FROM base\nCOPY ../../../../../../../.." + e.HostDir + "/secret /stolen\n"}},
					{{name: "Dockerfile", body: "FROM base\nCOPY " + e.HostDir + "/secret /stolen\n"}},
				} {
					_, err := e.C.BuildDockerfile(ctx, name, bytes.NewReader(makeTar(es)), client.DockerfileOptions{}, nil)
					if err == nil {
						e.C.DeleteTemplate(ctx, name)
						return attack.Escaped("a build with %q was accepted", es[len(es)-1].name+" "+es[0].body)
					}
					got = append(got, errText(err))
				}
				if _, err := os.Lstat(filepath.Join(e.HostDir, "slip-df")); err == nil {
					return attack.Escaped("the context wrote %s on the host", filepath.Join(e.HostDir, "slip-df"))
				}
				if _, err := e.C.GetTemplate(ctx, name); err == nil {
					return attack.Escaped("a refused build left template %s", name)
				}
				_ = secret
				return attack.Contained("refused: %s", strings.Join(got, "; "))
			}),
		f("tar-slip-dotdot", "upload a tar with ../ entries climbing to a host dir and out of the target dir", "nothing written outside the target dir",
			tarSlip(func(e *attack.Env) []tarEntry {
				return []tarEntry{{name: "../../../../../../../.." + e.HostDir + "/slip-dotdot", body: "x"}, {name: "../st-escape-dotdot", body: "x"}}
			}, []string{"/tmp/st-escape-dotdot"}, []string{"slip-dotdot"})),
		f("tar-slip-absolute", "upload a tar with absolute entry names (a host path, /tmp/...)", "nothing written outside the target dir",
			tarSlip(func(e *attack.Env) []tarEntry {
				return []tarEntry{{name: e.HostDir + "/slip-abs", body: "x"}, {name: "/tmp/st-escape-abs", body: "x"}}
			}, []string{"/tmp/st-escape-abs"}, []string{"slip-abs"})),
		f("tar-slip-symlink", "upload a tar with a symlink to / (and to the host dir) then a file through it", "nothing written outside the target dir",
			tarSlip(func(e *attack.Env) []tarEntry {
				return []tarEntry{{name: "lnk", link: "/", sym: true}, {name: "lnk/tmp/st-escape-sym", body: "x"},
					{name: "hlnk", link: e.HostDir, sym: true}, {name: "hlnk/slip-sym", body: "x"},
					{name: "rlnk", link: "../../../../../../..", sym: true}, {name: "rlnk/tmp/st-escape-rsym", body: "x"}}
			}, []string{"/tmp/st-escape-sym", "/tmp/st-escape-rsym"}, []string{"slip-sym"})),
		f("tar-hardlink", "upload a tar with a hard link to a host file, and to /etc/hostname then overwrite it", "no host file linked; nothing outside changed",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				secret := hostSecret(e)
				e.Sh(ctx, sb.ID, "mkdir -p /tmp/st-hl; cp /etc/hostname /tmp/st-hostname.orig")
				werr := e.C.WriteTar(ctx, sb.ID, "/tmp/st-hl", bytes.NewReader(makeTar([]tarEntry{
					{name: "h1", link: filepath.Join(e.HostDir, "secret"), hard: true},
					{name: "h2", link: "../../etc/hostname", hard: true},
					{name: "h2", body: "pwned-" + e.Tag}})))
				out, _, _ := e.Sh(ctx, sb.ID, "cat /tmp/st-hl/h1 2>/dev/null; echo; cat /etc/hostname")
				if strings.Contains(out, secret) {
					return attack.Escaped("a hard link reached the host's secret (upload: %s)", errText(werr))
				}
				if strings.Contains(out, "pwned-"+e.Tag) {
					return attack.Escaped("/etc/hostname outside the target dir was overwritten (upload: %s)", errText(werr))
				}
				return attack.Contained("nothing linked outside (upload: %s)", errText(werr))
			})),
		f("read-symlink-abs", "read a sandbox symlink pointing at a host file (absolute)", "the host file is never read",
			secretRead(func(e *attack.Env) string { return "ln -sfn " + e.HostDir + "/secret /tmp/st-ln-abs" },
				func(e *attack.Env) string { return "/tmp/st-ln-abs" })),
		f("read-symlink-rel", "read a sandbox symlink ../../../../<host file>", "the host file is never read",
			secretRead(func(e *attack.Env) string {
				return "ln -sfn ../../../../../../../.." + e.HostDir + "/secret /tmp/st-ln-rel"
			},
				func(e *attack.Env) string { return "/tmp/st-ln-rel" })),
		f("write-symlink", "write through a sandbox symlink pointing at a host path", "nothing created on the host",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				e.Sh(ctx, sb.ID, "ln -sfn "+e.HostDir+"/written-sym /tmp/st-wl")
				_, err := e.C.WriteFile(ctx, sb.ID, "/tmp/st-wl", 0o644, strings.NewReader("x"))
				if bad := absent("written-sym")(e); bad != "" {
					return attack.Escaped("%s (write: %s)", bad, errText(err))
				}
				return attack.Contained("host untouched (write: %s)", errText(err))
			})),
		f("move-symlink", "move a file through a sandbox symlink to a host dir, and the host's secret out through it", "nothing moved to or from the host",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				secret := hostSecret(e)
				e.Sh(ctx, sb.ID, "ln -sfn "+e.HostDir+" /tmp/st-mvl; echo x > /tmp/st-mvsrc")
				err1 := e.C.Move(ctx, sb.ID, "/tmp/st-mvsrc", "/tmp/st-mvl/moved-out", false)
				if bad := absent("moved-out")(e); bad != "" {
					return attack.Escaped("%s (move: %s)", bad, errText(err1))
				}
				err2 := e.C.Move(ctx, sb.ID, "/tmp/st-mvl/secret", "/tmp/st-stolen", false)
				if _, err := os.Stat(filepath.Join(e.HostDir, "secret")); err != nil {
					return attack.Escaped("the host's secret was moved away (move: %s)", errText(err2))
				}
				if out, _, _ := e.Sh(ctx, sb.ID, "cat /tmp/st-stolen 2>/dev/null"); strings.Contains(out, secret) {
					return attack.Escaped("the host's secret moved into the sandbox")
				}
				return attack.Contained("host untouched (moves: %s; %s)", errText(err1), errText(err2))
			})),
		f("watch-symlink", "watch a sandbox symlink to a host dir, then change files in that host dir", "no watch of the host dir; no host event reported",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				e.Sh(ctx, sb.ID, "ln -sfn "+e.HostDir+" /tmp/st-wtl")
				wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				var seen []string
				werr := e.C.Watch(wctx, sb.ID, "/tmp/st-wtl", true, func(ev api.WatchEvent) error {
					if ev.Type == api.WatchReady {
						os.WriteFile(filepath.Join(e.HostDir, "watched-"+e.Tag), []byte("x"), 0o644)
						return nil
					}
					seen = append(seen, ev.Type+" "+ev.Path)
					return nil
				})
				os.Remove(filepath.Join(e.HostDir, "watched-"+e.Tag))
				if len(seen) > 0 {
					return attack.Escaped("host changes reported through the watch: %v", seen)
				}
				return attack.Contained("no host event (watch: %s)", errText(werr))
			})),
		f("list-symlink-dir", "list a sandbox symlink pointing at a host directory", "the host dir is never listed",
			attack.InGroup(g, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				hostSecret(e)
				e.Sh(ctx, sb.ID, "ln -sfn "+e.HostDir+" /tmp/st-ld")
				fis, err := e.C.List(ctx, sb.ID, "/tmp/st-ld")
				for _, fi := range fis {
					if fi.Name == "secret" || fi.Name == "keep" {
						return attack.Escaped("listed the host dir: %s", fi.Name)
					}
				}
				return attack.Contained("%s", errOr(err, fmt.Sprintf("%d entries, none the host's", len(fis))))
			})),
		f("dotdot-read", "GET files?path=../../../<host secret>", "400; nothing read",
			dotdot("GET", "/files", "", nil, func(*attack.Env) string { return "" })),
		f("dotdot-write", "PUT files?path=../../../<host dir>/dotdot-w", "400; nothing written",
			dotdot("PUT", "/files", "", []byte("x"), func(e *attack.Env) string { return absent("dotdot-w")(e) })),
		f("dotdot-mkdir", "POST files/mkdir?path=../../../<host dir>", "400; nothing made",
			dotdot("POST", "/files/mkdir", "", nil, func(e *attack.Env) string { return "" })),
		f("dotdot-remove", "DELETE files?path=../../../<host dir>&recursive=true", "400; the host dir intact",
			dotdot("DELETE", "/files", "&recursive=true", nil, func(e *attack.Env) string {
				if _, err := os.Stat(filepath.Join(e.HostDir, "keep")); err != nil {
					return "the host dir's files were removed"
				}
				return ""
			})),
		f("quarantine-symlink", "quarantine a sandbox holding a symlink to a host file, then read it (the daemon serves the files itself)", "the host file is never read",
			attack.Fresh(api.CreateSandboxRequest{}, func(ctx ctxT, e *attack.Env, sb *sandboxT) attack.Outcome {
				secret := hostSecret(e)
				e.Sh(ctx, sb.ID, "ln -sfn "+e.HostDir+"/secret /tmp/st-q; ln -sfn ../../../../../../.."+e.HostDir+"/secret /tmp/st-q2")
				if _, err := e.C.Quarantine(ctx, sb.ID); err != nil {
					return attack.Escaped("quarantine: %v", err)
				}
				var res []string
				for _, p := range []string{"/tmp/st-q", "/tmp/st-q2"} {
					var buf attack.SyncBuffer
					_, _, err := e.C.ReadFile(ctx, sb.ID, p, &buf)
					if strings.Contains(buf.String(), secret) {
						return attack.Escaped("the quarantine reader followed %s to the host's secret", p)
					}
					res = append(res, p+": "+errOr(err, "not the host's"))
				}
				return attack.Contained("%s", strings.Join(res, "; "))
			})),
	}
}

// hostSecret makes the host files the file attacks aim at and returns the
// secret's content.
func hostSecret(e *attack.Env) string {
	s := "st-host-secret-" + e.Tag
	os.WriteFile(filepath.Join(e.HostDir, "secret"), []byte(s), 0o644)
	os.WriteFile(filepath.Join(e.HostDir, "keep"), []byte("keep"), 0o644)
	return s
}

func errOr(err error, ok string) string {
	if err != nil {
		return "refused: " + attack.Clip(err.Error(), 70)
	}
	return ok
}

type tarEntry struct {
	name, body, link string
	sym, hard        bool
}

func makeTar(es []tarEntry) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, en := range es {
		h := &tar.Header{Name: en.name, Mode: 0o644, Size: int64(len(en.body)), Typeflag: tar.TypeReg}
		switch {
		case en.sym:
			h.Typeflag, h.Linkname, h.Size, h.Mode = tar.TypeSymlink, en.link, 0, 0o777
		case en.hard:
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, en.link, 0
		}
		tw.WriteHeader(h)
		if h.Size > 0 {
			tw.Write([]byte(en.body))
		}
	}
	tw.Close()
	return b.Bytes()
}
