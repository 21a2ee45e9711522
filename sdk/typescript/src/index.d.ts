// Type declarations of @berth-sh/sdk (hand-written beside the plain
// JavaScript of src/; the models are generated: models.d.ts).
//
// Durations are seconds, as in the API. Output and file contents are
// Buffers (a Uint8Array). The models keep the wire's own shape: snake_case
// keys, times as RFC 3339 strings.
import type * as models from "./models.js";

export type { models };

/** Where the daemon listens unless told otherwise. */
export declare const DEFAULT_HOST: string;
/** Seconds a short call may go without progress (ClientOptions.timeout's default). */
export declare const DEFAULT_TIMEOUT: number;
/** Parses "sha256:<64 hex digits>" (or 32 colon-separated bytes) into its 32 bytes. */
export declare function parseFingerprint(s: string): Bytes;
/** "sha256:<hex>" of a certificate's DER bytes. */
export declare function fingerprintOf(der: Uint8Array): string;
/** A fresh random Idempotency-Key (32 hex digits). */
export declare function newIdempotencyKey(): string;
/** Checks every decoded answer against api/openapi.json (the SDK's own suite turns it on). */
export declare function setStrict(on: boolean): void;
export declare class SpecMismatch extends Error {}

/** Node's Buffer, as far as these declarations need it (no @types/node needed). */
export interface Bytes extends Uint8Array {
  toString(encoding?: string): string;
}

export interface ClientOptions {
  /** unix:///path/to/berth.sock, http://host:port or https://host:port (default BERTH_HOST, else the default socket). */
  host?: string;
  /** Sent as a bearer token (default BERTH_API_KEY). */
  apiKey?: string;
  /** Pins an https daemon's certificate: "sha256:<hex>" (default BERTH_TLS_FINGERPRINT). */
  tlsFingerprint?: string;
  /** Verifies an https daemon's certificate against this CA file instead. */
  tlsCa?: string;
  /**
   * Without a host (nor BERTH_HOST): a context saved by `berth context add`
   * (its host, key and TLS settings); default BERTH_CONTEXT, else the CLI's
   * current context. "default" is the local socket.
   */
  context?: string;
  userAgent?: string;
  /** Retries of a refused (429/503) or, when safe, cut request (default 4). */
  maxRetries?: number;
  /** The longest Retry-After (seconds) waited for; a longer one is the error (default 30). */
  maxRetryWait?: number;
  /**
   * Seconds a short call may go without progress on its connection (default
   * 60; 0 or null: no bound). See Client for which calls are short.
   */
  timeout?: number | null;
  /**
   * Seconds a long-running call (exec and run streams, waits, watches, event
   * streams, builds, imports, pushes, copies, snapshots, forks, ...) may go
   * without progress (default none).
   */
  streamTimeout?: number | null;
  /** How the retry loops wait (seconds); tests record instead of sleeping. */
  sleep?: (seconds: number) => Promise<void>;
}

export interface RequestOptions {
  /** Your Idempotency-Key (default: a random one, reused by every retry of the call). */
  idempotencyKey?: string;
}

export interface Page<T> {
  items: T[];
  /** "" on the last page. */
  nextCursor: string;
}

export interface PageOptions {
  limit?: number;
  cursor?: string;
}

/** The items of a paged list, fetched page by page as they are iterated. */
export declare class PageIterator<T> implements AsyncIterable<T> {
  [Symbol.asyncIterator](): AsyncIterator<T>;
  toArray(): Promise<T[]>;
}

/** A finished command. */
export declare class ExecResult {
  readonly exit: models.ExecExit;
  readonly stdout: Bytes;
  readonly stderr: Bytes;
  /** The one-shot sandbox of a client.run ("" for an exec). */
  readonly sandboxId: string;
  readonly exitCode: number;
  /** stdout as UTF-8. */
  readonly text: string;
}

/** An exec or process output event, its data decoded. */
export type ExecEvent = Omit<models.ExecEvent, "data"> & { data?: Bytes };
export type ProcessEvent = Omit<models.ProcessEvent, "data"> & { data?: Bytes };

export interface ProcessOutput {
  stdout: Bytes;
  stderr: Bytes;
  exit?: models.ExecExit;
  /** Bytes the daemon dropped before this reader read them. */
  gap: number;
}

export interface ExecOptions {
  stdin?: string | Uint8Array;
  env?: Record<string, string>;
  workdir?: string;
  user?: string;
  /** Seconds; the command is killed after it (exit.timed_out). */
  timeout?: number;
}

export type Command = string | string[];

