package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/api"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// commit is the VCS revision the binary was built from, when known.
func commit() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

// versionReport is what `berth version -o json` prints.
type versionReport struct {
	Client      api.Version  `json:"client"`
	Server      *api.Version `json:"server,omitempty"`
	ServerError string       `json:"server_error,omitempty"`
}

func newVersionCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show the client's and the daemon's versions",
		Args:  cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		rep := versionReport{Client: api.Version{Version: version, Commit: commit(), Go: runtime.Version()}}
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		sv, serr := c.Version(cmd.Context())
		if serr != nil {
			rep.ServerError = serr.Error()
		} else {
			rep.Server = sv
		}
		w := cmd.OutOrStdout()
		if out.json() {
			if err := printJSON(w, rep); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(w, "Client: %s (%s)\n", rep.Client.Version, rep.Client.Go)
			if sv != nil {
				fmt.Fprintf(w, "Server: %s (%s, runtime %s)\n", sv.Version, sv.Go, orDash(sv.Runtime))
				if sv.TLSFingerprint != "" {
					fmt.Fprintf(w, "TLS fingerprint: %s\n", sv.TLSFingerprint)
				}
				for _, c := range sv.Classes {
					fmt.Fprintf(termSafe{w}, "Class %s: %s\n", c.Name, capsLine(c.Capabilities))
				}
			}
		}
		// The client half is still useful when the daemon is down, but the
		// exit status must say it was not reached.
		return serr
	}
	return cmd
}

// capsLine says what a runtime class can do and what it cannot.
func capsLine(c api.RuntimeCaps) string {
	var can, cannot []string
	for _, f := range []struct {
		name string
		ok   bool
	}{{"freeze", c.Freeze}, {"checkpoint", c.Checkpoint}, {"capture", c.Capture}, {"root_layer", c.RootLayer},
		{"egress", c.Egress}, {"pool", c.Pool}, {"rename", c.Rename}} {
		if f.ok {
			can = append(can, f.name)
		} else {
			cannot = append(cannot, f.name)
		}
	}
	line := "can " + orDash(strings.Join(can, ", "))
	if len(cannot) > 0 {
		line += "; cannot " + strings.Join(cannot, ", ")
	}
	return line
}
