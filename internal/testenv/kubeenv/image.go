package kubeenv

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/berth-sh/berth/internal/testenv"
)

// ImageConfig is the part of an image's config the tests set.
type ImageConfig struct {
	Entrypoint, Cmd, Env []string
	WorkingDir           string
}

// BuildImage packs dir (one layer; modes, symlinks and directories kept,
// owners root) as image ref and writes it as a `docker save` tarball under
// t.TempDir(), which `ctr images import` (ImportImage) takes. It returns
// the tarball's path.
func BuildImage(t testing.TB, dir, ref string, cfg ImageConfig) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	must(t, err)
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	must(t, err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	must(t, err)
	cf, err := img.ConfigFile()
	must(t, err)
	cf = cf.DeepCopy()
	// containerd unpacks only an image for its own platform.
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, Env: cfg.Env, WorkingDir: cfg.WorkingDir}
	img, err = mutate.ConfigFile(img, cf)
	must(t, err)
	tag, err := name.NewTag(ref)
	must(t, err)
	out := filepath.Join(t.TempDir(), strings.NewReplacer("/", "_", ":", "_").Replace(ref)+".tar")
	must(t, tarball.WriteToFile(out, tag, img))
	return out
}

// BusyboxImage builds image ref from the host's static busybox
// (busybox-static, scripts/install-deps.sh): /bin/sh and the common applets
// as links, PATH=/bin.
func BusyboxImage(t testing.TB, ref string) string {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("kubeenv: the busybox image needs busybox-static (/bin/busybox: %v): run scripts/install-deps.sh", err)
	}
	root := t.TempDir()
	for _, d := range []string{"bin", "etc", "tmp", "root"} {
		must(t, os.Mkdir(filepath.Join(root, d), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(root, "bin", "busybox"), bb, 0o755))
	// Every applet, as `busybox --install -s` would link them (the
	// conformance suite's scripts use mkdir, head, mv, kill...).
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		t.Fatalf("kubeenv: busybox --list: %v", err)
	}
	for _, l := range strings.Fields(string(list)) {
		if l != "busybox" && !strings.Contains(l, "/") {
			must(t, os.Symlink("busybox", filepath.Join(root, "bin", l)))
		}
	}
	must(t, os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644))
	return BuildImage(t, root, ref, ImageConfig{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}})
}

// pauseImage builds the sandbox image: this package's pause command,
// static, as PauseImage.
func pauseImage(t testing.TB) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	must(t, err)
	dir := t.TempDir()
	must(t, os.Mkdir(filepath.Join(dir, "bin"), 0o755))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(dir, "bin", "pause"), "./internal/testenv/kubeenv/pause")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubeenv: build the pause image's binary: %v\n%s", err, out)
	}
	return BuildImage(t, dir, PauseImage, ImageConfig{Entrypoint: []string{"/bin/pause"}})
}

// PauseImage is the node's sandbox image, built locally.
const PauseImage = "berth.local/pause:test"

// ImportImage imports the `docker save` or OCI-layout tarball into the
// node's containerd (namespace k8s.io, where CRI looks), unpacked for its
// snapshotter, and checks that ref is then known; pods use it with
// imagePullPolicy: Never.
func (c *Cluster) ImportImage(t testing.TB, ref, tarball string) {
	t.Helper()
	if c.node == nil {
		t.Fatal("kubeenv: ImportImage needs a node (Options.Node)")
	}
	if err := c.node.importImage(ref, tarball); err != nil {
		t.Fatal(err)
	}
}

func (n *node) ctr(args ...string) ([]byte, error) {
	cmd := exec.Command("ctr", append([]string{"--address", n.sock, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

func (n *node) importImage(ref, tarball string) error {
	if _, err := n.ctr("images", "import", "--snapshotter", "overlayfs", tarball); err != nil {
		return fmt.Errorf("kubeenv: import %s: %w", tarball, err)
	}
	want := normalize(ref)
	out, err := n.ctr("images", "ls", "-q")
	if err != nil {
		return err
	}
	for l := range strings.Lines(string(out)) {
		if strings.TrimSpace(l) == want {
			return nil
		}
	}
	return fmt.Errorf("kubeenv: after importing %s, containerd has no image %s; it has:\n%s", tarball, want, out)
}

// normalize is a reference as containerd names it (docker.io/library/
// for a bare name, :latest when untagged).
func normalize(ref string) string {
	r := ref
	first, _, found := strings.Cut(r, "/")
	if !found {
		r = "docker.io/library/" + r
	} else if !strings.ContainsAny(first, ".:") && first != "localhost" {
		r = "docker.io/" + r
	}
	if i := strings.LastIndex(r, "/"); !strings.Contains(r[i:], ":") && !strings.Contains(r, "@") {
		r += ":latest"
	}
	return r
}