export declare class Client implements AsyncDisposable {
  constructor(options?: ClientOptions);
  readonly host: string;
  maxRetries: number;
  maxRetryWait: number;
  /** The short calls' bound in seconds (see ClientOptions.timeout). */
  timeout: number | null | undefined;
  /** The long-running calls' bound in seconds (see ClientOptions.streamTimeout). */
  streamTimeout: number | null | undefined;
  /**
   * A client like this one with other bounds for the calls made through it
   * (`client.withOptions({ timeout: 5 }).sandboxes.get(id)`); it shares this
   * client's connections, so closing either closes both.
   */
  withOptions(options: { timeout?: number | null; streamTimeout?: number | null; maxRetries?: number }): Client;
  readonly sandboxes: Sandboxes;
  readonly snapshots: Snapshots;
  readonly templates: Templates;
  readonly volumes: Volumes;
  readonly secrets: Secrets;
  readonly events: Events;
  readonly audit: Audit;
  readonly keys: Keys;
  readonly tenants: Tenants;
  readonly quotas: Quotas;
  /** Closes the idle connections. */
  close(): void;
  [Symbol.asyncDispose](): Promise<void>;
  health(): Promise<true>;
  version(): Promise<models.Version>;
  doctor(options?: { fix?: boolean }): Promise<models.DoctorReport>;
  /** The daemon's metrics in the Prometheus text format (the host's administrator only). */
  metrics(): Promise<string>;
  /** The daemon's OpenAPI document. */
  openapi(): Promise<Record<string, unknown>>;
  /** One command in a one-shot sandbox the daemon destroys when it ends. */
  run(cmd: Command, options?: { sandbox?: models.CreateSandboxRequest; stdin?: string | Uint8Array; env?: Record<string, string>; timeout?: number }): Promise<ExecResult>;
  pools(): Promise<models.Pool[]>;
  /** The daemon's webhook endpoints, each URL redacted, and their recent deliveries (the host's administrator only). */
  webhooks(): Promise<models.Webhook[]>;
  /** The credential this client uses, as the daemon sees it (never the key itself). */
  whoami(): Promise<models.WhoAmI>;
  /** Builds a declarative template (YAML or JSON `spec`, `files` a tar of what its copy steps name). */
  apply(spec: string, options?: { files?: Uint8Array; onOutput?: (ev: BuildOutput) => void }): Promise<models.Template>;
  /** Copies a file or directory from one sandbox to another, inside the daemon. */
  copy(fromSandbox: string, fromPath: string, toSandbox: string, toPath: string, options?: { preserveOwner?: boolean }): Promise<void>;
}

/** One sandbox; `await using` deletes it when the block ends, even when it threw. */
export declare class Sandbox implements AsyncDisposable {
  constructor(client: Client, info: models.Sandbox);
  readonly id: string;
  info: models.Sandbox;
  readonly state: models.Sandbox["state"];
  readonly files: Files;
  readonly processes: Processes;
  readonly network: Network;
  [Symbol.asyncDispose](): Promise<void>;
  refresh(): Promise<this>;
  delete(options?: { force?: boolean }): Promise<models.Sandbox>;
  stop(options?: { timeout?: number }): Promise<this>;
  start(): Promise<this>;
  pause(): Promise<this>;
  resume(): Promise<this>;
  reset(): Promise<this>;
  touch(): Promise<this>;
  hibernate(): Promise<this>;
  wake(): Promise<this>;
  diff(): Promise<models.DiffEntry[]>;
  /** CPU, memory and disk use now, each with its limit; a sandbox that is not running: its state, and zeros. */
  usage(): Promise<models.SandboxUsage>;
  /** Freezes the sandbox and cuts its network; its files stay readable. */
  quarantine(): Promise<this>;
  /** Ends a quarantine. */
  release(): Promise<this>;
  /** One HTTP request to `port` through the daemon's port proxy: the sandbox server's answer, whatever its status. */
  portRequest(
    port: number,
    path?: string,
    options?: { method?: string; body?: string | Uint8Array; headers?: Record<string, string>; params?: Record<string, unknown> },
  ): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Bytes }>;
  fork(count?: number, options?: Omit<models.ForkRequest, "count"> & RequestOptions): Promise<Sandbox[]>;
  snapshot(options?: { name?: string; retentionSeconds?: number } & RequestOptions): Promise<models.Snapshot>;
  snapshots(): PageIterator<models.Snapshot>;
  execStream(cmd: Command, options?: ExecOptions): AsyncGenerator<ExecEvent, void, undefined>;
  exec(cmd: Command, options?: ExecOptions & { onStdout?: (b: Bytes) => void; onStderr?: (b: Bytes) => void }): Promise<ExecResult>;
  events(options?: { after?: number }): PageIterator<models.Event>;
  export(paths: string[]): Promise<Bytes>;
  portToken(port: number, options?: { ttlSeconds?: number }): Promise<models.PortToken>;
  portTokens(): Promise<models.PortTokenInfo[]>;
  revokePortToken(tokenId: string): Promise<models.PortTokenInfo>;
  lease(scopes: string[], options?: { ttlSeconds?: number }): Promise<models.Lease>;
  /** Revokes one lease of this sandbox: refused from its next request, its open streams ended. */
  revokeLease(leaseId: string): Promise<void>;
  pty(cmd?: Command, options?: { rows?: number; cols?: number; env?: Record<string, string>; workdir?: string; user?: string; tty?: boolean }): Promise<Pty>;
}

