package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// BuiltinName is the template name the daemon gives the Builtin image.
const BuiltinName = "host"

const maxOSRelease = 64 << 10

// builtinEnv is the environment of the built-in template.
var builtinEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
}

// Builtin returns the built-in "host" template: one small layer, made
// without any download, holding the skeleton of a root filesystem whose
// /usr is an empty mountpoint (the runtime bind-mounts the host's /usr there
// read-only), a fresh minimal /etc (root, and E2B's "user" with its home),
// and /.berth for the agent. Nothing of
// the host's /etc is copied but os-release. Its id depends only on its
// content, so repeated calls reuse the layer.
func (s *Store) Builtin(ctx context.Context) (*Image, error) {
	osRelease, err := readSmallFile(s.opts.osRelease, maxOSRelease)
	if err != nil {
		return nil, fmt.Errorf("builtin image: %w", err)
	}
	tarball, err := builtinTar(osRelease, HostAlternatives(s.opts.alternatives))
	if err != nil {
		return nil, fmt.Errorf("builtin image: %w", err)
	}
	sum := sha256.Sum256(tarball)
	id := "sha256:" + hex.EncodeToString(sum[:])
	if err := s.ensureLayer(ctx, layerSource{
		diffID: id,
		open:   func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarball)), nil },
	}); err != nil {
		return nil, fmt.Errorf("builtin image: %w", err)
	}
	return &Image{
		Layers: []string{id},
		Config: Config{
			Env:     append([]string(nil), builtinEnv...),
			Workdir: "/workspace",
			Cmd:     []string{"/bin/sh"},
		},
		Size: max(s.Size(id), 0),
	}, nil
}

// readSmallFile returns the content of regular file p, nil if it does not
// exist. It follows symlinks: os-release is usually one, and it is the
// host's own file, not input.
func readSmallFile(p string, limit int64) ([]byte, error) {
	if p == "" {
		return nil, nil
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", p, limit)
	}
	return b, nil
}

// builtinTar is the built-in layer as a tar, byte-for-byte the same for
// the same os-release and alternatives.
func builtinTar(osRelease []byte, alts []Symlink) ([]byte, error) {
	epoch := time.Unix(0, 0)
	type ent struct {
		name string
		typ  byte
		mode int64
		link string
		data string
		uid  int // owner (and group) id
	}
	ents := []ent{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: ".berth/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		{name: "dev/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/group", typ: tar.TypeReg, mode: 0o644, data: "root:x:0:\nsudo:x:27:user\nuser:x:1000:\nnogroup:x:65534:\n"},
		{name: "etc/hosts", typ: tar.TypeReg, mode: 0o644, data: "127.0.0.1\tlocalhost\n::1\tlocalhost\n"},
		{name: "etc/nsswitch.conf", typ: tar.TypeReg, mode: 0o644, data: "passwd: files\ngroup: files\nshadow: files\n" +
			"hosts: files dns\nnetworks: files\nprotocols: files\nservices: files\nethers: files\nrpc: files\n"},
		{name: "etc/passwd", typ: tar.TypeReg, mode: 0o644, data: "root:x:0:0:root:/root:/bin/sh\n" +
			"user:x:1000:1000::/home/user:/bin/bash\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
		{name: "etc/resolv.conf", typ: tar.TypeReg, mode: 0o644},
		{name: "etc/shells", typ: tar.TypeReg, mode: 0o644, data: "/bin/sh\n/usr/bin/sh\n/bin/bash\n/usr/bin/bash\n"},
		{name: "home/", typ: tar.TypeDir, mode: 0o755},
		// E2B's convention (the E2B door runs its sandboxes' commands as
		// this user): an unprivileged "user", uid 1000, at /home/user.
		{name: "home/user/", typ: tar.TypeDir, mode: 0o755, uid: 1000},
		{name: "lib", typ: tar.TypeSymlink, link: "usr/lib"},
		{name: "lib64", typ: tar.TypeSymlink, link: "usr/lib64"},
		{name: "proc/", typ: tar.TypeDir, mode: 0o555},
		{name: "root/", typ: tar.TypeDir, mode: 0o700},
		{name: "run/", typ: tar.TypeDir, mode: 0o755},
		{name: "sbin", typ: tar.TypeSymlink, link: "usr/sbin"},
		{name: "sys/", typ: tar.TypeDir, mode: 0o555},
		{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		{name: "var/", typ: tar.TypeDir, mode: 0o755},
		{name: "var/tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "workspace/", typ: tar.TypeDir, mode: 0o755},
	}
	if osRelease != nil {
		ents = append(ents, ent{name: "etc/os-release", typ: tar.TypeReg, mode: 0o644, data: string(osRelease)})
	}
	if len(alts) > 0 {
		ents = append(ents, ent{name: "etc/alternatives/", typ: tar.TypeDir, mode: 0o755})
		for _, a := range alts {
			ents = append(ents, ent{name: a.Name, typ: tar.TypeSymlink, link: a.Target})
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link,
			Size: int64(len(e.data)), ModTime: epoch, Format: tar.FormatPAX, Uid: e.uid, Gid: e.uid}
		if e.typ == tar.TypeSymlink {
			hdr.Mode = 0o777
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// TarLayer stores tarball, a layer of berth's own (not input), and
// returns its id; the id depends only on the content, so repeated calls
// reuse the layer.
func (s *Store) TarLayer(ctx context.Context, tarball []byte) (string, error) {
	sum := sha256.Sum256(tarball)
	id := "sha256:" + hex.EncodeToString(sum[:])
	if err := s.ensureLayer(ctx, layerSource{
		diffID: id,
		open:   func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarball)), nil },
	}); err != nil {
		return "", err
	}
	return id, nil
}
