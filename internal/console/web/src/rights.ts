// What the signed-in caller may do, from GET /v1/whoami, and which
// lifecycle actions a sandbox's state allows. The console shows an action
// only where both allow it; the daemon still decides (a refusal is shown
// in words).
import type { Sandbox, WhoAmI } from "./types";

export type Scope =
  | "sandboxes:read"
  | "sandboxes:write"
  | "exec"
  | "files"
  | "ports"
  | "network"
  | "templates"
  | "secrets"
  | "keys"
  | "audit"
  | "admin";

export class Rights {
  constructor(readonly who: WhoAmI) {}
  can(s: Scope): boolean {
    return this.who.scopes.includes("admin") || this.who.scopes.includes(s);
  }
  /** The host's administrator: tenants, quotas of others, metrics, pools of the host. */
  get host(): boolean {
    return this.who.host;
  }
  get role(): string {
    return this.who.role;
  }
  /** Why an action is missing, in words, for scope s. */
  lacks(s: Scope, what: string): string {
    return `Your key (${this.role}${this.who.tenant ? ", tenant " + this.who.tenant : ""}) may not ${what}: that needs the “${s}” right. Ask an admin for a key that holds it.`;
  }
}

export type Op = "pause" | "resume" | "stop" | "start" | "hibernate" | "delete";

/** The lifecycle actions sb's state allows (internal/sandbox transitions). */
export function opsFor(sb: Sandbox, checkpoint: boolean): Op[] {
  switch (sb.state) {
    case "running":
      return checkpoint ? ["pause", "stop", "hibernate", "delete"] : ["pause", "stop", "delete"];
    case "paused":
      return checkpoint ? ["resume", "stop", "hibernate", "delete"] : ["resume", "stop", "delete"];
    case "stopped":
      return ["start", "delete"];
    case "quarantined":
    case "failed":
    case "creating":
    case "starting":
    case "stopping":
      return ["delete"];
  }
  return [];
}

export const opWords: Record<Op, string> = {
  pause: "Pause",
  resume: "Resume",
  stop: "Stop",
  start: "Start",
  hibernate: "Hibernate",
  delete: "Delete",
};