/** A terminal session over the exec WebSocket. */
export declare class Pty implements AsyncDisposable {
  exit?: models.ExecExit;
  send(data: string | Uint8Array): Promise<void>;
  closeStdin(): Promise<void>;
  resize(rows: number, cols: number): Promise<void>;
  /** The next output chunk; empty once the session ended. */
  recv(): Promise<Bytes>;
  readUntil(needle: string | Uint8Array, limit?: number): Promise<Bytes>;
  wait(): Promise<models.ExecExit>;
  close(): void;
  [Symbol.asyncDispose](): Promise<void>;
}

export declare class Sandboxes {
  create(request?: models.CreateSandboxRequest, options?: RequestOptions): Promise<Sandbox>;
  get(idOrName: string): Promise<Sandbox>;
  list(options?: { all?: boolean }): PageIterator<Sandbox>;
  listPage(options?: { all?: boolean } & PageOptions): Promise<Page<Sandbox>>;
  delete(idOrName: string, options?: { force?: boolean }): Promise<models.Sandbox>;
  /** A sandbox's resource use now, by id or name (as `sb.usage()`). */
  usage(idOrName: string): Promise<models.SandboxUsage>;
}

export declare class Files {
  read(path: string): Promise<Bytes>;
  readStream(path: string): AsyncGenerator<Bytes, void, undefined>;
  mode(path: string): Promise<number>;
  write(path: string, data: string | Uint8Array, options?: { mode?: number }): Promise<models.FileInfo>;
  /** Writes a file from an async iterable of bytes (a node Readable, a web ReadableStream, an async generator) as it comes; not retried. */
  writeStream(path: string, source: AsyncIterable<Uint8Array | string>, options?: { mode?: number }): Promise<models.FileInfo>;
  stat(path: string): Promise<models.FileInfo>;
  list(path: string): Promise<models.FileInfo[]>;
  mkdir(path: string, options?: { parents?: boolean }): Promise<void>;
  remove(path: string, options?: { recursive?: boolean }): Promise<void>;
  move(src: string, dst: string, options?: { noReplace?: boolean }): Promise<void>;
  watch(path: string, options?: { recursive?: boolean }): AsyncGenerator<models.WatchEvent, void, undefined>;
  readTar(path: string): Promise<Bytes>;
  writeTar(directory: string, archive: Uint8Array): Promise<void>;
}

export declare class Processes {
  start(cmd: Command, options?: Omit<models.StartProcessRequest, "cmd">): Promise<models.Process>;
  list(): Promise<models.Process[]>;
  get(id: string): Promise<models.Process>;
  logsStream(id: string, options?: { follow?: boolean }): AsyncGenerator<ProcessEvent, void, undefined>;
  logs(id: string, options?: { follow?: boolean }): Promise<ProcessOutput>;
  stdin(id: string, data?: string | Uint8Array, options?: { close?: boolean }): Promise<void>;
  signal(id: string, signal: string): Promise<void>;
  kill(id: string): Promise<void>;
  wait(id: string): Promise<models.ExecExit>;
  /** Attaches to a background process over its WebSocket (kept output, then live). */
  attach(id: string): Promise<Pty>;
}

export declare class Network {
  get(): Promise<models.NetworkRules>;
  update(rules: { allow?: string[]; deny?: string[] }): Promise<models.NetworkRules>;
  flows(options?: { after?: number }): Promise<models.Flow[]>;
}

export declare class Snapshots {
  list(): PageIterator<models.Snapshot>;
  get(idOrName: string): Promise<models.Snapshot>;
  delete(idOrName: string): Promise<void>;
  restore(idOrName: string): Promise<Sandbox>;
}

export declare class Templates {
  list(): PageIterator<models.Template>;
  listPage(options?: PageOptions): Promise<Page<models.Template>>;
  get(name: string): Promise<models.Template>;
  delete(name: string): Promise<void>;
  getPool(name: string): Promise<models.Pool>;
  setPool(name: string, min: number): Promise<models.Pool>;
  clearPool(name: string): Promise<models.Pool>;
  import(
    name: string,
    ref?: string,
    options?: { path?: string; insecure?: boolean; registryAuth?: models.RegistryAuth; service?: models.TemplateService; onProgress?: (p: models.ImportProgress) => void },
  ): Promise<models.Template>;
  upload(name: string, archive: Uint8Array, options?: { onProgress?: (p: models.ImportProgress) => void }): Promise<models.Template>;
  build(
    name: string,
    from: string,
    run: string[],
    options?: BuildOptions & { env?: Record<string, string>; service?: models.TemplateService },
  ): Promise<models.Template>;
  buildDockerfile(
    name: string,
    context: Uint8Array,
    options?: BuildOptions & { dockerfile?: string; target?: string; buildArgs?: Record<string, string> },
  ): Promise<models.Template>;
  push(
    name: string,
    ref: string,
    options?: { insecure?: boolean; registryAuth?: models.RegistryAuth; onProgress?: (p: models.ImportProgress) => void },
  ): Promise<models.PushResult>;
}

