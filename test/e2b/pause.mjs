// E2B's pause without memory through berth's door, with the unmodified
// e2b SDK: a sandbox made to pause without memory (lifecycle onTimeout
// {action: 'pause', keepMemory: false}) is stopped by pause({keepMemory:
// false}) — its files kept, its processes gone — and started again by
// connect; a default sandbox paused with memory keeps its process.
// Prints one JSON object for test/e2e/e2b_test.go.
import { Sandbox } from 'e2b'

const out = {}
try {
  const sbx = await Sandbox.create({ timeoutMs: 120_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
  out.id = sbx.sandboxId
  await sbx.files.write('/root/kept.txt', 'kept')
  const sleeper = await sbx.commands.run('sleep 600', { background: true })
  out.paused = await sbx.pause({ keepMemory: false })
  out.state = (await Sandbox.getInfo(sbx.sandboxId)).state
  out.listed = (await Sandbox.list({ query: { state: ['paused'] } }).nextItems()).some((s) => s.sandboxId === sbx.sandboxId)
  out.pausedAgain = await Sandbox.pause(sbx.sandboxId, { keepMemory: false })
  const again = await Sandbox.connect(sbx.sandboxId)
  out.kept = await again.files.read('/root/kept.txt')
  out.sleeper = (await again.commands.list()).some((p) => p.pid === sleeper.pid && p.cmd === 'sleep')
  out.stateAfter = (await again.getInfo()).state
  out.ran = (await again.commands.run('echo back')).stdout
  // The token from before the stop is the sandbox's again: the old handle
  // works, as on E2B.
  try {
    await sbx.files.read('/root/kept.txt')
    out.oldToken = 'accepted'
  } catch (e) {
    out.oldToken = e.constructor.name
  }
  // The SDK's own resume path: the same handle paused without memory and
  // connected again keeps working with the token it had.
  await sbx.pause({ keepMemory: false })
  await sbx.connect()
  out.instanceResume = (await sbx.commands.run('cat /root/kept.txt', { user: 'root' })).stdout
  // Paused with memory, connected with onResume 'reboot': the process is
  // started afresh (stop and start), the files kept.
  const bg = await again.commands.run('sleep 600', { background: true })
  await again.pause()
  const rebooted = await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' })
  out.reboot = {
    kept: await rebooted.files.read('/root/kept.txt'),
    sleeper: (await rebooted.commands.list()).some((p) => p.pid === bg.pid),
  }
  out.killed = await rebooted.kill()

  // A default sandbox: its files are not kept across a berth stop, so a
  // pause without memory pauses with memory, and its process lives on.
  const eph = await Sandbox.create({ timeoutMs: 60_000 })
  const p = await eph.commands.run('sleep 600', { background: true })
  const ms = await eph.getMetrics()
  out.metrics = {
    n: ms.length, cpuCount: ms[0]?.cpuCount, memUsed: ms[0]?.memUsed, memTotal: ms[0]?.memTotal,
    diskCap: ms[0]?.diskTotal, cpuPct: ms[0]?.cpuUsedPct,
  }
  await eph.pause({ keepMemory: false })
  out.metrics.afterPause = (await Sandbox.getMetrics(eph.sandboxId)).length
  const ephAgain = await Sandbox.connect(eph.sandboxId)
  out.ephemeral = { sleeper: (await ephAgain.commands.list()).some((x) => x.pid === p.pid), killed: await ephAgain.kill() }
  out.ok = true
} catch (e) {
  out.error = String(e && e.stack || e)
}
process.stdout.write(JSON.stringify(out))
