// Symbol.asyncDispose, which `await using` calls, exists from Node 18.18 and
// 20.4; on older Node it is defined here as those define it, so Sandbox,
// Client and Pty are disposable on every Node >= 18.
if (typeof Symbol.asyncDispose !== "symbol") {
  Object.defineProperty(Symbol, "asyncDispose", { value: Symbol.for("nodejs.asyncDispose") });
}