/** A build step's output (a BuildEvent with its data decoded). */
export interface BuildOutput {
  step: number;
  stream?: string;
  data: Bytes;
}

export interface BuildOptions {
  network?: string;
  allow?: string[];
  timeout?: number;
  onOutput?: (ev: BuildOutput) => void;
}

export declare class Volumes {
  create(name: string, options?: { sizeBytes?: number; inodes?: number } & RequestOptions): Promise<models.Volume>;
  /** Every volume; `all` includes the tombstones of deleted ones. */
  list(options?: { all?: boolean }): PageIterator<models.Volume>;
  listPage(options?: PageOptions & { all?: boolean }): Promise<Page<models.Volume>>;
  get(name: string): Promise<models.Volume>;
  delete(name: string): Promise<void>;
}

export declare class Secrets {
  set(name: string, value: string): Promise<models.Secret>;
  list(): PageIterator<models.Secret>;
  delete(name: string): Promise<void>;
  rotateKey(key: string): Promise<models.RotateSecretsKeyResponse>;
}

export interface EventFilter {
  sandbox?: string | string[];
  types?: string[];
  after?: number;
}

export declare class Events {
  list(filter?: EventFilter): PageIterator<models.Event>;
  listPage(filter?: EventFilter & PageOptions): Promise<Page<models.Event>>;
  /** Follows the SSE stream, resuming with Last-Event-ID; every event once, in order. */
  stream(filter?: EventFilter & { reconnectFor?: number }): AsyncGenerator<models.Event, void, undefined>;
}

export interface AuditFilter {
  since?: string | Date;
  until?: string | Date;
  actor?: string;
  action?: string;
  target?: string;
}

export declare class Audit {
  list(filter?: AuditFilter): PageIterator<models.AuditEntry>;
  listPage(filter?: AuditFilter & PageOptions): Promise<Page<models.AuditEntry>>;
  export(): Promise<Bytes>;
  verify(options?: { anchor?: Record<string, unknown> }): Promise<models.AuditVerify>;
}

export declare class Keys {
  create(role: string, options?: { tenant?: string; name?: string; scopes?: string[]; expiresInSeconds?: number }): Promise<models.CreatedAPIKey>;
  list(): PageIterator<models.APIKey>;
  revoke(idOrPrefix: string): Promise<models.APIKey>;
}

export declare class Tenants {
  create(name: string): Promise<models.Tenant>;
  list(): Promise<models.Tenant[]>;
  delete(name: string): Promise<void>;
}

export declare class Quotas {
  get(tenant: string): Promise<models.Quota>;
  set(tenant: string, quota: models.QuotaRequest): Promise<models.Quota>;
  own(): Promise<models.Quota>;
}

/** Every error the SDK throws. */
export declare class BerthError extends Error {
  /** The API's stable code, or "connect", "transport", "stream", "tls_fingerprint". */
  readonly code: string;
  /** The HTTP status; 0 for an error inside a stream or on this side. */
  readonly status: number;
  readonly requestId: string;
  /** Seconds, from a 429/503's Retry-After. */
  readonly retryAfter: number | undefined;
}
export declare class ConnectError extends BerthError {
  readonly host: string;
}
export declare class FingerprintError extends BerthError {
  readonly got: string;
  readonly want: string;
}
export declare class TransportError extends BerthError {}
/** A call past its bound (the client's timeout or streamTimeout); code "timeout". Not retried. */
export declare class RequestTimeoutError extends TransportError {}
export declare class StreamError extends BerthError {}
export declare class APIError extends BerthError {
  /** The answer's one-line message. */
  readonly detail: string;
  /** With limit_exceeded: the documented limit. */
  readonly limit: string;
}
export declare class InvalidArgumentError extends APIError {}
export declare class LimitExceededError extends APIError {}
export declare class UnauthenticatedError extends APIError {}
export declare class PermissionDeniedError extends APIError {}
export declare class NotFoundError extends APIError {}
export declare class ConflictError extends APIError {}
export declare class TooLargeError extends APIError {}
export declare class RateLimitedError extends APIError {}
export declare class UnavailableError extends APIError {}
export declare class InternalError extends APIError {}
