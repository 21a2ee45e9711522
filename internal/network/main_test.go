package network

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// innerEnv marks the test process that runs inside its own network
// namespace.
const innerEnv = "BERTH_NETWORK_TEST_NETNS"

// TestMain re-executes the test binary in a fresh network namespace (as
// root), so that every test of this package runs in a namespace that has
// nothing but loopback and what the tests build: there is no route to the
// real network, whatever a test does. Without root the kernel tests skip.
func TestMain(m *testing.M) {
	if os.Getenv(innerEnv) == "" && os.Geteuid() == 0 {
		cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
		cmd.Env = append(os.Environ(), innerEnv+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "network tests: re-exec in a new netns:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(innerEnv) != "" {
		// Taken before any test goroutine can move a thread (possibly the
		// main one, which then never returns) into another namespace.
		var err error
		if hostNSHandle, err = netns.Get(); err != nil {
			fmt.Fprintln(os.Stderr, "network tests:", err)
			os.Exit(1)
		}
		if err := checkPristine(); err != nil {
			fmt.Fprintln(os.Stderr, "network tests:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if os.Getenv(innerEnv) != "" && code == 0 {
		if err := checkPristine(); err != nil {
			fmt.Fprintln(os.Stderr, "network tests: leak after the suite:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// hostNSHandle is the fake host: the namespace this process runs in.
var hostNSHandle netns.NsHandle

// checkPristine asserts the test namespace holds only lo and no nft table.
func checkPristine() error {
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		if l.Attrs().Name != "lo" {
			return fmt.Errorf("unexpected interface %s in the test namespace", l.Attrs().Name)
		}
	}
	c, err := nftables.New()
	if err != nil {
		return err
	}
	tables, err := c.ListTables()
	if err != nil {
		return err
	}
	if len(tables) != 0 {
		return fmt.Errorf("unexpected nft tables: %d (first %s)", len(tables), tables[0].Name)
	}
	return nil
}

// requireNetNS skips tests that need the kernel when not running in the
// private namespace (no root).
func requireNetNS(t *testing.T) {
	t.Helper()
	if os.Getenv(innerEnv) == "" {
		t.Skip("needs root (runs in a private network namespace)")
	}
}
