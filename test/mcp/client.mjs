// client.mjs drives `berth mcp` over stdio with the real MCP TypeScript SDK
// client and prints one JSON object the Go test (test/e2e/mcp_test.go)
// asserts on.
//
//   BERTH_BIN   the berth binary (required)
//   BERTH_HOST  the daemon (passed through to berth mcp)
//   MCP_MODE    "full" (default): create, run, write, read, list, delete;
//               "leave": create an ephemeral sandbox and disconnect
//               without deleting it (the session's end must delete it).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const bin = process.env.BERTH_BIN;
if (!bin) {
  console.error("BERTH_BIN is not set");
  process.exit(2);
}
const mode = process.env.MCP_MODE || "full";

const transport = new StdioClientTransport({
  command: bin,
  args: ["mcp"],
  env: { ...process.env },
  stderr: "inherit",
});
const client = new Client({ name: "berth-e2e", version: "1.0.0" });

async function call(name, args) {
  const res = await client.callTool({ name, arguments: args });
  if (res.isError) {
    throw new Error(`${name}: ${JSON.stringify(res.content)}`);
  }
  return { structured: res.structuredContent, text: res.content?.[0]?.text ?? "" };
}

const out = { mode };
try {
  await client.connect(transport);
  out.server = client.getServerVersion();
  const tools = await client.listTools();
  out.tools = tools.tools.map((t) => t.name).sort();
  out.toolsWithOutputSchema = tools.tools.filter((t) => t.outputSchema).map((t) => t.name).sort();

  const created = await call("sandbox_create", {});
  const id = created.structured.sandbox.id;
  out.created = created.structured.sandbox;

  if (mode === "full") {
    const run = await call("run_command", { id, cmd: ["echo", "hello from mcp"] });
    out.run = run.structured;
    const fail = await call("run_command", { id, shell: "echo oops >&2; exit 3" });
    out.runFail = fail.structured;
    const big = await call("run_command", { id, shell: "head -c 200000 /dev/zero | tr '\\0' x", max_output_bytes: 1000 });
    out.runBig = { stdoutLen: big.structured.stdout.length, truncated: big.structured.stdout_truncated };
    const wrote = await call("file_write", { id, path: "/tmp/mcp/hello.txt", content: "written by the TS SDK\n" });
    out.wrote = wrote.structured.file;
    const read = await call("file_read", { id, path: "/tmp/mcp/hello.txt" });
    out.read = read.structured;
    const listed = await call("file_list", { id, path: "/tmp/mcp" });
    out.listed = listed.structured.entries.map((e) => e.name);
    const bg = await call("process_start", { id, shell: "echo started; exec sleep 300" });
    out.bg = bg.structured.process;
    const ps = await call("process_list", { id });
    out.ps = ps.structured.processes.map((p) => ({ id: p.id, state: p.state }));
    const killed = await call("process_kill", { id, process_id: bg.structured.process.id, signal: "SIGKILL" });
    out.killed = killed.structured.process;
    const port = await call("expose_port", { id, port: 8080 });
    out.port = port.structured;
    // A text content mirrors the structured one.
    out.textIsJSON = JSON.parse(read.text).content === read.structured.content;
    const del = await call("sandbox_delete", { id });
    out.deleted = del.structured;
    try {
      await call("file_read", { id, path: "/tmp/mcp/hello.txt" });
      out.readAfterDelete = "succeeded";
    } catch (e) {
      out.readAfterDelete = "error";
    }
  }
  await client.close();
  out.ok = true;
} catch (e) {
  out.ok = false;
  out.error = String(e && e.stack ? e.stack : e);
  try {
    await client.close();
  } catch {}
}
console.log(JSON.stringify(out));
