// The API's types, generated from api/openapi.json into the TypeScript
// SDK (sdk/typescript/src/models.d.ts). Type-only: nothing of the SDK's
// code (which is Node's: http, ws) is bundled.
export type {
  APIKey, AuditEntry, BuildEvent, ImportProgress, SandboxUsage, Webhook, CreateAPIKeyRequest, CreateSandboxRequest, CreatedAPIKey, Event, FileInfo, Flow, NetworkRules,
  Pool, Process, ProcessList, Quota, Sandbox, Secret, Snapshot, Template, Tenant, Version, Volume, WhoAmI,
} from "../../../../sdk/typescript/src/models";

import type { Error as ErrorBody, ImportProgress, Template } from "../../../../sdk/typescript/src/models";
/** A line of an import's NDJSON stream (api.ImportEvent: the spec declares the import routes' template answer only). */
export type ImportEvent = { progress?: ImportProgress; template?: Template; error?: ErrorBody };
