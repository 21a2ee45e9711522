// The e2b SDK in E2B_DOMAIN mode: the control API at https://api.DOMAIN and
// each sandbox's envd at https://49983-ID.DOMAIN, both on port 443 of
// berth's door (--e2b-domain), no E2B_API_URL or E2B_SANDBOX_URL.
import { Sandbox } from 'e2b'

const out = {}
try {
  const sbx = await Sandbox.create({ timeoutMs: 60_000 })
  out.host = sbx.getHost(8080)
  out.stdout = (await sbx.commands.run('echo routed by host')).stdout
  await sbx.files.write('/tmp/d.txt', 'domain file')
  out.read = await sbx.files.read('/tmp/d.txt')
  const bg = await sbx.commands.run('sleep 60', { background: true })
  out.listed = (await sbx.commands.list()).some((p) => p.pid === bg.pid)
  out.inList = (await Sandbox.list().nextItems()).some((s) => s.sandboxId === sbx.sandboxId)
  out.id = sbx.sandboxId
  out.killed = await sbx.kill()
  out.ok = true
} catch (e) {
  out.error = String(e && e.stack || e)
}
process.stdout.write(JSON.stringify(out))
