// An agent's tool loop with berth as its code tool: the model asks for
// Python to be run, berth runs it in a sandbox, the output goes back to the
// model, until it answers. The sandbox lives as long as the conversation,
// so files persist from one tool call to the next.
//
// The model is any async function taking (messages, tools) and returning an
// assistant message in the OpenAI chat shape; `openaiModel` below adapts
// the OpenAI SDK (`npm install openai`), and Anthropic's tool use maps the
// same way. The test runs the loop with a scripted model instead.
//
//     OPENAI_API_KEY=... node agent_tool_loop.mjs "What is the 20th Fibonacci number?"
import { pathToFileURL } from "node:url";

import { Client } from "@berth-sh/sdk";

export const TOOLS = [
  {
    type: "function",
    function: {
      name: "run_python",
      description: "Run Python 3 code in a sandbox; returns its stdout, stderr and exit code. Files written persist between calls.",
      parameters: { type: "object", properties: { code: { type: "string" } }, required: ["code"] },
    },
  },
];

/** The tool: the code runs in the sandbox, never on this machine. */
export async function runPython(sb, code) {
  await sb.files.write("/tmp/tool_call.py", code);
  const r = await sb.exec(["python3", "/tmp/tool_call.py"], { timeout: 60 });
  return JSON.stringify({ exit_code: r.exitCode, stdout: r.stdout.toString().slice(-8000), stderr: r.stderr.toString().slice(-4000) });
}

export async function main(client, question, model, maxTurns = 10) {
  const messages = [
    { role: "system", content: "Use run_python to compute; answer briefly." },
    { role: "user", content: question },
  ];
  // Egress stays closed: model-written code reaches nothing off the sandbox.
  const sb = await client.sandboxes.create({ labels: { example: "agent" }, timeout_seconds: 600 });
  try {
    for (let turn = 0; turn < maxTurns; turn++) {
      const reply = await model(messages, TOOLS);
      messages.push(reply);
      const calls = reply.tool_calls ?? [];
      if (calls.length === 0) return reply.content ?? "";
      for (const call of calls) {
        const args = JSON.parse(call.function.arguments);
        messages.push({ role: "tool", tool_call_id: call.id, content: await runPython(sb, args.code) });
      }
    }
    throw new Error(`no answer after ${maxTurns} turns`);
  } finally {
    await sb.delete({ force: true });
  }
}

/** The OpenAI chat completions API as the model. */
export async function openaiModel(messages, tools) {
  const { default: OpenAI } = await import("openai"); // not a dependency of berth
  const msg = (await new OpenAI().chat.completions.create({ model: "gpt-4o-mini", messages, tools })).choices[0].message;
  return { role: "assistant", content: msg.content, tool_calls: msg.tool_calls };
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const client = new Client();
  console.log(await main(client, process.argv.slice(2).join(" ") || "What is 2**100?", openaiModel));
  client.close();
}
