// E2B's template build API through berth's door, with the unmodified e2b
// SDK: Template().fromBaseImage() with copied files (a glob, a directory
// with a relative symlink), commands as the default user and as root,
// env, workdir, user and a start command, built with Template.build and
// its logs; the built template's sandbox holds what the steps made and
// runs the start command. Then Template.exists, a failing step (the
// SDK's BuildError with the step's message), and what berth refuses
// (registry credentials). Prints one JSON object for
// test/e2e/e2b_template_test.go.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Sandbox, Template, waitForTimeout } from 'e2b'

const out = {}
const ctx = fs.mkdtempSync(path.join(os.tmpdir(), 'berth-e2b-tpl-'))
try {
  fs.mkdirSync(path.join(ctx, 'folder'))
  fs.writeFileSync(path.join(ctx, 'folder', 'test.txt'), 'This is a test file.')
  fs.symlinkSync('test.txt', path.join(ctx, 'folder', 'symlink.txt'))
  fs.mkdirSync(path.join(ctx, 'app', 'lib'), { recursive: true })
  fs.writeFileSync(path.join(ctx, 'app', 'lib', 'mod.py'), 'X = 42\n')
  const name = process.env.TEMPLATE_NAME
  const logs = []
  out.logs = logs
  const tpl = Template({ fileContextPath: ctx })
    .fromBaseImage()
    .copy('folder/*', 'folder', { forceUpload: true })
    .copy('app', '/opt/app', { mode: 0o755 })
    .runCmd('cat folder/test.txt && cat folder/symlink.txt')
    .runCmd('id -un > /etc/built-by && mkdir -p /srv && chmod 777 /srv', { user: 'root' })
    .setEnvs({ GREETING: 'hello "world" $HOME' })
    .setWorkdir('/srv')
    .setUser('user')
    .runCmd('id -un > whoami.txt && pwd > pwd.txt && echo "$GREETING" > env.txt')
    .setStartCmd('echo started > /srv/started.txt && sleep 3600', waitForTimeout(1_000))
  const info = await Template.build(tpl, name, { cpuCount: 1, memoryMB: 1024, onBuildLogs: (l) => logs.push(l.message) })
  out.build = { name: info.name, templateId: info.templateId, hasBuildId: !!info.buildId }
  out.logSawFile = logs.some((m) => m.includes('This is a test file.This is a test file.'))
  out.exists = await Template.exists(name)
  out.missing = await Template.exists(`${name}-nope`)
  const st = await Template.getBuildStatus(info)
  out.status = st.status

  const sbx = await Sandbox.create(name, { timeoutMs: 120_000 })
  const r = await sbx.commands.run('cat /srv/whoami.txt /srv/pwd.txt /srv/env.txt /etc/built-by /opt/app/lib/mod.py; stat -c %a /opt/app/lib/mod.py; readlink /workspace/folder/symlink.txt', { user: 'root' })
  out.sandbox = r.stdout
  let started = ''
  for (let i = 0; i < 50 && !started; i++) {
    try { started = (await sbx.files.read('/srv/started.txt')).trim() } catch { await new Promise((res) => setTimeout(res, 200)) }
  }
  out.started = started
  out.killed = await sbx.kill()

  // A failing step: the SDK's BuildError, with berth's reason.
  try {
    await Template.build(Template().fromTemplate('base').runCmd('echo before && exit 3'), `${name}-fail`, { cpuCount: 1, memoryMB: 1024 })
    out.fail = 'built'
  } catch (e) {
    out.fail = { name: e.constructor.name, message: e.message }
  }
  // Registry credentials: refused by name, nothing built.
  try {
    await Template.build(Template().fromImage('registry.invalid/x:1', { username: 'u', password: 'p' }), `${name}-reg`, { cpuCount: 1, memoryMB: 1024 })
    out.registry = 'built'
  } catch (e) {
    out.registry = { name: e.constructor.name, message: e.message }
  }
  delete out.logs
  out.ok = true
} catch (e) {
  out.error = `${e && e.name}: ${e && e.message} ${e && e.stack}`
} finally {
  fs.rmSync(ctx, { recursive: true, force: true })
}
process.stdout.write(JSON.stringify(out))
