package runtime

import (
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SecretsDir is where a sandbox with file secrets gets its secrets tmpfs.
const SecretsDir = "/run/secrets"

// Caps of the secrets tmpfs: it holds a sandbox's secret files only (at
// most 64 of at most 64 KiB, 512 KiB in all, agent/wire/secretfiles.go)
// and the egress CA bundle.
const (
	SecretsTmpfsBytes  = 2 << 20 // secret files (512 KiB) and the egress CA bundle (656 KiB)
	SecretsTmpfsInodes = 256
)

// secretsMount is the OCI mount of the secrets tmpfs: root's, 0755, no
// setuid, devices or executables. An OCI tmpfs is mounted by runc and by
// runsc alike, so the agent needs no privilege to mount it; its contents
// are in memory (in a runsc checkpoint's memory image too), never in the
// sandbox's writable layer.
func secretsMount() specs.Mount {
	return specs.Mount{
		Destination: SecretsDir, Type: "tmpfs", Source: "tmpfs",
		Options: []string{"nosuid", "nodev", "noexec", "mode=755",
			"size=" + strconv.Itoa(SecretsTmpfsBytes), "nr_inodes=" + strconv.Itoa(SecretsTmpfsInodes)},
	}
}
