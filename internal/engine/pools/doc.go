// Package pools is the warm-pool feature over the engine's core: per
// (tenant, template), sandboxes made ahead and kept frozen, so a create
// that fits the template's defaults thaws one (Warm.Claim, the core's
// Hooks.Claim hook) and gives it the caller's identity — hostname
// (runc: through nsenter; runsc: the agent's helper through runsc exec),
// env, labels, policies. Members are never reused.
//
// On a class that cannot freeze (node.Caps.Freeze false: a Kubernetes pod)
// members wait running, with no idle policy; a claim takes one as it is
// (Op.Handover). On a class that cannot rename a running sandbox
// (Caps.Rename false) only creates without a name claim members; named
// creates are made cold.
//
// Refill (Warm.Refill, one member at a time, from the reconciler) keeps
// each pool at its size: members of an older template version are
// replaced, and a smaller pool sheds its newest ready members. It counts
// each member once, by id, from the members in flight (taken first) and a
// fresh read of the records (taken after), so a member recorded between
// the reconciler's read and the count is never made twice. A member a kill
// or an error left unfinished is finished into the pool by the next refill
// or removed when the pool no longer wants it; doctor reports one still
// unfinished after a minute as a pool finding. A pool below its size says
// why (Pool.Reason): tenant quota, host capacity, or the last error's
// user-safe message.
//
// Tenancy: the host's pools are of shared templates and their members
// belong to no tenant until a claim admits them against the claimant's
// quota; a tenant's pool is of its own template, its members are that
// tenant's sandboxes from the start (counted by its quota, hidden from its
// reads until claimed), and only a create that resolves to that template
// claims them.
package pools
