// Package templates is the template feature over the engine's core:
// imports (an OCI layout or docker-save archive, a registry pull), builds
// (a list of steps, a template file applied with berth apply, a
// Dockerfile), the builtin templates (EnsureBuiltin), and removal. Each
// build step runs in a build sandbox of the caller's tenant and its result
// is committed as a layer; steps are cached per tenant.
//
// Image config. An imported image's config is kept in the template
// (store.TemplateConfig): Env, WorkingDir, User, Entrypoint and Cmd apart
// (older records hold the whole command in Cmd, which reads the same),
// ExposedPorts (shown by berth template inspect, never published: only
// --public-port publishes) and StopSignal (sent at stop, engine/stop.go).
// A create records the default user in the sandbox's spec (Spec.User: the
// create's user, else the template's); an exec that names no user, workdir
// or env takes the sandbox's. The agent resolves users against the
// sandbox's own /etc/passwd and /etc/group. A warm-pool member is handed
// only to a create whose user is the template's. When the default user is
// not root, every provision asks the agent to make /workspace and give it
// to that user (the core's ownWorkspace); a user that does not resolve
// fails the create. A template file's user step ({name, uid, gid, home,
// shell, default}; uid and gid 1–65533) writes a passwd line, a group line
// unless the gid has one, and a home, through the agent of the build
// sandbox (users.go: its passwd and group read bounded to 4 MiB; a name or
// uid already there is refused); build steps themselves run as root.
// Imports report progress (image.WithProgress through
// templates.WithImportProgress), streamed as api.ImportEvent NDJSON lines by
// the import and archive routes when the request accepts it.
//
// Build network (buildnet.go). A build sandbox has no network unless a
// step names one (berth template build --network egress --allow RULE, a
// template file's run step with network and allow, a Dockerfile build's
// --network/--allow): mode egress gives it the sandbox egress policy, rules
// checked (egressrule.Check) before any step runs. Builder.ObserveFlow,
// chained after the flow log on the backend's flow hook, collects the
// build sandboxes' flows: a failed step's error names the flows the policy
// denied (a connection's log record may trail the step's exit, so a failed
// egress step waits up to 300 ms for a first denial), and each step's first
// 256 flows go into the template's build record (TemplateConfig.Build,
// shown by GET /v1/templates/{name} and berth template inspect). A step's
// network is part of its cache key; an apply that built nothing keeps the
// record of the build that made its layers.
//
// Dockerfile builds (dockerfile.go, buildcontext.go: berth template build
// NAME -f Dockerfile [CONTEXT], POST /v1/templates/{name}/dockerfile with
// the context as a tar body). internal/image/dockerfile turns the file
// into a plan; BuildDockerfile builds only the
// stages the target needs. Config instructions set the template's defaults
// (an ENTRYPOINT drops a CMD the stage did not set); RUN, COPY and ADD are
// each a layer, cached per tenant by the hash of the base's layers, every
// instruction before it, its own JSON and, for RUN, the env, workdir, user
// and network, for COPY the names, modes, link targets and content hashes
// of what it copies, for COPY --from the source stage's layers. The context
// is spooled once into the upload dir and indexed: absolute names, ".."
// components, hard links and special files are refused, .dockerignore
// (moby/patternmatcher) applies, and a COPY source is a name in that index,
// never a host path, written by the build sandbox's agent beneath its root
// (--chown/--chmod applied inside the sandbox). COPY --from reads the stage
// through a sandbox of its layers, never the host's view of them. ADD of an
// archive is refused (berth does not unpack).
//
// Tenancy: builds and applies run as the caller's tenant (counted by its
// quota), and the build cache is per tenant, so one tenant's build never
// hits another's (a hit would hand over a layer made from the other's
// files). Who may import, pull or remove which template is in docs/api.md,
// "Tenants, keys and leases".
package templates
