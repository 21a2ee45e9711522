package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestDocumentedCommandsExist parses every `berth ...` command line of
// README.md (its code blocks and inline code) and of every command's help
// examples against the real cobra tree: an unknown verb or flag fails.
func TestDocumentedCommandsExist(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCmd()
	n := 0
	for _, line := range readmeLines(string(readme)) {
		for _, c := range berthCommands(line) {
			n++
			if err := checkCommand(root, c); err != nil {
				t.Errorf("README.md: %q: %v", line, err)
			}
		}
	}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, line := range strings.Split(c.Example, "\n") {
			for _, bc := range berthCommands(line) {
				n++
				if err := checkCommand(root, bc); err != nil {
					t.Errorf("help example of %q: %q: %v", c.CommandPath(), strings.TrimSpace(line), err)
				}
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if n < 40 {
		t.Errorf("found only %d berth command lines in README.md and the help examples; the parser lost them", n)
	}
	// The checker itself refuses what it must.
	for _, bad := range []string{"berth create --no-such-flag", "berth nosuchverb", "berth template nosuch x", "berth exec -Z id -- true"} {
		cs := berthCommands(bad)
		if len(cs) != 1 || checkCommand(root, cs[0]) == nil {
			t.Errorf("%q passed the check", bad)
		}
	}
	for _, good := range []string{"berth create --allow x --public-port 8080 --user 1000 --network egress", "berth run -u dev -- id -u"} {
		cs := berthCommands(good)
		if len(cs) != 1 || checkCommand(root, cs[0]) != nil {
			t.Errorf("%q failed the check: %v", good, checkCommand(root, cs[0]))
		}
	}
}

var inlineCode = regexp.MustCompile("`(berth [^`]+)`")

// readmeLines returns the lines of the fenced code blocks (continuations
// joined) and the inline code spans that start with "berth ".
func readmeLines(s string) []string {
	var out []string
	in := false
	cont := ""
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			continue
		}
		if !in {
			continue
		}
		l = cont + l
		if strings.HasSuffix(l, "\\") {
			cont = strings.TrimSuffix(l, "\\") + " "
			continue
		}
		cont = ""
		out = append(out, l)
	}
	flat := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(s, "")
	for _, m := range inlineCode.FindAllStringSubmatch(flat, -1) {
		out = append(out, strings.Join(strings.Fields(m[1]), " "))
	}
	return out
}

// berthCommands splits a shell line into the berth invocations in it:
// words after each "berth", up to a comment, ;, a pipe, ) or a redirect.
func berthCommands(line string) [][]string {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	words := shellWords(line)
	var out [][]string
	for i := 0; i < len(words); i++ {
		w := strings.TrimPrefix(words[i], "$(")
		if w != "berth" {
			continue
		}
		var c []string
		for i++; i < len(words); i++ {
			w := words[i]
			if w == "|" || w == ";" || w == "&&" || w == ">" || w == "<" || strings.HasPrefix(w, ">") {
				break
			}
			if end := strings.TrimRight(w, ");"); end != w {
				if end != "" {
					c = append(c, end)
				}
				break
			}
			c = append(c, w)
		}
		i--
		out = append(out, c)
	}
	return out
}

// shellWords splits on blanks, keeping quoted text (quotes removed) in one
// word.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	have := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, have = r, true
		case r == ' ' || r == '\t':
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		case r == ';':
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
			out = append(out, ";")
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// checkCommand resolves the verbs of args in root ("a|b" alternatives each)
// and checks every flag exists on the command reached.
func checkCommand(root *cobra.Command, args []string) error {
	cmds := []*cobra.Command{root}
	i := 0
	for ; i < len(args); i++ {
		w := strings.Trim(args[i], "[]")
		if strings.HasPrefix(w, "-") || !hasSubcommands(cmds[0]) {
			break
		}
		var next []*cobra.Command
		for _, alt := range strings.Split(w, "|") {
			found := false
			for _, c := range cmds {
				for _, sub := range c.Commands() {
					if sub.Name() == alt || sub.HasAlias(alt) {
						next = append(next, sub)
						found = true
					}
				}
			}
			if !found {
				return fmt.Errorf("unknown verb %q under %q", alt, cmds[0].CommandPath())
			}
		}
		cmds = next
	}
	for _, c := range cmds {
		if err := checkFlags(c, args[i:]); err != nil {
			return err
		}
	}
	return nil
}

func hasSubcommands(c *cobra.Command) bool { return len(c.Commands()) > 0 }

func checkFlags(c *cobra.Command, args []string) error {
	fs := c.Flags()
	fs.AddFlagSet(c.InheritedFlags())
	interspersed := c.Name() != "run"
	for i := 0; i < len(args); i++ {
		a := strings.Trim(args[i], "[]")
		if a == "--" {
			return nil
		}
		switch {
		case strings.HasPrefix(a, "--"):
			name, _, hasVal := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			f := fs.Lookup(name)
			if f == nil {
				return fmt.Errorf("%s has no flag --%s", c.CommandPath(), name)
			}
			if !hasVal && takesValue(f) {
				i++
			}
		case strings.HasPrefix(a, "-") && len(a) > 1 && !strings.HasPrefix(a, "-$"):
			for j, r := range a[1:] {
				f := fs.ShorthandLookup(string(r))
				if f == nil {
					return fmt.Errorf("%s has no flag -%c", c.CommandPath(), r)
				}
				if takesValue(f) {
					if j == len(a)-2 {
						i++
					}
					break
				}
			}
		default:
			if !interspersed {
				return nil // `berth run` flags stop at the command
			}
		}
	}
	return nil
}

func takesValue(f *pflag.Flag) bool { return f.NoOptDefVal == "" }
