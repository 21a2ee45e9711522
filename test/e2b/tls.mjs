// The e2b SDK over TLS to berth's E2B door (--e2b-cert/--e2b-key): the
// daemon's certificate is trusted through Node's NODE_EXTRA_CA_CERTS.
import { Sandbox } from 'e2b'

const out = {}
try {
  const sbx = await Sandbox.create({ timeoutMs: 60_000 })
  out.stdout = (await sbx.commands.run('echo over tls')).stdout
  await sbx.files.write('/tmp/t.txt', 'tls file')
  out.read = await sbx.files.read('/tmp/t.txt')
  out.killed = await sbx.kill()
  out.ok = true
} catch (e) {
  out.error = String(e && e.stack || e)
}
process.stdout.write(JSON.stringify(out))
