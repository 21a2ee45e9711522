// E2B's conventions through berth's door, with the unmodified e2b SDK
// (configured only through its documented environment): the user and
// home commands and relative paths use, writeFiles keeping directories,
// removing a missing file, isRunning by state, list filters and order
// with paging, connect only extending a timeout, ports public unless the
// create asked otherwise. Prints one JSON object for
// test/e2e/e2b_conventions_test.go to judge; a step that throws ends it
// with {"failure": ...}.
import { Sandbox } from 'e2b'

const out = {}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
const made = []
async function port(id, p, token) {
  const h = { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': String(p) }
  if (token) h['X-Access-Token'] = token
  const r = await fetch(process.env.E2B_SANDBOX_URL + '/', { headers: h })
  return { status: r.status, body: (await r.text()).slice(0, 200) }
}
async function serve(sbx) {
  await sbx.commands.run('python3 -m http.server 8000 --bind 127.0.0.1', { background: true })
  for (let i = 0; i < 100; i++) {
    const r = await sbx.commands.run('python3 -c "import socket; socket.create_connection((\'127.0.0.1\', 8000))" && echo up || true')
    if (r.stdout.includes('up')) return
    await sleep(100)
  }
  throw new Error('the web server did not start')
}
try {
  const tag = 'conv-' + Math.random().toString(36).slice(2)
  const a = await Sandbox.create({ timeoutMs: 600_000, metadata: { tag } })
  made.push(a)
  out.id = a.sandboxId

  // The user, the working directory and HOME of a command naming none.
  const who = await a.commands.run('id -un; id -u; pwd; echo $HOME')
  out.who = who.stdout.trim().split('\n')
  const root = await a.commands.run('id -un; echo $HOME', { user: 'root' })
  out.root = root.stdout.trim().split('\n')
  // `python`, not only `python3`, as E2B programs run it.
  out.python = (await a.commands.run('python -c "import sys; print(sys.version_info[0])"')).stdout.trim()

  // Relative paths are the user's home; writeFiles keeps directories.
  await a.files.write('rel.txt', 'rel')
  await a.files.write([
    { path: 'nested/dir/one.txt', data: 'one' },
    { path: '/tmp/abs/two.txt', data: 'two' },
  ])
  const cat = await a.commands.run('for f in /home/user/rel.txt /home/user/nested/dir/one.txt /tmp/abs/two.txt; do cat $f; echo; done; stat -c %u /home/user/rel.txt')
  out.files = cat.stdout.trim().split('\n')
  out.readBack = await a.files.read('nested/dir/one.txt')
  // gzip both ways (the SDK's gzip option).
  await a.files.write('gz/z.txt', 'zipped', { gzip: true })
  out.gz = [await a.files.read('gz/z.txt', { gzip: true }), await a.files.read('gz/z.txt')]
  try {
    await a.files.remove('/tmp/never-there')
    out.removeMissing = 'ok'
  } catch (e) {
    out.removeMissing = e.name + ': ' + e.message
  }

  // list: two more sandboxes of the tag, newest first, one per page.
  const b = await Sandbox.create({ timeoutMs: 600_000, metadata: { tag } })
  made.push(b)
  const c = await Sandbox.create({ timeoutMs: 600_000, metadata: { tag }, network: { allowPublicTraffic: false } })
  made.push(c)
  const pages = []
  const pager = Sandbox.list({ limit: 1, query: { metadata: { tag } } })
  while (pager.hasNext && pages.length < 10) pages.push((await pager.nextItems()).map((s) => s.sandboxId))
  out.pages = pages
  out.asc = (await Sandbox.list({ order: 'asc', query: { metadata: { tag } } }).nextItems()).map((s) => s.sandboxId)
  out.template = (await Sandbox.list({ query: { metadata: { tag }, template: 'base' } }).nextItems()).length
  out.otherTemplate = (await Sandbox.list({ query: { metadata: { tag }, template: 'nope' } }).nextItems()).length
  out.future = (await Sandbox.list({ query: { metadata: { tag }, startedAfter: new Date(Date.now() + 3600_000) } }).nextItems()).length
  out.past = (await Sandbox.list({ query: { metadata: { tag }, startedAfter: new Date(Date.now() - 3600_000) } }).nextItems()).length

  // connect to a running sandbox never shortens its timeout.
  const before = (await a.getInfo()).endAt.getTime()
  await Sandbox.connect(a.sandboxId, { timeoutMs: 30_000 })
  const after = (await a.getInfo()).endAt.getTime()
  out.connectKept = after >= before

  // Ports: A's public, C's (allowPublicTraffic: false) need its token.
  await serve(a)
  await serve(c)
  out.publicPort = await port(a.sandboxId, 8000)
  out.privatePort = await port(c.sandboxId, 8000)
  out.privatePortToken = await port(c.sandboxId, 8000, c.trafficAccessToken)

  // isRunning by state: running, paused, killed.
  out.running = await b.isRunning()
  await b.pause()
  out.paused = await b.isRunning()
  await c.kill()
  out.killed = await c.isRunning()
  out.ok = true
} catch (e) {
  out.failure = String(e && e.stack || e)
}
for (const s of made) {
  try { await s.kill() } catch {}
}
process.stdout.write(JSON.stringify(out))
