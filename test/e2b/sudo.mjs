// berth's sudo through the door, with the unmodified e2b SDK (configured
// only through its documented environment), as E2B programs use it: the
// user's passwordless sudo for a command, with -E, a file written as
// root, and E2B's own suite's `bash command scoped env vars` command.
// Prints one JSON object for test/e2e/e2b_sudo_test.go to judge; a step
// that throws ends it with {"failure": ...}.
import { Sandbox, CommandExitError } from 'e2b'

const out = {}
let sbx
try {
  sbx = await Sandbox.create({ timeoutMs: 300_000 })
  out.echo = (await sbx.commands.run('sudo echo hello')).stdout.trim()
  out.ids = (await sbx.commands.run('id -u; sudo id -u')).stdout.trim().split('\n')
  // E2B's js-sdk tests/sandbox/commands/envVars.test.ts, "bash command
  // scoped env vars", as it runs: a command's envs reach it, and not the
  // next command, run through sudo.
  const scoped = await sbx.commands.run('echo $FOO', { envs: { FOO: 'bar' } })
  const next = await sbx.commands.run('sudo echo "$FOO"')
  out.scoped = [scoped.exitCode, scoped.stdout.trim(), next.exitCode, next.stdout.trim()]
  // bash expands $FOO before sudo runs echo.
  out.expanded = (await sbx.commands.run('sudo echo "$FOO"', { envs: { FOO: 'bar' } })).stdout.trim()
  const foo = (r) => r.stdout.split('\n').filter((l) => l.startsWith('FOO='))
  out.preserved = foo(await sbx.commands.run('sudo -E env', { envs: { FOO: 'kept' } }))
  out.reset = foo(await sbx.commands.run('sudo env', { envs: { FOO: 'kept' } }))
  await sbx.commands.run("sudo sh -c 'echo root-data > /root/owned && chmod 600 /root/owned'")
  out.rootFile = (await sbx.commands.run('stat -c %u:%a /root/owned', { user: 'root' })).stdout.trim()
  out.rootRead = await sbx.files.read('/root/owned', { user: 'root' })
  try {
    await sbx.commands.run('cat /root/owned')
    out.userRead = 'read'
  } catch (e) {
    out.userRead = e instanceof CommandExitError ? 'exit ' + e.exitCode : String(e)
  }
  await sbx.commands.run("echo x | sudo tee /etc/berth-sudo-test > /dev/null")
  out.etc = (await sbx.commands.run('stat -c %u /etc/berth-sudo-test')).stdout.trim()
  try {
    await sbx.commands.run('sudo sh -c "exit 3"')
    out.exit = 'no error'
  } catch (e) {
    out.exit = e instanceof CommandExitError ? e.exitCode : String(e)
  }
  out.ok = true
} catch (e) {
  out.failure = String((e && e.stack) || e)
} finally {
  if (sbx) {
    try { await sbx.kill() } catch {}
  }
}
process.stdout.write(JSON.stringify(out))
