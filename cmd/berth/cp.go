package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
	"github.com/berth-sh/berth/client"
)

// cpEndpoint is one side of `berth cp`: a sandbox path (ID:/path) or a local
// path ("-" for a tar stream on stdin or stdout).
type cpEndpoint struct {
	sandbox string // empty for a local path
	path    string
}

func (e cpEndpoint) remote() bool { return e.sandbox != "" }

// parseCpArg splits ID:/path as docker cp does: a colon before any slash
// marks a sandbox. A local path with a colon in it needs a ./ prefix.
func parseCpArg(s string) (cpEndpoint, error) {
	if s == "" {
		return cpEndpoint{}, errors.New("empty path")
	}
	i := strings.IndexByte(s, ':')
	if i < 0 || strings.ContainsRune(s[:i], '/') {
		return cpEndpoint{path: s}, nil
	}
	if i == 0 {
		return cpEndpoint{}, fmt.Errorf("invalid %q: want ID:/path", s)
	}
	p := s[i+1:]
	if p == "" {
		return cpEndpoint{}, fmt.Errorf("invalid %q: missing the path after %q", s, s[:i+1])
	}
	return cpEndpoint{sandbox: s[:i], path: p}, nil
}

// parseCpArgs checks that at least one side is in a sandbox; when both are,
// the copy goes from sandbox to sandbox, and "-" cannot be used.
func parseCpArgs(src, dst string) (cpEndpoint, cpEndpoint, error) {
	s, err := parseCpArg(src)
	if err != nil {
		return s, cpEndpoint{}, err
	}
	d, err := parseCpArg(dst)
	if err != nil {
		return s, d, err
	}
	switch {
	case !s.remote() && !d.remote():
		return s, d, errors.New("one of SRC and DST must be in a sandbox, as ID:/path")
	}
	return s, d, nil
}

func newCpCmd(g *globals) *cobra.Command {
	var (
		preserve bool
		user     string
	)
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files between the local machine and a sandbox, or between sandboxes",
		Long: `Copy files or directories between the local machine and a sandbox, as docker cp
does, or directly from one sandbox to another. A sandbox side is ID:/path (the
id or name of a sandbox).

  A file is copied to DST (replacing a file there), or into DST when DST is
  an existing directory; a missing DST ending in / is an error.
  A directory SRC becomes DST when DST does not exist, or DST/<name of SRC>
  when it does; SRC ending in /. copies only its contents. A directory onto
  a file is an error.
  "-" as the local side is a tar stream: read from stdin into the sandbox
  directory DST, or written to stdout from the sandbox path SRC.

When both sides are sandboxes (berth cp CHILD:/path PARENT:/dir, or the same
sandbox twice), the daemon copies by the same rules; nothing passes through
this machine.

Archives from a sandbox are extracted safely: absolute paths, ".." and links
that lead outside the destination are refused.

What a copy creates in a sandbox belongs to that sandbox's user (berth create
--user; root if it has none), so its own processes can change it; --user gives
it to another user of the sandbox. --preserve-owner (-a, docker cp's archive
mode) keeps the source's uids and gids instead: the local files' on a copy in,
the source sandbox's on a copy between sandboxes.`,
		Example: `  berth cp ./src $id:/work
  berth cp $id:/work/out.json .
  berth cp $id:/work - | tar t
  berth cp $child:/workspace/result $parent:/workspace/incoming
  berth cp --preserve-owner ./tree $id:/srv`,
		Args: exactArgs(2, "SRC and DST"),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dst, err := parseCpArgs(args[0], args[1])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			defer c.Close()
			if preserve && user != "" {
				return errors.New("--preserve-owner and --user do not go together")
			}
			o := client.WriteOptions{User: user, PreserveOwner: preserve}
			switch {
			case src.remote() && dst.remote():
				if user != "" {
					return errors.New("--user applies to a copy from this machine; between sandboxes the copy belongs to the destination's user")
				}
				return c.Copy(cmd.Context(), api.CopyRequest{From: src.sandbox, FromPath: src.path, To: dst.sandbox, ToPath: dst.path,
					PreserveOwner: preserve})
			case src.remote() && (preserve || user != ""):
				return errors.New("--preserve-owner and --user apply to copies into a sandbox")
			case src.remote() && dst.path == "-":
				return c.ReadTar(cmd.Context(), src.sandbox, src.path, cmd.OutOrStdout())
			case src.remote():
				return c.CopyFromSandbox(cmd.Context(), src.sandbox, src.path, dst.path)
			case src.path == "-":
				return c.WriteTarWith(cmd.Context(), dst.sandbox, dst.path, cmd.InOrStdin(), o)
			}
			return c.CopyToSandboxWith(cmd.Context(), src.path, dst.sandbox, dst.path, o)
		},
	}
	cmd.Flags().BoolVarP(&preserve, "preserve-owner", "a", false, "keep the source's uids and gids (archive mode) instead of giving the copy to the sandbox's user")
	cmd.Flags().StringVarP(&user, "user", "u", "", "give what a copy into a sandbox creates to this user of it (uid[:gid] or a name)")
	return cmd
}

// unwrapPathError drops the operation and path a *PathError repeats.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
