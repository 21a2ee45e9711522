"""An agent's tool loop with berth as its code tool: the model asks for
Python to be run, berth runs it in a sandbox, the output goes back to the
model, until it answers. The sandbox lives as long as the conversation,
so files and installed packages persist from one tool call to the next.

The model is any function taking (messages, tools) and returning an
assistant message in the OpenAI chat shape; `openai_model` below adapts
the OpenAI SDK (`pip install openai`), and Anthropic's tool use maps the
same way. The test runs the loop with a scripted model instead.

    OPENAI_API_KEY=... python3 agent_tool_loop.py "What is the 20th Fibonacci number?"
"""
import json
import sys

import berth

TOOLS = [{
    "type": "function",
    "function": {
        "name": "run_python",
        "description": "Run Python 3 code in a sandbox; returns its stdout, stderr and exit code. "
                       "Files written persist between calls.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}]


def run_python(sb: berth.Sandbox, code: str) -> str:
    """The tool: the code runs in the sandbox, never on this machine."""
    sb.files.write("/tmp/tool_call.py", code)
    r = sb.exec(["python3", "/tmp/tool_call.py"], timeout=60)
    return json.dumps({"exit_code": r.exit_code, "stdout": r.stdout.decode(errors="replace")[-8000:],
                       "stderr": r.stderr.decode(errors="replace")[-4000:]})


def main(client: berth.Client, question: str, model, max_turns: int = 10) -> str:
    messages = [{"role": "system", "content": "Use run_python to compute; answer briefly."},
                {"role": "user", "content": question}]
    # Egress stays closed: model-written code reaches nothing off the sandbox.
    with client.sandboxes.create(labels={"example": "agent"}, timeout_seconds=600) as sb:
        for _ in range(max_turns):
            reply = model(messages, TOOLS)
            messages.append(reply)
            calls = reply.get("tool_calls") or []
            if not calls:
                return reply.get("content") or ""
            for call in calls:
                args = json.loads(call["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": run_python(sb, args["code"])})
    raise SystemExit("no answer after %d turns" % max_turns)


def openai_model(messages, tools):
    """The OpenAI chat completions API as the model."""
    import openai  # not a dependency of berth

    msg = openai.OpenAI().chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools).choices[0].message
    out = {"role": "assistant", "content": msg.content}
    if msg.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function",
                              "function": {"name": c.function.name, "arguments": c.function.arguments}}
                             for c in msg.tool_calls]
    return out


if __name__ == "__main__":
    with berth.Client() as c:
        print(main(c, " ".join(sys.argv[1:]) or "What is 2**100?", openai_model))
