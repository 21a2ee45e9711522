// The README examples of e2b-dev/E2B (e2b's, then @e2b/code-interpreter's),
// each run as the README writes it, configured only through the SDKs'
// documented environment. What they print is captured; the sandboxes are
// killed after. Prints one JSON object for test/e2e/e2b_sudo_test.go.
//
// e2b's example imports the SDK's default export (`import Sandbox from
// 'e2b'`), which in e2b 2.51.0 is the module's namespace, not the class:
// `Sandbox.create` is not a function there before any request is made,
// whatever the server. That is recorded (defaultImport), and the example
// runs again with the named import the SDK's own docs use.
import { Sandbox as CodeInterpreter } from '@e2b/code-interpreter'
import DefaultExport, { Sandbox as Named } from 'e2b'

const out = {}
const printed = []
const log = console.log
console.log = (...a) => printed.push(a.join(' '))
const made = []
const e2bExample = async (Sandbox) => {
  // README: "Start a sandbox and run commands", JavaScript / TypeScript.
  const sandbox = await Sandbox.create()
  made.push(sandbox)
  const result = await sandbox.commands.run('echo "Hello from E2B!"')
  console.log(result.stdout) // Hello from E2B!
}
try {
  try {
    await e2bExample(DefaultExport)
    out.defaultImport = 'ran'
  } catch (e) {
    out.defaultImport = e.name + ': ' + e.message
  }
  await e2bExample(Named)
  await (async () => {
    const Sandbox = CodeInterpreter
    // README: "Code execution with Code Interpreter".
    const sandbox = await Sandbox.create()
    made.push(sandbox)
    const execution = await sandbox.runCode('x = 1; x += 1; x')
    console.log(execution.text)  // outputs 2
  })()
  out.ok = true
} catch (e) {
  out.failure = String((e && e.stack) || e)
}
console.log = log
out.printed = printed
for (const s of made) {
  try { await s.kill() } catch {}
}
process.stdout.write(JSON.stringify(out))
