// The API's types, generated from api/openapi.json into the TypeScript
// SDK (sdk/typescript/src/models.d.ts). Type-only: nothing of the SDK's
// code (which is Node's: http, ws) is bundled.
export type {
  APIKey, AuditEntry, CreateAPIKeyRequest, CreateSandboxRequest, CreatedAPIKey, Event, FileInfo, Flow, NetworkRules,
  Pool, Process, ProcessList, Quota, Sandbox, Secret, Snapshot, Template, Tenant, Version, Volume, WhoAmI,
} from "../../../../sdk/typescript/src/models";
