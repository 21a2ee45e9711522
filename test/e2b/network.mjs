// E2B's egress rules through berth's door, with the unmodified e2b SDK:
// denyOut of one address, allowOut as the exception to denying all
// traffic, and updateNetwork replacing the rules of a running sandbox
// (an empty update opens it again). The "internet" is two addresses of
// a test namespace (BERTH_TEST_A, BERTH_TEST_B, each serving HTTP on
// 8080); nothing leaves the machine. Prints one JSON object for
// test/e2e/e2b_network_test.go to judge.
import { Sandbox } from 'e2b'

const out = {}
const made = []
const A = process.env.BERTH_TEST_A
const B = process.env.BERTH_TEST_B
// reach reports which of A and B a sandbox reaches now.
async function reach(sbx) {
  const r = []
  for (const ip of [A, B]) {
    const c = await sbx.commands.run(
      `python3 -c "import urllib.request; urllib.request.urlopen('http://${ip}:8080/', timeout=3)" && echo yes || echo no`)
    r.push(c.stdout.trim())
  }
  return r.join(',')
}
try {
  const a = await Sandbox.create({ timeoutMs: 600_000, network: { denyOut: [A] } })
  made.push(a)
  out.denyA = await reach(a)
  await a.updateNetwork({ denyOut: [B] })
  out.updatedDenyB = await reach(a)
  await a.updateNetwork({})
  out.updatedOpen = await reach(a)
  await a.updateNetwork({ denyOut: ({ allTraffic }) => [allTraffic], allowOut: [A] })
  out.updatedOnlyA = await reach(a)
  const b = await Sandbox.create({ timeoutMs: 600_000, network: { denyOut: ({ allTraffic }) => [allTraffic], allowOut: [B] } })
  made.push(b)
  out.onlyB = await reach(b)
  const c = await Sandbox.create({ timeoutMs: 600_000, allowInternetAccess: false })
  made.push(c)
  try {
    await c.updateNetwork({ denyOut: [A] })
    out.noneUpdate = 'accepted'
  } catch (e) {
    out.noneUpdate = e.constructor.name + ': ' + e.message
  }
  try {
    await a.updateNetwork({ denyOut: ['example.com'] })
    out.badDeny = 'accepted'
  } catch (e) {
    out.badDeny = e.constructor.name + ': ' + e.message
  }
  out.afterBad = await reach(a)
  out.ok = true
} catch (e) {
  out.failure = String(e && e.stack || e)
}
for (const s of made) {
  try { await s.kill() } catch {}
}
process.stdout.write(JSON.stringify(out))
