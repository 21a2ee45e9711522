package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/berth-sh/berth/client"
)

// contextEnv names the context to use when --context does not.
const contextEnv = "BERTH_CONTEXT"

// connSettings is where and how the CLI reaches the daemon, with where
// each setting came from (for berth context show).
type connSettings struct {
	host           string
	apiKey         string
	tlsFingerprint string
	tlsCA          string

	context                    string // the saved context in use; "" for none
	hostFrom, keyFrom, tlsFrom string
}

// resolve decides host, API key and TLS settings, each by the first that
// gives it of: flags, BERTH_* environment variables, the context named by
// --context or BERTH_CONTEXT, the config file's current context, the
// defaults (the local socket, no key).
//
// A context applies only when it also gives the host: its key and TLS
// settings belong to its daemon, so a --host or BERTH_HOST elsewhere never
// receives them. TLS settings go as a unit for the same reason.
func (g *globals) resolve() (connSettings, error) {
	var s connSettings
	switch {
	case g.host != "":
		s.host, s.hostFrom = g.host, "flag --host"
	case os.Getenv("BERTH_HOST") != "":
		s.host, s.hostFrom = os.Getenv("BERTH_HOST"), "env BERTH_HOST"
	}
	if g.host != "" && g.context != "" {
		return s, errors.New("--host and --context both name a daemon: give one")
	}
	var def *contextDef
	if s.host == "" {
		name, from := g.context, "flag --context"
		if name == "" {
			name, from = os.Getenv(contextEnv), "env "+contextEnv
		}
		path, err := configPath()
		if err != nil {
			if name != "" && name != defaultContextName {
				return s, err
			}
		} else {
			cfg, err := loadConfig(path)
			if err != nil {
				return s, err
			}
			if name == "" {
				name, from = cfg.Current, "current context"
			}
			if name != "" && name != defaultContextName {
				def = cfg.Contexts[name]
				if def == nil {
					return s, fmt.Errorf("context %q (%s) is not in %s; see berth context ls", name, from, path)
				}
				s.context = name
				s.host, s.hostFrom = def.Host, "context "+name
			}
		}
	}
	if s.host == "" {
		s.host, s.hostFrom = client.DefaultHost, "default"
	}

	switch {
	case g.apiKey != "":
		s.apiKey, s.keyFrom = g.apiKey, "flag --api-key"
	case os.Getenv("BERTH_API_KEY") != "":
		s.apiKey, s.keyFrom = os.Getenv("BERTH_API_KEY"), "env BERTH_API_KEY"
	case def != nil && def.APIKey != "":
		s.apiKey, s.keyFrom = def.APIKey, "context "+s.context+", stored in the config file"
	case def != nil && def.APIKeyFile != "":
		s.keyFrom = "context " + s.context + ", file " + def.APIKeyFile
		key, err := readKeyFile(def.APIKeyFile)
		if err != nil {
			return s, fmt.Errorf("context %q: %w", s.context, err)
		}
		s.apiKey = key
	}

	fpEnv := os.Getenv(client.TLSFingerprintEnv)
	switch {
	case g.tlsFingerprint != "" || g.tlsCA != "":
		s.tlsFingerprint, s.tlsCA, s.tlsFrom = g.tlsFingerprint, g.tlsCA, "flags"
		if s.tlsFingerprint == "" {
			s.tlsFingerprint = fpEnv
		}
	case fpEnv != "":
		s.tlsFingerprint, s.tlsFrom = fpEnv, "env "+client.TLSFingerprintEnv
	case def != nil && (def.TLSCA != "" || def.TLSFingerprint != ""):
		s.tlsFingerprint, s.tlsCA, s.tlsFrom = def.TLSFingerprint, def.TLSCA, "context "+s.context
	}
	return s, nil
}

// readKeyFile reads an API key file: one line, surrounding white space
// dropped. The key itself never appears in an error.
func readKeyFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("API key file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("API key file %s is empty", path)
	}
	if strings.ContainsAny(key, "\r\n") {
		return "", fmt.Errorf("API key file %s has more than one line", path)
	}
	return key, nil
}

func newContextCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "Save and switch between daemons (add, use, ls, rm, show)",
		Long: `A context is a saved daemon: its address, API key and TLS settings, under a
name. "berth context use NAME" makes it the one every command talks to;
--context NAME or BERTH_CONTEXT picks one for a single command.

Precedence, per setting: flags (--host, --api-key, --tls-*), then BERTH_HOST,
BERTH_API_KEY and BERTH_TLS_FINGERPRINT, then the context named by --context or
BERTH_CONTEXT, then the current context, then the local socket. A context's key
and TLS settings are used only with its own host: --host or BERTH_HOST turns
the context off.

Contexts are kept in $XDG_CONFIG_HOME/berth/config.json (~/.config/berth),
mode 0600. An API key is referenced by the path of its file (--api-key-file),
or stored in the config file when read from stdin (--api-key-stdin); a config
file that holds a key and that others can read is refused. The
context named "default" is the local daemon and the environment.`,
		Example: `  berth context add prod --host https://berth.example:8443 --api-key-file ~/.berth/prod.key --tls-fingerprint sha256:...
  berth context use prod
  berth --context staging ls
  berth context use default`,
	}
	cmd.AddCommand(newContextAddCmd(), newContextUseCmd(), newContextLsCmd(g), newContextRmCmd(), newContextShowCmd(g))
	return cmd
}

