package testenv

import (
	"bytes"
	"os"
	"regexp"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/berth-sh/berth/internal/network"
)

// regtest's names (internal/testenv/regtest): its namespace brg-<6 hex>
// and the host end of its veth pair brh<6 hex>.
var (
	regtestNetns = regexp.MustCompile(`^brg-[0-9a-f]{6}$`)
	regtestLink  = regexp.MustCompile(`^brh[0-9a-f]{6}$`)
)

// sweepRegtest adds what a test registry (internal/testenv/regtest) can
// leave: a registry process of the cached binary (scripts/install-registry.sh),
// its namespace and its veth. They are the host's, not a harness dir's, so
// Sweep counts them only in its host-wide check (no TempRoot given): a
// test of another package may be running one meanwhile.
func sweepRegtest(add func(kind, format string, args ...any)) {
	cache := os.Getenv("BERTH_REGISTRY_CACHE")
	if cache == "" {
		cache = "/var/cache/berth/registry"
	}
	for _, p := range processes() {
		argv := bytes.Split(p.cmdline, []byte{0})
		if len(argv) > 1 && strings.HasPrefix(string(argv[0]), cache+"/") && string(argv[1]) == "serve" {
			add("process", "%d %s", p.pid, strings.ReplaceAll(string(p.cmdline), "\x00", " "))
		}
	}
	ents, _ := os.ReadDir("/var/run/netns")
	for _, e := range ents {
		if regtestNetns.MatchString(e.Name()) {
			add("netns", "%s", e.Name())
		}
	}
	if links, err := network.Dump(netlink.LinkList); err == nil {
		for _, l := range links {
			if regtestLink.MatchString(l.Attrs().Name) {
				add("network", "link %s", l.Attrs().Name)
			}
		}
	}
}
