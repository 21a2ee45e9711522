package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/internal/console"
)

func newConsoleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Print a one-time sign-in link to the web console",
		Long: `Asks the daemon, over its root-only unix socket, for a one-time sign-in code
for the web console and prints the console's URL with the code in its
fragment (#code=...), which the browser never sends to a server. Opening it
within two minutes signs that browser tab in with a key of the host's scope
that lives 8 hours; the code works once. --url names the console's base URL
when the daemon's own listener address is not the one the browser reaches.`,
		Args: cobra.NoArgs,
	}
	base := cmd.Flags().String("url", "", "the console's base `URL` as the browser reaches the daemon (default: the daemon's TCP listeners)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		defer c.Close()
		code, err := c.ConsoleCode(cmd.Context())
		if err != nil {
			return err
		}
		urls := code.URLs
		if *base != "" {
			u, err := url.Parse(*base)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("--url %q: want http(s)://host[:port]", *base)
			}
			urls = []string{strings.TrimSuffix(u.Scheme+"://"+u.Host+u.Path, "/") + console.Prefix + "#code=" + url.QueryEscape(code.Code)}
		}
		if len(urls) == 0 {
			return errors.New("the daemon has no TCP listener for a browser: start it with --listen or --insecure-listen, or pass --url")
		}
		w := cmd.OutOrStdout()
		fmt.Fprintf(w, "Open within 2 minutes (the link works once):\n")
		for _, u := range urls {
			fmt.Fprintln(w, u)
		}
		return nil
	}
	return cmd
}
