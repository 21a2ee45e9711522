// @berth-sh/sdk: the TypeScript/JavaScript SDK of berth's HTTP API.
// See docs/sdk-typescript.md in the berth repository.
export { Client, DEFAULT_TIMEOUT, ExecResult, PageIterator, Sandbox } from "./client.js";
export { DEFAULT_HOST, fingerprintOf, newIdempotencyKey, parseFingerprint } from "./conn.js";
export {
  APIError,
  BerthError,
  ConflictError,
  ConnectError,
  FingerprintError,
  InternalError,
  InvalidArgumentError,
  LimitExceededError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitedError,
  RequestTimeoutError,
  StreamError,
  TooLargeError,
  TransportError,
  UnauthenticatedError,
  UnavailableError,
} from "./errors.js";
export { Pty } from "./pty.js";
export { SpecMismatch, setStrict } from "./wire.js";