func newContextAddCmd() *cobra.Command {
	var (
		def          contextDef
		keyFromStdin bool
		force        bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME --host URL [--api-key-file FILE | --api-key-stdin] [--tls-ca FILE | --tls-fingerprint sha256:...]",
		Short: "Save a daemon's address and credentials under a name",
		Args:  exactArgs(1, "a context name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := validContextName(name); err != nil {
				return err
			}
			if name == defaultContextName {
				return fmt.Errorf("context %q is the local daemon and cannot be added", name)
			}
			if keyFromStdin && def.APIKeyFile != "" {
				return errors.New("--api-key-file and --api-key-stdin: give one")
			}
			for _, p := range []*string{&def.APIKeyFile, &def.TLSCA} {
				if *p == "" {
					continue
				}
				abs, err := filepath.Abs(*p)
				if err != nil {
					return err
				}
				*p = abs
			}
			if def.APIKeyFile != "" {
				if _, err := readKeyFile(def.APIKeyFile); err != nil {
					return err
				}
			}
			if def.TLSCA != "" {
				if _, err := os.Stat(def.TLSCA); err != nil {
					return fmt.Errorf("--tls-ca: %w", err)
				}
			}
			if keyFromStdin {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 64<<10))
				if err != nil {
					return fmt.Errorf("read the API key from stdin: %w", err)
				}
				def.APIKey = strings.TrimSpace(string(b))
				if def.APIKey == "" {
					return errors.New("--api-key-stdin: stdin was empty")
				}
				if strings.ContainsAny(def.APIKey, "\r\n") {
					return errors.New("--api-key-stdin: more than one line on stdin")
				}
			}
			if err := def.validate(); err != nil {
				return errors.New(flagWords(err.Error()))
			}
			return updateConfig(func(cfg *cliConfig, path string) error {
				if _, ok := cfg.Contexts[name]; ok && !force {
					return fmt.Errorf("context %q exists in %s: remove it first, or add --force", name, path)
				}
				if cfg.Contexts == nil {
					cfg.Contexts = map[string]*contextDef{}
				}
				d := def
				cfg.Contexts[name] = &d
				return nil
			})
		},
	}
	f := cmd.Flags()
	// These shadow the global flags of the same names: here they describe
	// the context being saved, not the daemon this command talks to.
	f.StringVar(&def.Host, "host", "", "daemon address: unix:///path.sock or https://host:port")
	f.StringVar(&def.APIKeyFile, "api-key-file", "", "file holding the API key (its path is saved, not the key)")
	f.BoolVar(&keyFromStdin, "api-key-stdin", false, "read the API key from stdin and store it in the config file (mode 0600)")
	f.StringVar(&def.TLSCA, "tls-ca", "", "verify the daemon's certificate against this CA `FILE` (PEM)")
	f.StringVar(&def.TLSFingerprint, "tls-fingerprint", "", "pin the daemon's certificate: sha256:<hex> as `berth serve` prints it")
	f.BoolVar(&force, "force", false, "replace a context of the same name")
	return cmd
}

// flagWords turns validate's config-file field names into the flags of
// context add.
func flagWords(s string) string {
	return strings.NewReplacer(`field "host"`, "--host", `"api_key_file"`, "--api-key-file", `"api_key"`, "--api-key-stdin",
		`field "tls_ca"`, "--tls-ca", `field "tls_fingerprint"`, "--tls-fingerprint",
		`fields "tls_ca" and "tls_fingerprint"`, "--tls-ca and --tls-fingerprint", `fields "tls_ca"/"tls_fingerprint"`, "--tls-ca and --tls-fingerprint").Replace(s)
}

// updateConfig loads the config file, lets fn change it and saves it,
// holding a lock beside it so two commands changing contexts at once do not
// lose one another's change (readers need none: the save is atomic).
func updateConfig(fn func(cfg *cliConfig, path string) error) error {
	path, err := configPath()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("config %s: lock: %w", path, err)
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	if err := fn(cfg, path); err != nil {
		return err
	}
	return saveConfig(path, cfg)
}

func newContextUseCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "use NAME",
		Short:             `Make a context the current one ("default": the local daemon)`,
		Args:              exactArgs(1, "a context name"),
		ValidArgsFunction: completeContexts,
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			err := updateConfig(func(cfg *cliConfig, path string) error {
				if name == defaultContextName {
					cfg.Current = ""
					return nil
				}
				if _, ok := cfg.Contexts[name]; !ok {
					return fmt.Errorf("context %q is not in %s; see berth context ls", name, path)
				}
				cfg.Current = name
				return nil
			})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), name)
			if os.Getenv("BERTH_HOST") != "" || os.Getenv(contextEnv) != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), "berth: note: BERTH_HOST or BERTH_CONTEXT is set and takes precedence over the current context")
			}
			return nil
		},
	}
}

func newContextLsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the saved contexts; * marks the one in use",
		Args:    cobra.NoArgs,
	}
	quiet := cmd.Flags().BoolP("quiet", "q", false, "print only the names")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		path, err := configPath()
		if err != nil {
			return err
		}
		cfg, err := loadConfig(path)
		if err != nil {
			return err
		}
		inUse := defaultContextName
		if s, err := g.resolve(); err == nil && s.context != "" {
			inUse = s.context
		}
		names := []string{defaultContextName}
		for n := range cfg.Contexts {
			names = append(names, n)
		}
		sort.Strings(names[1:])
		if *quiet {
			for _, n := range names {
				fmt.Fprintln(cmd.OutOrStdout(), n)
			}
			return nil
		}
		tw := newTable(cmd.OutOrStdout())
		fmt.Fprintln(tw, "NAME\tHOST\tAPI KEY\tTLS")
		for _, n := range names {
			mark := ""
			if n == inUse {
				mark = " *"
			}
			if n == defaultContextName {
				fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\n", n, mark, client.DefaultHost+" (or BERTH_HOST)", "-", "-")
				continue
			}
			d := cfg.Contexts[n]
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\n", n, mark, d.Host, keyDesc(d), tlsDesc(d.TLSFingerprint, d.TLSCA))
		}
		return tw.Flush()
	}
	return cmd
}

// keyDesc says where a context's key is, never what it is.
func keyDesc(d *contextDef) string {
	switch {
	case d.APIKey != "":
		return "stored"
	case d.APIKeyFile != "":
		return d.APIKeyFile
	}
	return "-"
}

func tlsDesc(fp, ca string) string {
	switch {
	case fp != "":
		if len(fp) > 23 {
			fp = fp[:23] + "…"
		}
		return "pin " + fp
	case ca != "":
		return "CA " + ca
	}
	return "-"
}

func newContextRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "rm NAME...",
		Aliases:           []string{"remove"},
		Short:             "Remove saved contexts",
		Args:              minArgs(1, "a context name"),
		ValidArgsFunction: completeContexts,
		RunE: func(cmd *cobra.Command, args []string) error {
			return updateConfig(func(cfg *cliConfig, path string) error {
				for _, name := range args {
					if name == defaultContextName {
						return fmt.Errorf("context %q is the local daemon and cannot be removed", name)
					}
					if _, ok := cfg.Contexts[name]; !ok {
						return fmt.Errorf("context %q is not in %s", name, path)
					}
				}
				for _, name := range args {
					delete(cfg.Contexts, name)
					if cfg.Current == name {
						cfg.Current = ""
						fmt.Fprintf(cmd.ErrOrStderr(), "berth: %q was the current context; now %q\n", name, defaultContextName)
					}
				}
				return nil
			})
		},
	}
}

func newContextShowCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show the daemon the CLI talks to and where each setting comes from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := g.resolve()
			if err != nil {
				return err
			}
			name := s.context
			if name == "" {
				name = defaultContextName
			}
			tw := newTable(cmd.OutOrStdout())
			fmt.Fprintf(tw, "Context:\t%s\n", name)
			fmt.Fprintf(tw, "Host:\t%s\t(%s)\n", s.host, s.hostFrom)
			if s.keyFrom == "" {
				fmt.Fprintf(tw, "API key:\tnone\n")
			} else {
				fmt.Fprintf(tw, "API key:\tset\t(%s)\n", s.keyFrom)
			}
			if s.tlsFrom == "" {
				fmt.Fprintf(tw, "TLS:\tsystem roots\n")
			} else {
				fmt.Fprintf(tw, "TLS:\t%s\t(%s)\n", tlsDesc(s.tlsFingerprint, s.tlsCA), s.tlsFrom)
			}
			if path, err := configPath(); err == nil {
				fmt.Fprintf(tw, "Config:\t%s\n", path)
			}
			return tw.Flush()
		},
	}
}

// completeContexts completes saved context names from the config file.
func completeContexts(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	path, err := configPath()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, n := range append([]string{defaultContextName}, sortedKeys(cfg.Contexts)...) {
		if strings.HasPrefix(n, prefix) {
			out = append(out, cobra.Completion(n))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
