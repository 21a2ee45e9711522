// The newer envd API through berth's door, with the unmodified e2b SDK
// (configured only through its documented environment): file metadata
// (written, read back by getInfo and list, kept by a rename, dropped by an
// overwrite, set as an xattr from inside), entry info in watch events, a
// watch allowing network mounts, and signed file URLs (downloadUrl,
// uploadUrl) used, misused and outlived; a running command's wait when
// its sandbox is killed. Prints one JSON object for
// test/e2e/e2b_envd_test.go to judge; a step that throws ends it with
// {"failure": ...}.
import { Sandbox, FilesystemEventType } from 'e2b'

const out = {}
const made = []
const base = process.env.E2B_SANDBOX_URL
// fetch a signed URL the way the SDK made it, routed to sandbox id by
// the door's headers (the URL's host is E2B_SANDBOX_URL), with no token.
async function signed(u, id, init = {}) {
  const headers = id ? { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983' } : {}
  const r = await fetch(u, { ...init, headers })
  return { status: r.status, body: (await r.text()).slice(0, 300) }
}
function withParam(u, k, v) {
  const x = new URL(u)
  x.searchParams.set(k, v)
  return x.toString()
}
async function watchOnce(sbx, dir, file, opts) {
  let resolve
  const got = new Promise((r) => { resolve = r })
  const h = await sbx.files.watchDir(dir, (ev) => {
    if (ev.type === FilesystemEventType.WRITE && ev.name === file) resolve(ev)
  }, opts)
  await sbx.files.write(`${dir}/${file}`, 'changed')
  const ev = await got
  await h.stop()
  return ev
}
try {
  const a = await Sandbox.create({ timeoutMs: 600_000 })
  made.push(a)
  const b = await Sandbox.create({ timeoutMs: 600_000 })
  made.push(b)

  // Metadata: multipart and octet-stream writes, getInfo, list, rename,
  // overwrite, an xattr set from inside.
  const meta = { author: 'mish', purpose: 'upload' }
  out.written = (await a.files.write('m.txt', 'm', { metadata: meta })).metadata
  out.writtenOctet = (await a.files.write('o.txt', 'o', { metadata: meta, useOctetStream: true })).metadata
  out.info = (await a.files.getInfo('m.txt')).metadata
  out.infoOctet = (await a.files.getInfo('o.txt')).metadata
  await a.files.makeDir('dir')
  await a.files.write('dir/l.txt', 'l', { metadata: { tag: 'listed' } })
  out.listed = (await a.files.list('dir')).find((e) => e.name === 'l.txt')?.metadata
  out.renamed = (await a.files.rename('m.txt', 'n.txt')).metadata
  out.overwritten = (await a.files.write('n.txt', 'again')).metadata ?? null
  out.overwrittenInfo = (await a.files.getInfo('n.txt')).metadata ?? null
  await a.commands.run(`python3 -c "import os; os.setxattr('/home/user/o.txt', 'user.e2b.inside', b'yes')"`)
  out.inside = (await a.files.getInfo('o.txt')).metadata
  out.xattrCmd = (await a.commands.run(`python3 -c "import os; print(os.getxattr('/home/user/n.txt', 'user.e2b.author', follow_symlinks=False) if 'user.e2b.author' in os.listxattr('/home/user/n.txt') else 'none')"`)).stdout.trim()

  // Watches: entry info, and a watch allowing network mounts.
  await a.files.makeDir('w')
  await a.files.write('w/f.txt', 'first')
  const ev = await watchOnce(a, 'w', 'f.txt', { includeEntry: true })
  out.entry = ev.entry ? { name: ev.entry.name, path: ev.entry.path, type: ev.entry.type } : null
  const ev2 = await watchOnce(a, 'w', 'f.txt', { allowNetworkMounts: true })
  out.networkMounts = ev2.name

  // Signed URLs (the door routes by header here; by host under E2B_DOMAIN).
  await a.files.write('s.txt', 'signed content')
  const down = await a.downloadUrl('s.txt', { useSignatureExpiration: 60_000 })
  out.download = await signed(down, a.sandboxId)
  await a.files.write('/root/r.txt', 'root file', { user: 'root' })
  out.downloadRoot = await signed(await a.downloadUrl('/root/r.txt', { user: 'root', useSignatureExpiration: 60_000 }), a.sandboxId)
  const up = await a.uploadUrl('up.txt', { useSignatureExpiration: 60_000 })
  const form = new FormData()
  form.append('file', 'uploaded by url')
  out.upload = await signed(up, a.sandboxId, { method: 'POST', body: form })
  out.uploaded = await a.files.read('up.txt')
  out.noExpiry = await signed(await a.downloadUrl('s.txt'), a.sandboxId)
  out.expired = await signed(await a.downloadUrl('s.txt', { useSignatureExpiration: -10_000 }), a.sandboxId)
  out.otherPath = await signed(withParam(down, 'path', '/etc/passwd'), a.sandboxId)
  out.otherUser = await signed(withParam(down, 'username', 'root'), a.sandboxId)
  out.laterExpiry = await signed(withParam(down, 'signature_expiration', String(Math.floor(Date.now() / 1000) + 86400)), a.sandboxId)
  out.otherSandbox = await signed(down, b.sandboxId)
  const form2 = new FormData()
  form2.append('file', 'x')
  out.readAsWrite = await signed(withParam(up, 'signature', new URL(down).searchParams.get('signature')), a.sandboxId, { method: 'POST', body: form2 })
  out.unrouted = await signed(down, '')
  out.unroutedExpired = await signed(await a.downloadUrl('s.txt', { useSignatureExpiration: -10_000 }), '')
  await a.kill()
  out.afterKill = await signed(down, a.sandboxId)

  // A command running when its sandbox is killed: the SDK's wait fails
  // with its "sandbox was killed" TimeoutError.
  const cmd = await b.commands.run('sleep 60', { background: true })
  await b.kill()
  const err = await cmd.wait().catch((e) => e)
  out.killedWait = err ? err.constructor.name + ': ' + err.message : 'no error'

  // maskRequestHost: the Host requests to a port carry in the sandbox.
  const m = await Sandbox.create({ timeoutMs: 600_000, network: { maskRequestHost: 'masked.example:${PORT}' } })
  made.push(m)
  await m.commands.run(`python3 -c "
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        open('/tmp/host.txt', 'w').write(self.headers['Host'])
        self.send_response(200)
        self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8080), H).serve_forever()
"`, { background: true })
  let st = 0
  for (let i = 0; i < 50 && st !== 200; i++) {
    st = (await fetch(base + '/', { headers: { 'E2b-Sandbox-Id': m.sandboxId, 'E2b-Sandbox-Port': '8080' } })).status
    if (st !== 200) await new Promise((r) => setTimeout(r, 200))
  }
  out.maskedHost = (await m.files.read('/tmp/host.txt')).trim()

  // mcp: the SDK starts the gateway itself in the sandbox; the base
  // template has none, so the create fails as on E2B and the SDK kills
  // the sandbox it made.
  const tag = 'mcp-' + Math.random().toString(36).slice(2)
  try {
    await Sandbox.create('base', { timeoutMs: 60_000, metadata: { tag }, mcp: { nothing: {} } })
    out.mcp = 'created'
  } catch (e) {
    out.mcp = e.constructor.name + ': ' + e.message
  }
  out.mcpLeft = (await Sandbox.list({ query: { metadata: { tag } } }).nextItems()).length
  out.ok = true
} catch (e) {
  out.failure = String(e && e.stack || e)
}
for (const s of made) {
  try { await s.kill() } catch {}
}
process.stdout.write(JSON.stringify(out))
