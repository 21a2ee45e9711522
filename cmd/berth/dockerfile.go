package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// dockerfileInContext is the name a Dockerfile kept outside its context
// is sent under (the daemon's templates.DockerfileInContext: never copied).
const dockerfileInContext = ".berth-dockerfile"

// packContext writes the build context dir as a tar archive to w, leaving
// out what its .dockerignore excludes (the daemon applies it again), and
// returns the Dockerfile's name in the archive: its path in the context,
// or dockerfileInContext for one outside it (appended). Symlinks are
// archived as symlinks, never followed; special files are left out.
func packContext(w io.Writer, dir, dockerfile string) (string, error) {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(absDir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("build context %s: not a directory", dir)
	}
	absDF, err := filepath.Abs(dockerfile)
	if err != nil {
		return "", err
	}
	dfData, err := os.ReadFile(absDF)
	if err != nil {
		return "", fmt.Errorf("cannot read %s: %w", dockerfile, unwrapPathError(err))
	}
	var pm *patternmatcher.PatternMatcher
	if data, err := os.ReadFile(filepath.Join(absDir, ".dockerignore")); err == nil {
		patterns, err := ignorefile.ReadAll(bytes.NewReader(data))
		if err != nil {
			return "", fmt.Errorf(".dockerignore: %w", err)
		}
		if pm, err = patternmatcher.New(patterns); err != nil {
			return "", fmt.Errorf(".dockerignore: %w", err)
		}
	}
	dfName, err := contextDockerfileName(dir, dockerfile)
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(absDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(absDir, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		keep := name == ".dockerignore" || name == dfName
		if pm != nil && !keep {
			if m, err := pm.MatchesOrParentMatches(name); err != nil {
				return err
			} else if m {
				if d.IsDir() && !pm.Exclusions() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.IsDir(), info.Mode().IsRegular():
		default:
			return nil // sockets, FIFOs, devices
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, info.Size())
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("packing the build context: %w", err)
	}
	if dfName == dockerfileInContext {
		if err := tw.WriteHeader(&tar.Header{Name: dfName, Mode: 0o644, Size: int64(len(dfData)), Typeflag: tar.TypeReg}); err != nil {
			return "", err
		}
		if _, err := tw.Write(dfData); err != nil {
			return "", err
		}
	}
	return dfName, tw.Close()
}

// contextDockerfileName is the Dockerfile's name in the context archive:
// its path in the context, or dockerfileInContext for one outside it.
func contextDockerfileName(dir, dockerfile string) (string, error) {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	absDF, err := filepath.Abs(dockerfile)
	if err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(absDir, absDF); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return filepath.ToSlash(rel), nil
	}
	return dockerfileInContext, nil
}
